"""An output's bytes that name a valid store path outside its input closure record it as a reference.

onnxruntime's RUNPATH named cuFFT's lib output (``appendRunpaths``) although cuFFT was none of its
inputs: the scan, which looks for the input closure's hash parts only, did not record it, so gc or a
closure export (the GPU machine's) would drop a library its files load.
"""

from __future__ import annotations

from pathlib import Path

from cudapkgs.store.paths import make_store_path
from cudapkgs.store.store import Store


def _valid(store: Store, name: str) -> str:
    path = make_store_path(store.store_dir, "output:out", name, name)

    def build(dirs: dict[str, Path]) -> None:
        (dirs[path] / "lib").mkdir(parents=True)
        (dirs[path] / "lib" / "libx.so").write_bytes(b"\x7fELF")
    store.add_outputs([path], build)
    return path


def test_a_valid_path_named_in_full_outside_the_inputs_is_a_reference(tmp_path):
    with Store.open(tmp_path / "store") as store:
        cufft = _valid(store, "cuda13.0-libcufft-12.0.0.61-lib")
        cudart = _valid(store, "cuda13.0-cuda_cudart-13.0.96-lib")
        stranger = _valid(store, "unrelated-1.0")
        absent = make_store_path(store.store_dir, "output:out", "never-built", "never-built")
        out = make_store_path(store.store_dir, "output:out", "ort", "onnxruntime-1.31.1")

        def build(dirs: dict[str, Path]) -> None:
            (dirs[out] / "capi").mkdir(parents=True)
            # a RUNPATH as patchelf writes it: input first, then the path no input brought, then one not in the store
            (dirs[out] / "capi" / "provider.so").write_bytes(
                b"\x7fELF\0" + f"{cudart}/lib:{cufft}/lib:$ORIGIN:{absent}/lib\0".encode())

        store.add_outputs([out], build, references_candidates=[cudart])
        refs = set(store.query(out).references)
    assert refs == {cudart, cufft}  # cuFFT's found though no candidate; the unrelated one not named; the absent one not valid
    assert stranger not in refs
