"""Every bench script runs in its tiny mode and prints its table, so a benchmark cannot silently rot.

Each test runs `python bench/<script> --tiny` in a fresh process and reads the Markdown
table(s) it prints: the rows the script promises are there, with numbers where numbers
belong (and the peer's ratio where the script computes one).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
GCC = shutil.which("gcc")


def run_bench(name: str, *args: str, timeout: float = 600) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(BENCH / name), "--tiny", *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, f"{name} --tiny failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of `text`: each a list of body rows, each a list of cell texts (header and rule dropped)."""
    found: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                found.append(current)
                current.append(cells)  # header, dropped below
            elif not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        else:
            current = None
    return [t[1:] for t in found]


def number(cell: str) -> float:
    return float(cell.rstrip("×").split("–")[0])


def test_tables_parser():
    text = "x\n| a | b |\n|---|---:|\n| r1 | 1.5 |\n| r2 | 2 |\n\n| c |\n| --- |\n| 3× |\n"
    assert tables(text) == [[["r1", "1.5"], ["r2", "2"]], [["3×"]]]


def test_bench_store_tiny():
    (table,) = tables(run_bench("bench_store.py"))
    assert [row[0] for row in table] == ["10", "100"]
    assert [row[1] for row in table] == ["9", "90"]  # the closure of the root: the live 90%
    for row in table:
        assert all(number(cell) >= 0 for cell in row[2:4] + row[5:7]), row
    assert table[0][4] == "" and number(table[1][4]) > -10  # verify's slope from the previous size (noisy at 10 → 100)
    assert number(table[1][7]) > 0  # the old walk's time over the new command's


def test_bench_compile_start_tiny():
    """Both rows compile (now: `popen_group`; before: the supervisor), and the printed ratios are of those medians."""
    out = run_bench("bench_compile_start.py")
    (table,) = tables(out)
    assert [row[0] for row in table] == ["now: popen_group, pidfd", "before: popen_phase (supervisor), polling"]
    assert all(number(cell) > 0 for row in table for cell in row[1:])
    assert "now / before: wall " in out and "load average before" in out


@pytest.mark.skipif(GCC is None, reason="gcc builds the ELF files")
def test_bench_patchelf_tiny():
    (table,) = tables(run_bench("bench_patchelf.py"))
    assert [row[0] for row in table] == ["patchelf per file (answer known)", "cudapkgs `fixup` (batched)", "cudapkgs hooks one by one"]
    assert table[0][4] == "1.00×" and all(number(row[4]) > 0 for row in table)


@pytest.mark.skipif(GCC is None, reason="gcc builds the synthetic wheel's library")
def test_bench_runpath_edit_tiny():
    out = run_bench("bench_runpath_edit.py")
    # the library with patchelf's X fill after its program headers is edited in place, not left to patchelf
    assert "1 ELF files; in-process edit handled 1," in out
    (table,) = tables(out)
    assert [row[0] for row in table] == ["in-process", "patchelf"]
    assert table[1][3] == "1.000" and all(number(cell) >= 0 for row in table for cell in row[1:])


@pytest.mark.skipif(GCC is None or shutil.which("tar") is None, reason="gcc builds the libraries of the synthetic archive; tar is the peer")
def test_bench_realise_tiny():
    out = run_bench("bench_realise.py", "--prefix", "/nonexistent")  # gcc-built libraries, as in CI
    rows, steps = tables(out)
    assert [row[0] for row in rows] == ["tar -xJf + patchelf per ELF file", "cudapkgs realise", "cudapkgs realise, cold download cache"]
    assert rows[0][3] == "1.00" and all(number(row[3]) > 0 for row in rows)
    assert {"fetch", "unpack", "fixup"} <= {row[0] for row in steps}
    assert "5 ELF files" in out


def test_bench_build_tiny():
    (table,) = tables(run_bench("bench_build.py"))
    assert len(table) == 7 and table[0][2] == "1.0"
    assert any("cudapkgs build <5 attrs> -o result (no-op)" in row[0] for row in table)
    assert all(number(row[1]) > 0 for row in table)


def test_bench_eval_tiny():
    out = run_bench("bench_eval.py")
    startup, everything, cold, split = tables(out)
    assert startup[0][0] == "`python -c pass (interpreter floor)`" and all(number(r[1]) > 0 for r in startup)
    # The peer row, or why there is none (nix absent, or installed without nix-command or <nixpkgs>:
    # before, an installed Nix 2.8 that could not evaluate failed the whole script).
    assert any(r[0].startswith("`nix eval") for r in startup) or "(no `nix eval` row: " in out
    cudapkgs_row = everything[0]
    assert cudapkgs_row[0] == "cudapkgs" and int(cudapkgs_row[3]) > 1000  # packages
    assert cudapkgs_row[7] == "1"  # no manifest parsed twice
    assert [row[0] for row in cold] == ["`python -I -c pass (the floor)`", "`python -c pass (with site)`",
                                        "`cudapkgs eval --no-eval-cache cudaPackages.cudaMajorMinorVersion`",
                                        "`cudapkgs list --all --no-eval-cache`"]
    assert cold[0][3] == "1.00" and cold[0][4] == "1.00" and all(number(r[2]) > 0 for r in cold)
    assert "load average before " in out
    assert len(split) == 4 and all(number(c.split(" / ")[0]) > 0 for _, c in split)


def test_bench_eval_runs_a_peer_checkouts_cudapkgs_rows_from_its_src(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_eval", BENCH / "bench_eval.py")
    bench_eval = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_eval)
    (tmp_path / "cudapkgs").mkdir()
    rows = bench_eval.cold_rows(tmp_path)
    own, peer = rows[:4], rows[4:]
    assert [label for label, _, _ in own] == [label for label, _ in bench_eval.COLD_ROWS]
    assert [label for label, _, _ in peer] == [f"{label}, peer" for label, _, _ in own[2:]]
    assert all(env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path) for _, _, env in peer)
    # this checkout's cudapkgs rows search one more directory too, as the peer's do
    assert all(env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO / "src") for _, _, env in own[2:])
    assert all(env.get("PYTHONPATH") == os.environ.get("PYTHONPATH") for _, _, env in own[:2])
    assert all("PYTHONDONTWRITEBYTECODE" not in env for _, _, env in rows)
    assert [argv for _, argv, _ in peer] == [argv for _, argv, _ in own[2:]]


def test_bench_cdi_tiny():
    (table,) = tables(run_bench("bench_cdi.py"))
    measured = [row for row in table if row[1] != "-"]
    assert len(measured) >= 3 and all(number(row[1]) > 0 for row in measured)


@pytest.mark.skipif(shutil.which("awk", path="/usr/bin:/bin") is None, reason="the CPU-bound builds are awk loops")
def test_bench_jobs_tiny():
    out = run_bench("bench_jobs.py")
    (table,) = tables(out)
    assert [row[0] for row in table] == ["bare commands, 1 at a time", "bare commands, 2 at a time", "cudapkgs build -j 1", "cudapkgs build -j 2"]
    assert number(table[1][3]) > 0 and number(table[3][3]) > 0  # the speed-ups of 2 over 1
    assert "load average (1, 5, 15 min) before" in out


@pytest.mark.skipif(shutil.which("unshare") is None, reason="bench_dask's throughput table needs unshare --mount")
def test_bench_dask_tiny():
    pytest.importorskip("distributed", reason="bench_dask needs `distributed`")
    overhead, throughput = tables(run_bench("bench_dask.py"))
    assert [row[0] for row in overhead] == ["cudapkgs run_on_dask (no-op task)", "peer: the same graph with Client.submit",
                                            "ratio (cudapkgs / peer)"]
    ours, peer = number(overhead[0][1].removesuffix(" ms")), number(overhead[1][1].removesuffix(" ms"))
    assert ours > 0 and peer > 0
    assert abs(number(overhead[2][1].removesuffix("x")) - ours / peer) < 0.02 * ours / peer + 0.01
    assert [row[0] for row in throughput] == ["1", "2", "speed-up (2 vs 1)"]
    assert number(throughput[2][1].removesuffix("x")) > 0


@pytest.mark.wheels
@pytest.mark.skipif(not (shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")), reason="the peer is uv (pip install uv)")
def test_bench_wheels_tiny(wheel_cache):
    out = run_bench("bench_wheels.py", timeout=1800)
    (table,) = tables(out)
    assert [row[0] for row in table] == [
        "uv pip install --offline, uv cache empty", "uv pip install --offline, uv cache empty, in a chattr +T directory",
        "uv pip install --offline, uv cache warm",
        "cudapkgs build -j auto, fresh store", "cudapkgs build -j auto, again after gc",
        "cudapkgs build -j 1, fresh store", "cudapkgs build -j 1, again after gc",
    ]
    assert table[0][3] == "1.00" and all(number(row[3]) > 0 for row in table)
    assert all(number(row[4]) > 0 for row in table)  # CPU seconds
    assert table[2][6] == "1.00" and all(number(row[6]) > 0 for row in table)  # × uv with its cache warm
    assert all(0 < number(row[8]) for row in table[3:])  # the cudapkgs process's own peak RSS
    assert "cudapkgs -j auto (the default) / uv, cache empty:" in out
    assert "cudapkgs -j auto again after gc / uv, cache warm:" in out
    assert "5 files" in out


@pytest.mark.wheels
def test_timeline_wheels_stamps_every_build_and_the_cores(wheel_cache):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(BENCH / "timeline_wheels.py")], capture_output=True, text=True, env=env,
                          timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert f"cudapkgs from {REPO / 'src'}" in out and "exit 0; wall" in out
    built = {line.split(" build ", 1)[1].strip() for line in out.splitlines() if " build cuda13.0-" in line}
    assert {name.split("-13.")[0] for name in built} == {
        "cuda13.0-libnvvm", "cuda13.0-cuda_cccl", "cuda13.0-cuda_crt", "cuda13.0-cuda_cudart", "cuda13.0-cuda_nvcc"}
    assert "NAR pass" in out and "cores used by this process per 50 ms" in out


@pytest.mark.skipif(GCC is None, reason="the synthetic wheel's library is built with gcc")
def test_bench_torch_tiny():
    out = run_bench("bench_torch.py", timeout=600)
    (table,) = tables(out)
    assert [row[0] for row in table] == ["cudapkgs build -j auto, fresh store, warm wheel cache",
                                         "uv pip install --offline --no-deps, uv cache empty",
                                         "uv pip install --offline --no-deps --compile-bytecode, uv cache empty"]
    assert table[1][3] == "1.00" and number(table[0][3]) > 0 and number(table[0][4]) > 0
    assert "store" in table[0][7] and "venv+cache" in table[1][7] and "venv+cache" in table[2][7]
    assert all(0 <= number(row[6]) <= number(row[4]) for row in table)  # the system seconds, of the CPU seconds
    assert "cudapkgs against uv --compile-bytecode (the same byte code compiled): wall " in out
    assert "load average before" in out and "3 files" in out
    # The tiny run realises the three wheels as one withPackages environment (as --env ml does) and
    # the bench fails unless that environment's python imports all three.
    assert "realised: tinyenv" in out


@pytest.mark.parametrize("attr, pnames", [("bench_ml_env", ["torch", "torchvision", "torchaudio", "numpy"]),
                                          ("bench_onnxruntime_env", ["onnxruntime"])])
def test_bench_torch_env_file_names_the_environments(attr, pnames):
    # bench_torch.py --env ml / --env onnxruntime build these attributes of bench/ml_env_packages.py:
    # evaluation only (no store, no network), the environment of the 13.0 set's interpreter with
    # exactly the packages the issue names.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "cudapkgs", "eval", "--no-eval-cache", "--set", "allowUnfree=true",
                           "--set", 'fetchers=["wheels"]', "-f", str(BENCH / "ml_env_packages.py"), "--json",
                           f"{attr}.buildInputs"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    inputs = json.loads(proc.stdout)
    assert [i["pname"] for i in inputs] == pnames


def test_bench_noop_tiny():
    (table,) = tables(run_bench("bench_noop.py"))
    labels = [row[0] for row in table]
    assert labels[0] == "floor" and {"eval attribute", "eval outPath", "list --all"} <= set(labels)
    if shutil.which("nix-build"):
        assert "nix-build (no-op)" in labels
    for row in table:
        assert number(row[1]) > 0 and number(row[4]) >= 0, row
    for row in table[1:]:
        if row[5]:  # measured against a peer: both ratios printed
            assert number(row[6]) > 0 and number(row[7]) > 0, row



def test_bench_noop_tiny_without_nix_build(tmp_path):
    # A machine with a compiler but no Nix: the no-op build rows name no peer and print no
    # ratio (a peer named with an empty ratio cell failed the tiny run in CI)
    if GCC is None:
        pytest.skip("the no-op build rows need a C compiler (apt-get install gcc g++)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            if not name.startswith("nix") and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(directory, name))
    env = {**os.environ, "PATH": str(bin_dir),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(BENCH / "bench_noop.py"), "--tiny"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (table,) = tables(proc.stdout)
    rows = {row[0]: row for row in table}
    assert "nix-build (no-op)" not in rows
    for label in ("no-op build", "no-op build, cold cache", "no-op build, cache off"):
        assert rows[label][5:8] == ["", "", ""] and rows[label][8] == "no nix-build here", rows[label]
    for row in table[1:]:
        if row[5]:
            assert number(row[6]) > 0 and number(row[7]) > 0, row


def test_bench_noop_tiny_against_a_peer_tree():
    # --peer-src: the cache-off rows also run from another checkout (here this one), in the same rounds
    (table,) = tables(run_bench("bench_noop.py", "--peer-src", str(REPO / "src")))
    peer = {row[0]: row for row in table if row[0].endswith(", cache off, peer")}
    assert {"eval attribute, cache off, peer", "list --all, cache off, peer"} <= set(peer)
    for row in peer.values():
        assert row[5] in ("floor", "nix-build (no-op)") and number(row[7]) > 0, row


def test_bench_verify_tiny():
    (table,) = tables(run_bench("bench_verify.py"))
    labels = [row[0] for row in table]
    assert labels[0] == "cudapkgs verify"
    if shutil.which("nix-store"):
        assert labels[1] == "nix-store --verify --check-contents" and table[1][5] == "1.00×"
        assert number(table[0][5]) > 0 and number(table[0][6]) > 0
    assert all(number(row[1]) > 0 for row in table)


@pytest.mark.skipif(not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")), reason="the peer is nginx (apt-get install nginx)")
@pytest.mark.skipif(shutil.which("wrk") is None, reason="the load generator is wrk (apt-get install wrk)")
def test_bench_serve_tiny():
    out = run_bench("bench_serve.py")
    found = tables(out)
    wrk_rows = found[0]
    assert [(row[0], row[1]) for row in wrk_rows] == [
        (what, server) for what in ("narinfo", "big NAR", "small-files NAR") for server in ("nginx", "cudapkgs serve")]
    assert all(number(row[2]) > 0 and number(row[4]) > 0 for row in wrk_rows)  # requests/s and the ratio
    assert all(row[4] == "1.00" for row in wrk_rows[::2])
    if shutil.which("nix"):
        (nginx, ours) = found[1]
        assert nginx[0] == "nginx (zstd cache)" and ours[0] == "cudapkgs serve --compression zstd"
        assert number(ours[1]) > 0 and number(ours[2]) > 0
    else:
        assert "left out: the nix copy rows: nix is not installed" in out
    assert "load average:" in out


def test_bench_nar_checks_tiny():
    """Both passes timed against the earlier revision's (or this tree's without history), agreeing on the result."""
    out = run_bench("bench_nar_checks.py")
    (table,) = tables(out)
    assert [row[0] for row in table] == ["TreePass (NAR hash)", "scan_for_hashes"]
    for row in table:
        assert all(number(cell) > 0 for cell in row[1:]), row
    assert "208 files" in out and "load average" in out


@pytest.mark.skipif(not (shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")), reason="the peer is uv (pip install uv)")
def test_bench_substitute_ml_tiny():
    out = run_bench("bench_substitute_ml.py", timeout=600)
    (table,) = tables(out)
    labels = [row[0] for row in table]
    uv = "uv pip install --offline --no-deps, uv cache empty"
    assert labels[0] == "cudapkgs copy --from file:// (zstd), empty store" and labels[-1] == uv
    if "no mount namespace here" not in out:
        # A team's server: serve --compression zstd, its kept NARs warmed in the setup (not in the row).
        assert labels[1] == "cudapkgs copy --from http:// (cudapkgs serve --compression zstd), empty store"
        assert "cudapkgs serve --compression zstd, warmed" in out
        kept = float(out.split("serve's kept zstd NARs ")[1].split(" MiB")[0])
        assert kept > 5, out  # the three NARs (12 MiB, mostly random bytes) kept compressed before any row ran
        # The server shares the cores: its CPU during the HTTP row is printed beside the table (not in the row).
        served = out.split("empty store: the server's CPU during the row (not in its CPU column; on the same cores): median ")[1]
        assert number(served.split(" s ")[0]) >= 0, out
    if shutil.which("fincore"):  # how much of each row's source was in the page cache before it (mincore)
        shares = [float(part.split(" %")[0]) for part in out.split("in the page cache before the row (fincore): median ")[1:]]
        assert shares and all(0 <= share <= 100 for share in shares), out
    assert table[-1][3] == "1.00" and table[-1][5] == "1.00"
    for row in table:
        assert number(row[1]) > 0 and number(row[4]) > 0, row  # wall and CPU seconds
        system, spread = row[6].split(" ", 1)  # the system share: on this VM it carries the swing
        low, high = (number(x) for x in spread.strip("()").split("–"))
        assert 0 <= low <= number(system) <= high and number(system) <= number(row[4]) + 0.01, row
    wall_uv, cpu_uv = number(table[-1][1]), number(table[-1][4])
    for row in table[:-1]:  # the ratios are those of the medians printed
        assert abs(number(row[3]) - number(row[1]) / wall_uv) < 0.02 + 0.08 * number(row[3]), row
        assert abs(number(row[5]) - number(row[4]) / cpu_uv) < 0.02 + 0.08 * number(row[5]), row  # from rounded cells
    assert "3 store paths" in out and "3 files" in out and "load average before" in out
    assert "cudapkgs copy --to file:// (zstd, signed):" in out


@pytest.mark.skipif(not (shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")), reason="the peer is uv (pip install uv)")
@pytest.mark.skipif(not shutil.which("fincore"), reason="the page-cache shares are read with fincore (util-linux)")
def test_bench_substitute_ml_tiny_hot_sources():
    """--hot-sources: every row's source read right before it, so each row (uv's too) starts with it all in memory."""
    out = run_bench("bench_substitute_ml.py", "--hot-sources", timeout=600)
    assert "every row's source read once, untimed, right before the row (--hot-sources)" in out
    shares = {part.split(": its source in the page cache")[0].rsplit("\n", 1)[-1]: float(part.split("median ")[1].split(" %")[0])
              for part in out.split("\n\n") if ": its source in the page cache before the row (fincore): median " in part}
    assert "uv pip install --offline --no-deps, uv cache empty" in shares, out
    assert "cudapkgs copy --from file:// (zstd), empty store" in shares, out
    assert all(share >= 99.9 for share in shares.values()), shares


def test_bench_substitute_ml_tiny_direct_writes_off():
    """The file:// row again with direct writes off (store/direct_writes.py), in the same rounds."""
    out = run_bench("bench_substitute_ml.py", "--direct-writes-off", timeout=600)
    (table,) = tables(out)
    labels = [row[0] for row in table]
    assert labels[:2] == ["cudapkgs copy --from file:// (zstd), empty store",
                          "cudapkgs copy --from file:// (zstd), empty store, direct writes off (CUDAPKGS_DIRECT_WRITES=off)"]
    assert labels[-1] == "uv pip install --offline --no-deps, uv cache empty"
    for row in table:
        assert number(row[1]) > 0 and number(row[4]) > 0, row


@pytest.mark.skipif(not (shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")), reason="the peer is uv (pip install uv)")
def test_bench_substitute_ml_tiny_serve_level_http_only():
    """--serve-level: a second zstd serve at that level, its own row and kept NARs; --http-only: no file:// row."""
    out = run_bench("bench_substitute_ml.py", "--serve-level", "19", "--http-only", timeout=600)
    (table,) = tables(out)
    labels = [row[0] for row in table]
    assert not any("file://" in label for label in labels), labels
    assert labels[-1] == "uv pip install --offline --no-deps, uv cache empty"
    if "no mount namespace here" in out:
        return
    assert labels[:2] == ["cudapkgs copy --from http:// (cudapkgs serve --compression zstd), empty store",
                          "cudapkgs copy --from http:// (cudapkgs serve --compression zstd --compression-level 19), empty store"]
    kept3 = float(out.split("serve's kept zstd NARs ")[1].split(" MiB")[0])
    kept19 = float(out.split("zstd NARs kept by the serve at --compression-level 19: ")[1].split(" MiB")[0])
    assert 0 < kept19 <= kept3, out  # (the tiny NARs are mostly random bytes: level 19 saves little on them)
    assert "cudapkgs serve --compression zstd --compression-level 19, warmed (its CPU: " in out
    assert "lo in this network namespace: " in out and "gso_max_size=" in out


def test_big_tcp_lo_never_touches_the_hosts_lo_and_sets_a_private_ones():
    """bench/big_tcp_lo.py --set refuses where other interfaces exist; under `unshare -n` (where allowed) it sets
    lo's IPv4 GSO/GRO sizes, read back by rtnetlink."""
    script = str(BENCH / "big_tcp_lo.py")
    if len(socket.if_nameindex()) > 1:
        before = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60).stdout
        refused = subprocess.run([sys.executable, script, "--set", "131072"], capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0 and "refusing" in refused.stderr
        assert subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60).stdout == before
    if not shutil.which("unshare") or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("no private network namespace here (unshare -n needs CAP_SYS_ADMIN)")
    done = subprocess.run(["unshare", "-n", sys.executable, script, "--set", "131072"], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0 and "refused" in done.stderr:
        pytest.skip(f"this kernel does not take IPv4 BIG TCP sizes: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert "gso_ipv4_max_size=131072" in done.stdout and "gro_ipv4_max_size=131072" in done.stdout


def test_bench_lo_send_tiny():
    """sendfile and send from a buffer, both ends' CPU per GiB, lo's packets and the server's segments."""
    out = run_bench("bench_lo_send.py", timeout=300)
    (table,) = tables(out)
    assert [row[0] for row in table] == ["sendfile", "send"]
    for row in table:
        assert number(row[1]) > 0 and number(row[2].split(" ")[0]) > 0, row
        assert number(row[4]) >= 1 and 0 < number(row[5]) <= 512, row  # an MSS or less each: 64 KiB on lo
    assert "lo in this network namespace: " in out and "load average before" in out


def test_bench_nar_levels_tiny():
    """Levels 3 and 9 framed, LDM at the decoders' window limit, level 19 on a sample: bytes and CPU of each."""
    out = run_bench("bench_nar_levels.py", "--levels", "3,9", "--ldm-levels", "3", "--sample-levels", "19", "--sample", "2",
                    timeout=300)
    (table,) = tables(out)
    rows = {row[0]: row for row in table}
    assert list(rows) == ["level 3, 8 MiB frames", "level 9, 8 MiB frames", "level 3, one frame, LDM, window 2^27",
                          "level 3, 8 MiB frames, every 2th frame", "level 19, 8 MiB frames, every 2th frame"]
    assert rows["level 3, 8 MiB frames"][4] == "1.000"
    # the tiny path repeats 12 MiB back: only the long window finds it
    assert number(rows["level 3, one frame, LDM, window 2^27"][4]) < 0.7
    assert number(rows["level 19, 8 MiB frames, every 2th frame"][4]) < 1.0
    for row in table:
        assert number(row[5]) > 0 and number(row[7]) > 0, row  # compression and decompression CPU
    assert "load average before" in out


def test_bench_copy_to_tiny():
    out = run_bench("bench_copy_to.py", timeout=600)
    (table,) = tables(out)
    labels = [row[0] for row in table]
    assert labels[-1] == "cudapkgs copy --to file:// (zstd, signed)"
    if shutil.which("nix"):
        assert labels[0] == "nix copy --to file://?compression=zstd (signed)"
        assert table[0][3] == "1.00" and table[0][5] == "1.00"
    else:
        assert "no Nix here" in out
    for row in table:
        assert number(row[1]) > 0 and number(row[4]) > 0 and number(row[6]) > 0, row
    assert "2 store paths" in out and "load average before" in out


@pytest.mark.wheels
def test_bench_build_after_gc_tiny(wheel_cache):
    out = run_bench("bench_build_after_gc.py", timeout=1800)
    (table,) = tables(out)
    assert [row[0] for row in table] == ["build after gc, derivations from the entry",
                                         "build after gc, evaluating (--no-eval-cache)", "no-op build (the fast path answers)"]
    assert table[1][3] == "1.00" and table[1][4] == "1.00"
    assert all(number(row[1]) > 0 and number(row[2]) > 0 for row in table)
    assert "load average before " in out


def test_bench_nar_passes_tiny():
    """The passes over one NAR: a row per NAR, five cumulative stages, each a CPU time."""
    out = run_bench("bench_nar_passes.py", timeout=300)
    (table,) = tables(out)
    assert len(table) == 1 and table[0][0] == "tiny.nar.zst"
    cpu = [number(c) for c in table[0][1:]]
    assert len(cpu) == 5 and all(c >= 0 for c in cpu)
    assert cpu[3] > 0  # the restore writes ~4 MiB and 200 files: never free


def test_bench_register_pass_tiny():
    """The registration's pass over an output, before (hash, then the read-only walk) and now (one pass)."""
    out = run_bench("bench_register_pass.py", timeout=300)
    (table,) = tables(out)
    assert [row[0] for row in table] == ["hash, then the read-only walk (before)", "one pass with nar.Freeze (now)"]
    assert all(number(row[1]) > 0 and number(row[2]) > 0 for row in table)
    assert "3062 entries" in out and "load average before " in out and "now / before: wall" in out


def test_perf_by_process_groups_samples_by_process_and_library(tmp_path):
    """bench/perf_by_process.py: the first busy process is cudapkgs; a child that ran torch code is an import check."""
    main = [f"          python 100/100  ffff{i:04x} {sym} ({dso})" for i, (sym, dso) in enumerate(
        [("isal_inflate", "/x/isal_zlib.so")] * 60 + [("sha256_block_data_order", "/usr/lib/libcrypto.so.3")] * 50
        + [("_copy_to_iter", "[kernel.kallsyms]")] * 20 + [("copy_folio_from_iter_atomic", "[kernel.kallsyms]")] * 10
        + [("schedule", "[kernel.kallsyms]")] * 5 + [("_PyEval_EvalFrameDefault", "/lib/libpython3.11.so.1.0")] * 30)]
    check = ["         python3 200/200  ffff0000 at::native::x (/store/torch/lib/libtorch_cpu.so)"] * 7
    compiler = ["         python3 300/300  ffff0000 _PyParser_ASTFromString (/lib/libpython3.11.so.1.0)"] * 9
    script = tmp_path / "s.txt"
    script.write_text("\n".join(main + check + compiler) + "\n")
    out = subprocess.run([sys.executable, str(BENCH / "perf_by_process.py"), str(script), "--hz", "10"],
                         capture_output=True, text=True, check=True).stdout
    (table,) = tables(out)
    got = {row[0]: number(row[1]) for row in table}
    assert got == {"cudapkgs: ISA-L inflate": 6.0, "cudapkgs: sha256 (OpenSSL)": 5.0, "cudapkgs: the interpreter": 3.0,
                   "cudapkgs: kernel reads (page cache to the process)": 2.0,
                   "cudapkgs: kernel writes (the process to the page cache, block allocation)": 1.0,
                   "cudapkgs: kernel, the rest": 0.5,
                   "children: import checks (torch, numpy, PIL, triton, CUDA code)": 0.7,
                   "children: python3 (byte compilation, the small import checks)": 0.9}
    assert "the cudapkgs process 100, 1 import-check processes" in out


def test_bench_zstd_oneshot_tiny():
    """zstd's single-pass path against the streaming one: three stages, both ways, CPU and wall with ratios."""
    out = run_bench("bench_zstd_oneshot.py", timeout=300)
    (table,) = tables(out)
    assert [(row[1], row[2]) for row in table] == [
        (stage, way) for stage in ("zstd", "+ sha256", "+ restore")
        for way in ("streaming, 512 KiB (copy --from)", "whole frames, 8 MiB (single pass)")]
    assert all(number(row[3]) >= 0 and number(row[4]) > 0 for row in table)
    assert all(row[5] == "1.00" for row in table[::2])
    assert "load average before " in out


def test_bench_zstd_oneshot_cuts_at_frame_ends():
    """The bench's frame splitter finds every frame end libzstd finds (content size or not, checksum or not,
    a skippable frame), and a read that holds no whole frame hands on what it has."""
    import io

    import zstandard

    sys.path.insert(0, str(BENCH))
    try:
        from bench_zstd_oneshot import WholeFrames, frame_end
    finally:
        sys.path.remove(str(BENCH))
    data = os.urandom(300_000) + b"text " * 200_000
    frames = [zstandard.ZstdCompressor(level=3, write_content_size=True).compress(data),
              zstandard.ZstdCompressor(level=1, write_content_size=False, write_checksum=True).compress(data[:5000]),
              b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"abc",
              zstandard.ZstdCompressor(level=3).compress(b"")]
    stream = bytearray(b"".join(frames))
    at, ends = 0, []
    while at < len(stream):
        at = frame_end(stream, at, len(stream))
        assert at is not None and at > 0
        ends.append(at)
    assert ends == [sum(map(len, frames[:i + 1])) for i in range(len(frames))]
    assert frame_end(stream, 0, len(frames[0]) - 1) is None  # one byte short: not whole
    assert frame_end(bytearray(b"not zstd at all"), 0, 15) == -1
    pieces = WholeFrames(io.BytesIO(bytes(stream)), 1 << 16)  # a step smaller than the first frame
    got = b""
    while piece := pieces.read():
        got += bytes(piece)
    assert got == bytes(stream)
    assert zstandard.ZstdDecompressor().stream_reader(io.BytesIO(got), read_across_frames=True).read() == data + data[:5000]


def test_bench_http_read_tiny():
    out = run_bench("bench_http_read.py", timeout=300)
    (table,) = tables(out)
    labels = [row[0] for row in table]
    assert labels == ["read", "readinto", "raw", "file", "read + zstd + sha256", "readinto + zstd + sha256", "raw + zstd + sha256",
                      "file + zstd + sha256"]
    assert table[0][3] == "1.00" and table[4][3] == "1.00"
    for row in table:
        assert number(row[1]) >= 0 and number(row[2]) >= 0 and number(row[5]) >= 0, row
    packets = {row[0]: number(row[6]) for row in table}  # lo's packets per MiB of body (data and ACKs)
    assert packets["raw"] >= 1 and packets["readinto"] >= 1, packets  # 512 KiB a packet at most
    assert "11.8 MiB" in out and "load average before" in out


def test_bench_direct_writes_tiny():
    out = run_bench("bench_direct_writes.py", timeout=300)
    (table,) = tables(out)
    assert [row[0] for row in table] == ["stream: one 32 MiB file, hashed and written", "sizes: 32 files of 1024 KiB",
                                         "sizes: 4 files of 8192 KiB"]
    for row in table:
        assert all(number(cell.split(" ")[0]) > 0 for cell in row[1:]), row
        assert abs(number(row[3]) - number(row[1]) / number(row[2])) < 0.02 + 0.05 * number(row[3]), row
    assert "load average before" in out and "untimed sync" in out
