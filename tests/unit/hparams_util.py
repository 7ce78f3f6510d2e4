"""GGUF files with hparam keys edited in memory, for the hparam reader tests
(test_gdn_hparams.py, test_lfm2_hparams.py, test_nemotronh_hparams.py)."""
from __future__ import annotations

import pathlib

from toolkit.gguf_io import GGUFFile

LLAMACPP = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp"
ABSENT = object()   # a value that drops the key


def edited_file(path, **kv) -> GGUFFile:
    """The file with keys ``{arch}.KEY`` (dots as '__') replaced; ABSENT drops one."""
    f = GGUFFile(str(path))
    arch, get = f.arch, f.get
    over = {f"{arch}.{k.replace('__', '.')}": v for k, v in kv.items()}

    def patched(key, default=None):
        full = f._resolve(key)
        if full in over:
            return default if over[full] is ABSENT else over[full]
        return get(key, default)
    f.get = patched
    return f


def edited(name: str, **kv) -> GGUFFile:
    """llama.cpp's tests/fixtures/llamacpp/NAME.f32.gguf with keys edited (see edited_file)."""
    return edited_file(LLAMACPP / f"{name}.f32.gguf", **kv)
