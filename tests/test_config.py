from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudapkgs import errors, licenses
from cudapkgs.config import OPTIONS, Config, Option, load_config, parse_set


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def pkg(*license_list):
    return SimpleNamespace(meta=SimpleNamespace(license=list(license_list)))


# --- defaults and access ------------------------------------------------------


def test_defaults():
    config = Config()
    assert config.cudaSupport is False
    assert config.rocmSupport is False
    assert config.cudaCapabilities == []
    assert config.cudaForwardCompat is True
    assert config.allowUnfree is False
    assert config.allowUnfreePredicate is None
    assert config.allowAliases is True
    assert config.manifestsDir is None
    assert config["cudaForwardCompat"] is True
    assert set(OPTIONS) == set(config.to_nix())


def test_options_table():
    assert all(isinstance(option, Option) for option in OPTIONS.values())
    assert all(option.kind in {"bool", "str", "str-list", "predicate", "path", "path-list"} for option in OPTIONS.values())
    assert all(option.doc for option in OPTIONS.values())


def test_unknown_attribute():
    with pytest.raises(AttributeError, match='did you mean "cudaSupport"'):
        Config().cudaSuport
    with pytest.raises(KeyError):
        Config()["nope"]


def test_immutable():
    config = Config()
    with pytest.raises(AttributeError):
        config.cudaSupport = True
    config.cudaCapabilities.append("8.9")
    assert config.cudaCapabilities == []


def test_replace_and_equality():
    base = Config()
    changed = base.replace(cudaSupport=True, cudaCapabilities=["8.9", "9.0"])
    assert base.cudaSupport is False
    assert changed.cudaSupport is True
    assert changed.cudaCapabilities == ["8.9", "9.0"]
    again = Config().replace(cudaCapabilities=("8.9", "9.0"), cudaSupport=True)
    assert changed == again and hash(changed) == hash(again)
    assert changed != base
    assert len({base, changed, again}) == 2
    assert Config({"cudaSupport": True}) == Config().replace(cudaSupport=True)


def test_order_kept_no_dedup():
    config = Config().replace(cudaCapabilities=["9.0", "8.9", "9.0"])
    assert config.cudaCapabilities == ["9.0", "8.9", "9.0"]
    assert config != Config().replace(cudaCapabilities=["8.9", "9.0"])


def test_predicates_compare_by_identity():
    def a(package):
        return True

    def b(package):
        return True

    assert Config().replace(allowUnfreePredicate=a) == Config().replace(allowUnfreePredicate=a)
    assert Config().replace(allowUnfreePredicate=a) != Config().replace(allowUnfreePredicate=b)
    cuda1 = Config().replace(allowUnfreePredicate="cuda")
    cuda2 = Config().replace(allowUnfreePredicate=licenses.allow_unfree_cuda_predicate)
    assert cuda1 == cuda2 and hash(cuda1) == hash(cuda2)


def test_to_nix():
    config = Config().replace(allowUnfreePredicate="cuda", cudaCapabilities=["8.9"])
    nix = config.to_nix()
    assert nix["allowUnfreePredicate"] == "cuda"
    assert nix["cudaCapabilities"] == ["8.9"]
    assert Config().replace(allowUnfreePredicate=lambda p: True).to_nix()["allowUnfreePredicate"] == "<function>"
    assert Config().to_nix()["allowUnfreePredicate"] is None


def test_copy_and_pickle():
    config = Config().replace(cudaSupport=True, allowUnfreePredicate="cuda")
    assert copy.copy(config) is config
    assert copy.deepcopy(config) is config
    assert pickle.loads(pickle.dumps(config)) == config


def test_permits_unfree():
    assert not Config().permits_unfree(pkg(licenses.nvidiaCuda))
    assert Config().replace(allowUnfree=True).permits_unfree(pkg(licenses.nvidiaCuda))
    cuda = Config().replace(allowUnfreePredicate="cuda")
    assert cuda.permits_unfree(pkg(licenses.nvidiaCuda))
    assert cuda.permits_unfree(pkg(licenses.cudnn))
    other = licenses.License("Other", "Other", free=False, redistributable=False)
    assert not cuda.permits_unfree(pkg(other))
    licenses.check_unfree_allowed(cuda, pkg(licenses.cudnn), name="cudnn")
    with pytest.raises(errors.UnfreeLicenseError):
        licenses.check_unfree_allowed(cuda, pkg(other), name="other")


# --- parse_set ------------------------------------------------------------------


@pytest.mark.parametrize(
    "assignment, expected",
    [
        ("cudaSupport=true", ("cudaSupport", True)),
        ('cudaCapabilities=["8.9","9.0"]', ("cudaCapabilities", ["8.9", "9.0"])),
        ('allowUnfreePredicate="cuda"', ("allowUnfreePredicate", "cuda")),
        ("allowUnfreePredicate=cuda", ("allowUnfreePredicate", "cuda")),
        ("manifestsDir=/srv/manifests", ("manifestsDir", "/srv/manifests")),
        (" cudaForwardCompat = false ", ("cudaForwardCompat", False)),
        ("x=a=b", ("x", "a=b")),
        ("x=1\ny=2", ("x", "1\ny=2")),
        ("x=8.9", ("x", 8.9)),
    ],
)
def test_parse_set(assignment, expected):
    assert parse_set(assignment) == expected


def _as_toml_reads_it(text: str):
    import tomllib

    try:
        parsed = tomllib.loads(f"v = {text.strip()}")
    except tomllib.TOMLDecodeError:
        return text.strip()
    return parsed["v"] if set(parsed) == {"v"} else text.strip()


@given(st.one_of(st.sampled_from(["true", "false", "True", "0", "00", "007", "1_000", "+1", "-0", "\u0661", "\u00b2",
                                  " true ", "0x1f", "1e3", "99999999999999999999999"]),
                 st.from_regex(r"[0-9+_-]{1,6}", fullmatch=True), st.text(alphabet="0123456789truefals\u0663", max_size=6)))
def test_parse_set_reads_a_value_as_toml_does(text):
    # booleans and plain integers are read without tomllib: the same values, of the same type
    key, value = parse_set("k=" + text)
    expected = _as_toml_reads_it(text)
    assert (key, value, type(value)) == ("k", expected, type(expected))


@pytest.mark.parametrize("digits", [4301, 5000, 100_000])
def test_parse_set_an_integer_too_long_for_int_is_a_string_not_an_internal_error(digits):
    # int() refuses more than 4,300 digits (ValueError): `--set x=999...` was exit 70, "internal error"
    for text in ("9" * digits, "+" + "9" * digits, "-" + "9" * digits, "1_" + "0" * digits):
        assert parse_set("k=" + text) == ("k", text)


@pytest.mark.parametrize("assignment", ["cudaSupport", "=true", ""])
def test_parse_set_usage_error(assignment):
    with pytest.raises(errors.UsageError, match="KEY=VALUE"):
        parse_set(assignment)


# --- errors -----------------------------------------------------------------------


def one_line_config_error(**kwargs) -> str:
    with pytest.raises(errors.ConfigError) as info:
        load_config(**kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_key_in_file(tmp_path):
    path = write(tmp_path / "cudapkgs.toml", 'cudaCapabilites = ["8.9"]\n')
    message = one_line_config_error(file=path)
    assert message == (
        f'{path}: unknown configuration key "cudaCapabilites" (did you mean "cudaCapabilities"?)'
    )


def test_relative_file_name_in_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "cudapkgs.toml", "cudaSuport = true\n")
    message = one_line_config_error(file="cudapkgs.toml")
    assert message.startswith('cudapkgs.toml: unknown configuration key "cudaSuport"')
    assert '(did you mean "cudaSupport"' in message


def test_wrong_type_from_set():
    message = one_line_config_error(sets=["cudaForwardCompat=yes"])
    assert message == '--set cudaForwardCompat: expected a boolean, got the string "yes"'


def test_wrong_type_from_file(tmp_path):
    path = write(tmp_path / "c.toml", "allowUnfree = 1\n")
    message = one_line_config_error(file=path)
    assert message == f"{path}: allowUnfree: expected a boolean, got the integer 1"


def test_wrong_type_from_overrides():
    message = one_line_config_error(overrides={"cudaSupport": "true"})
    assert message == 'import_pkgs(config=…): cudaSupport: expected a boolean, got the string "true"'


def test_unknown_key_from_overrides_and_set():
    assert 'import_pkgs(config=…): unknown configuration key "allowUnfre"' in one_line_config_error(
        overrides={"allowUnfre": True}
    )
    message = one_line_config_error(sets=["rocmSuport=true"])
    assert message.startswith('--set: unknown configuration key "rocmSuport" (did you mean "rocmSupport"')


def test_capabilities_must_be_a_list():
    message = one_line_config_error(sets=["cudaCapabilities=8.9"])
    assert "--set cudaCapabilities: expected a list of strings, got the float 8.9" in message
    assert '["8.9"]' in message
    message = one_line_config_error(sets=["cudaCapabilities=[8.9]"])
    assert "got a list containing the float 8.9" in message


@pytest.mark.parametrize(
    "capability, hint",
    [("sm_89", 'write "8.9"'), ("compute_90a", 'write "9.0a"'), ("sm_100f", 'write "10.0f"'), ("89", 'write "8.9"')],
)
def test_capability_syntax_hint(capability, hint):
    message = one_line_config_error(overrides={"cudaCapabilities": ["8.9", capability]})
    assert f'"{capability}" is not a CUDA capability' in message
    assert hint in message
    assert message.startswith("import_pkgs(config=…): cudaCapabilities:")


@pytest.mark.parametrize("capability", ["8", "8.9b", "ampere", "8.9.1", ""])
def test_capability_syntax_rejected(capability):
    message = one_line_config_error(overrides={"cudaCapabilities": [capability]})
    assert "is not a CUDA capability" in message


@given(st.integers(0, 200), st.integers(0, 99), st.sampled_from(["", "a", "f"]))
def test_capability_syntax_accepted(major, minor, suffix):
    capability = f"{major}.{minor}{suffix}"
    assert Config().replace(cudaCapabilities=[capability]).cudaCapabilities == [capability]


def test_malformed_toml(tmp_path):
    path = write(tmp_path / "bad.toml", "cudaSupport = \n")
    message = one_line_config_error(file=path)
    assert message.startswith(f"{path}: invalid TOML: ")
    assert "line 1" in message


def test_unreadable_file(tmp_path):
    missing = tmp_path / "missing.toml"
    message = one_line_config_error(file=missing)
    assert message.startswith(f"{missing}: cannot read configuration file")
    assert "No such file" in message


def test_unreadable_env_file(tmp_path):
    missing = tmp_path / "gone.toml"
    message = one_line_config_error(env={"CUDAPKGS_CONFIG": str(missing)})
    assert str(missing) in message and "CUDAPKGS_CONFIG" in message


def test_env_file_errors_name_the_variable(tmp_path):
    path = write(tmp_path / "env.toml", "cudaSupport = 'yes'\n")
    message = one_line_config_error(env={"CUDAPKGS_CONFIG": str(path)})
    assert message.startswith(f"{path} (from CUDAPKGS_CONFIG): cudaSupport: expected a boolean")


def test_unknown_predicate():
    message = one_line_config_error(sets=["allowUnfreePredicate=cdua"])
    assert message.startswith("--set allowUnfreePredicate:")
    assert '"cdua"' in message and 'did you mean "cuda"' in message
    message = one_line_config_error(overrides={"allowUnfreePredicate": 3})
    assert "expected a function or the string \"cuda\", got the integer 3" in message


def test_nested_table_is_unknown_key(tmp_path):
    path = write(tmp_path / "c.toml", "[cuda]\nsupport = true\n")
    assert 'unknown configuration key "cuda"' in one_line_config_error(file=path)


# --- precedence ----------------------------------------------------------------------


def test_precedence(tmp_path):
    xdg = tmp_path / "xdg"
    write(
        xdg / "cudapkgs" / "config.toml",
        'cudaSupport = true\ncudaCapabilities = ["7.5"]\nallowUnfree = true\nallowAliases = false\n'
        "rocmSupport = true\n",
    )
    env_file = write(tmp_path / "env.toml", 'cudaCapabilities = ["8.0"]\nallowUnfree = false\ncudaForwardCompat = false\n')
    explicit = write(tmp_path / "explicit.toml", 'cudaCapabilities = ["8.6"]\ncudaForwardCompat = true\nrocmSupport = false\n')
    env = {"XDG_CONFIG_HOME": str(xdg), "CUDAPKGS_CONFIG": str(env_file)}

    config = load_config(env=env)
    assert config.cudaSupport is True  # user file
    assert config.allowAliases is False  # user file
    assert config.cudaCapabilities == ["8.0"]  # CUDAPKGS_CONFIG over the user file
    assert config.allowUnfree is False
    assert config.cudaForwardCompat is False

    config = load_config(env=env, file=explicit)
    assert config.cudaCapabilities == ["8.6"]  # file over CUDAPKGS_CONFIG
    assert config.cudaForwardCompat is True
    assert config.rocmSupport is False
    assert config.cudaSupport is True

    config = load_config(env=env, file=explicit, overrides={"cudaCapabilities": ["8.9"]})
    assert config.cudaCapabilities == ["8.9"]  # overrides over the file

    config = load_config(
        env=env,
        file=explicit,
        overrides={"cudaCapabilities": ["8.9"], "cudaSupport": False},
        sets=['cudaCapabilities=["9.0"]', 'cudaCapabilities=["9.0a", "10.0"]'],
    )
    assert config.cudaCapabilities == ["9.0a", "10.0"]  # --set over everything; the last --set wins
    assert config.cudaSupport is False


def test_user_file_from_process_environment(monkeypatch):
    # conftest points XDG_CONFIG_HOME at a temporary directory.
    xdg = Path(os.environ["XDG_CONFIG_HOME"])
    write(xdg / "cudapkgs" / "config.toml", "cudaSupport = true\n")
    assert load_config().cudaSupport is True
    monkeypatch.setenv("CUDAPKGS_CONFIG", "")
    assert load_config().cudaSupport is True


def test_no_files_gives_defaults(tmp_path):
    assert load_config(env={"XDG_CONFIG_HOME": str(tmp_path)}) == Config()


def test_user_file_falls_back_to_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path / ".config" / "cudapkgs" / "config.toml", "allowAliases = false\n")
    assert load_config(env={}).allowAliases is False


# --- paths ---------------------------------------------------------------------------


def test_relative_manifests_dir_is_relative_to_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "conf" / "cudapkgs.toml", 'manifestsDir = "../manifests"\n')
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    config = load_config(file=path)
    assert config.manifestsDir == str(tmp_path / "manifests")
    path = write(tmp_path / "conf" / "abs.toml", f'manifestsDir = "{tmp_path / "abs"}"\n')
    assert load_config(file=path).manifestsDir == str(tmp_path / "abs")


def test_relative_manifests_dir_from_set_is_relative_to_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config(sets=["manifestsDir=m"]).manifestsDir == str(tmp_path / "m")
    assert load_config(overrides={"manifestsDir": Path("n")}).manifestsDir == str(tmp_path / "n")
    assert load_config(overrides={"manifestsDir": None}).manifestsDir is None
    assert Config().merged({"manifestsDir": "x"}, source="test", relative_to="/base").manifestsDir == "/base/x"


def test_none_only_for_optional_keys():
    message = one_line_config_error(overrides={"cudaSupport": None})
    assert "cudaSupport: expected a boolean" in message


def test_fetchers_are_validated():
    assert load_config(sets=['fetchers=["mirror:/srv/nvidia", "wheels"]'], env={}).fetchers == ["mirror:/srv/nvidia", "wheels"]
    assert load_config(env={}).fetchers == ["redist", "wheels"]
    for bad, needle in (('fetchers=["wheel"]', 'did you mean "wheels"'), ('fetchers=["mirror:"]', "mirror:<dir"), ("fetchers=[]", "at least one")):
        with pytest.raises(errors.ConfigError, match=needle):
            load_config(sets=[bad], env={})


def test_plain_string_values_of_set_read_as_tomllib_reads_them():
    """--set's fast path for "x" and ["a", "b"] (no tomllib import) gives what tomllib gives, or leaves it to tomllib."""
    import itertools
    import tomllib

    from cudapkgs.config import _plain_toml_strings, parse_set

    pieces = ['"', "[", "]", ",", " ", "\t", "a", "9.0", "\\", "'", "#", "é", ""]
    texts = {"".join(p) for n in range(1, 6) for p in itertools.product(pieces, repeat=n)}
    agreed = 0
    for text in sorted(texts):
        fast = _plain_toml_strings(text)
        if fast is None:
            continue
        assert tomllib.loads(f"v = {text}") == {"v": fast}, text
        agreed += 1
    assert agreed > 50
    assert parse_set('fetchers=["wheels"]') == ("fetchers", ["wheels"])
    assert parse_set('x=["a,b", "c"]') == ("x", ["a,b", "c"])  # left to tomllib, same answer


@pytest.mark.parametrize("value", ["{secret}", ["{secret}"], ["lab-1:" + "A" * 43 + "=", "{secret}"]])
def test_a_secret_key_given_as_trusted_public_keys_is_not_echoed(value):
    """A secret key set as trustedPublicKeys (a string, not a list) was echoed whole, twice ("got the string
    "k:…" (write ["k:…"])"); the first 24 characters of one in a list, 16 bytes of its seed with a short name."""
    from cudapkgs.store.caches.signing import generate

    secret = str(generate("k"))
    data = secret.split(":", 1)[1]
    value = value.replace("{secret}", secret) if isinstance(value, str) else [v.replace("{secret}", secret) for v in value]
    with pytest.raises(errors.ConfigError) as caught:
        Config().merged({"trustedPublicKeys": value}, source="--set")
    said = str(caught.value)
    assert "trustedPublicKeys" in said and "'k:…' (90 characters)" in said
    assert not any(data[i:i + 6] in said for i in range(len(data) - 5)), said
