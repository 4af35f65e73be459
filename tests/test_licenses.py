from __future__ import annotations

from types import SimpleNamespace

import pytest

from cudapkgs import errors, licenses
from cudapkgs.licenses import License, LicenseExpression

PROPRIETARY = License("Proprietary", "Some vendor's license", free=False, redistributable=False)


def pkg(license_value):
    return SimpleNamespace(meta=SimpleNamespace(license=license_value))


class FakeConfig:
    def __init__(self, allow_unfree=False, predicate=None):
        self.allow_unfree = allow_unfree
        self.predicate = predicate

    def permits_unfree(self, package):
        return self.allow_unfree or (self.predicate is not None and self.predicate(package))


def test_to_nix():
    assert licenses.nvidiaCudaRedist.to_nix() == {
        "shortName": "CUDA EULA",
        "fullName": "CUDA Toolkit End User License Agreement (EULA)",
        "free": False,
        "redistributable": True,
    }
    assert licenses.mit.to_nix()["spdxId"] == "MIT"
    expr = LicenseExpression("or", (licenses.mit, licenses.cudnn))
    assert expr.to_nix() == {"licenseType": "or", "licenses": [licenses.mit.to_nix(), licenses.cudnn.to_nix()]}


def test_records_match_spec():
    assert licenses.nvidiaCuda.short_name == licenses.nvidiaCudaRedist.short_name == "CUDA EULA"
    assert not licenses.nvidiaCuda.redistributable
    assert licenses.nvidiaCuda != licenses.nvidiaCudaRedist
    assert licenses.cudnn.short_name == "cuDNN EULA"
    assert licenses.cusparse_lt.short_name == "cuSPARSELt EULA"
    assert licenses.cutensor.short_name == "cuTENSOR EULA"
    assert licenses.tensorrt.short_name == "TensorRT EULA"
    assert licenses.math_sdk_sla.short_name == "NVIDIA Math SDK SLA"
    assert not any(l.free for l in licenses.cuda_licenses())
    assert all(l.free for l in (licenses.mit, licenses.bsd3, licenses.asl20))
    assert licenses.CUDA_LICENSE_NAMES == {
        "CUDA EULA",
        "cuDNN EULA",
        "cuSPARSELt EULA",
        "cuTENSOR EULA",
        "TensorRT EULA",
        "NVIDIA Math SDK SLA",
    }


def test_bad_license_type():
    with pytest.raises(ValueError):
        LicenseExpression("xor", ())


@pytest.mark.parametrize(
    "redist, pname, expected",
    [
        ("cuda", "cuda_nvcc", licenses.nvidiaCudaRedist),
        ("cuda", "libcublas", licenses.nvidiaCudaRedist),
        ("cudnn", "cudnn", licenses.cudnn),
        ("tensorrt", "tensorrt", licenses.tensorrt),
        ("cusparselt", "libcusparse_lt", licenses.cusparse_lt),
        ("cutensor", "libcutensor", licenses.cutensor),
        # libcudss.nix@1ce00c199ec5a2b025e825e4874f1a2c62850184 sets no license: buildRedist default nvidiaCuda
        ("cudss", "libcudss", licenses.nvidiaCuda),
        ("nppplus", "libnpp_plus", licenses.nvidiaCuda),
    ],
)
def test_license_for_redist(redist, pname, expected):
    assert licenses.license_for_redist(redist, pname) == [expected]


@pytest.mark.parametrize(
    "license_value, allowed",
    [
        (licenses.nvidiaCuda, True),
        ([licenses.nvidiaCudaRedist], True),
        ([licenses.cudnn], True),
        ([licenses.math_sdk_sla, licenses.tensorrt], True),
        ([PROPRIETARY], False),
        (PROPRIETARY, False),
        ([licenses.mit], True),
        ([licenses.nvidiaCudaRedist, licenses.mit], True),
        ([licenses.nvidiaCudaRedist, PROPRIETARY], False),
        ([], True),
        # Lists compare by shortName: any "CUDA EULA" passes.
        ([License("CUDA EULA", "impostor", free=False, redistributable=False)], True),
        # Nix-style attribute sets work too; a missing `free` counts as unfree here.
        ([{"shortName": "cuDNN EULA"}], True),
        ([{"shortName": "Other"}], False),
    ],
)
def test_cuda_predicate_lists(license_value, allowed):
    assert licenses.allow_unfree_cuda_predicate(pkg(license_value)) is allowed


@pytest.mark.parametrize(
    "expression, allowed",
    [
        (LicenseExpression("and", (licenses.nvidiaCudaRedist, licenses.mit)), True),
        (LicenseExpression("and", (licenses.nvidiaCudaRedist, PROPRIETARY)), False),
        (LicenseExpression("or", (licenses.nvidiaCudaRedist, PROPRIETARY)), True),
        (LicenseExpression("or", (PROPRIETARY, PROPRIETARY)), False),
        (LicenseExpression("and", ()), True),
        (LicenseExpression("or", ()), True),
        (
            LicenseExpression(
                "and", (licenses.cudnn, LicenseExpression("or", (PROPRIETARY, licenses.asl20)))
            ),
            True,
        ),
        (
            LicenseExpression(
                "or", (PROPRIETARY, LicenseExpression("and", (licenses.cudnn, PROPRIETARY)))
            ),
            False,
        ),
        # Expressions compare whole records, not short names.
        (LicenseExpression("and", (License("CUDA EULA", "impostor", False, False),)), False),
        ({"licenseType": "or", "licenses": [PROPRIETARY.to_nix(), licenses.cutensor.to_nix()]}, True),
    ],
)
def test_cuda_predicate_expressions(expression, allowed):
    assert licenses.allow_unfree_cuda_predicate(pkg(expression)) is allowed


def test_predicate_on_mapping_package():
    assert licenses.allow_unfree_cuda_predicate({"meta": {"license": [licenses.cudnn]}})
    assert not licenses.allow_unfree_cuda_predicate({"meta": {"license": [PROPRIETARY]}})


def test_evaluate_property():
    free = lambda l: l.free  # noqa: E731
    assert licenses.evaluate_property(free, True, licenses.mit)
    assert not licenses.evaluate_property(free, True, licenses.cudnn)
    assert licenses.evaluate_property(free, False, LicenseExpression("or", (licenses.cudnn, licenses.mit)))
    assert not licenses.evaluate_property(free, True, LicenseExpression("and", (licenses.cudnn, licenses.mit)))
    assert licenses.evaluate_property(free, True, LicenseExpression("and", ())) is True
    assert licenses.evaluate_property(free, False, LicenseExpression("or", ())) is False


def test_is_free_and_names():
    assert licenses.is_free([licenses.mit, licenses.bsd3])
    assert licenses.is_free(None)
    assert not licenses.is_free([licenses.mit, licenses.nvidiaCuda])
    assert licenses.is_free(LicenseExpression("or", (licenses.mit, licenses.nvidiaCuda)))
    assert not licenses.is_free(LicenseExpression("and", (licenses.mit, licenses.nvidiaCuda)))
    assert licenses.license_names([licenses.nvidiaCuda, licenses.nvidiaCudaRedist]) == "CUDA EULA"
    assert licenses.license_names([licenses.cudnn, licenses.mit]) == "cuDNN EULA, MIT"
    assert licenses.license_names([licenses.cudnn, licenses.mit], unfree_only=True) == "cuDNN EULA"
    assert licenses.license_names(LicenseExpression("and", (licenses.tensorrt, licenses.asl20))) == (
        "TensorRT EULA, Apache-2.0"
    )


def test_check_unfree_allowed_message():
    package = pkg([licenses.nvidiaCudaRedist])
    with pytest.raises(errors.UnfreeLicenseError) as info:
        licenses.check_unfree_allowed(FakeConfig(), package, name="cuda12.8-libcublas-12.8.5.5")
    message = str(info.value)
    assert message == (
        'Package "cuda12.8-libcublas-12.8.5.5" has an unfree license ("CUDA EULA"), refusing to use it. '
        # the flag as typed, and the user's configuration file (a project's cudapkgs.toml takes
        # config keys only under [config], once allowed: the old "in your cudapkgs.toml" misled)
        "Allow it with --set allowUnfree=true, or --set allowUnfreePredicate=cuda "
        "(NVIDIA's CUDA licenses only), or that key in ~/.config/cudapkgs/config.toml."
    )
    assert "\n" not in message


def test_check_unfree_allowed_passes():
    licenses.check_unfree_allowed(FakeConfig(), pkg([licenses.mit]), name="x")
    licenses.check_unfree_allowed(FakeConfig(allow_unfree=True), pkg([PROPRIETARY]), name="x")
    cuda_only = FakeConfig(predicate=licenses.allow_unfree_cuda_predicate)
    licenses.check_unfree_allowed(cuda_only, pkg([licenses.cudnn]), name="cudnn")
    with pytest.raises(errors.UnfreeLicenseError, match=r'\("cuDNN EULA, Proprietary"\)'):
        licenses.check_unfree_allowed(cuda_only, pkg([licenses.cudnn, PROPRIETARY]), name="mixed")
