"""ELF files: reading dynamic sections (`read`), RUNPATH edits in process (`edit`) or by patchelf (`patch`), link stubs (`link_stub`)."""
