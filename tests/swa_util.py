"""Test models with sliding-window attention layers (no released family here has them yet).

``make_swa(src, dst, window, pattern)`` copies a converted GGUF (every key and tensor as they
are) and adds llama.cpp's ``{arch}.attention.sliding_window`` = window and
``{arch}.attention.sliding_window_pattern`` (per layer, true = sliding).  ``swa_lfm2(tmp)``:
lfm2-tiny (conv, attention, conv, attention) with layer 3 sliding (window 5) and layer 1 full,
so the runtime keeps a full and a sliding-window KV cache next to the conv states.
"""
from __future__ import annotations

import pathlib

import gguf
import numpy as np

from toolkit.gguf_io.reader import GGUFFile

HF = pathlib.Path(__file__).parent / "fixtures" / "hf"


def make_swa(src, dst, window: int, pattern: list[bool] | None) -> str:
    f = GGUFFile(str(src))
    arch = f.arch
    w = gguf.GGUFWriter(str(dst), arch)
    for kv in f.kv:
        if kv.key == gguf.Keys.General.ARCHITECTURE:
            continue
        w.add_key_value(kv.key, kv.value, kv.type, sub_type=kv.sub_type)
    w.add_key_value(f"{arch}.attention.sliding_window", int(window), gguf.GGUFValueType.INT32)
    if pattern is not None:
        w.add_key_value(f"{arch}.attention.sliding_window_pattern", [bool(x) for x in pattern],
                        gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
    for t in f:
        if t.type == gguf.GGMLQuantizationType.F32:
            w.add_tensor(t.name, np.array(f.array(t.name)))
        else:
            w.add_tensor(t.name, np.array(f.raw(t.name)), raw_shape=tuple(reversed(t.shape)),
                         raw_dtype=gguf.GGMLQuantizationType(t.type))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(dst)


def swa_lfm2(tmp: pathlib.Path, window: int = 5, pattern=(False, False, False, True)) -> str:
    """lfm2-tiny converted to f32 with the given sliding layers (default: layer 3, window 5)."""
    from toolkit.convert import convert
    base = tmp / "lfm2-tiny.f32.gguf"
    if not base.exists():
        convert(str(HF / "lfm2-tiny"), str(base), "f32")
    out = tmp / f"lfm2-swa{window}-{''.join('s' if x else 'f' for x in pattern)}.f32.gguf"
    if not out.exists():
        make_swa(base, out, window, list(pattern))
    return str(out)
