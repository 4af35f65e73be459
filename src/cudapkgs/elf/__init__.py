"""ELF files: reading dynamic sections (`read`), RUNPATH edits in process (`edit`) or by patchelf (`patch`), link stubs (`link_stub`)."""


def __getattr__(name: str) -> object:
    # the names of the old `cudapkgs.elf` module fail naming the module that holds them now
    from ..old_paths import moved_name

    raise moved_name(__name__, name)
