#!/usr/bin/env python3
"""llama-quantize's library call (llama_model_quantize) through ctypes, for machines that have
llama.cpp's libllama.so but not its llama-quantize binary.  Same arguments as
``llama-quantize INPUT OUTPUT TYPE NTHREADS`` (no --imatrix / overrides); the library's default
parameters otherwise (llama_model_quantize_default_params), as the binary uses them.

Usage:
    python tools/llama_quantize_ctypes.py LIBLLAMA.so INPUT.gguf OUTPUT.gguf TYPE [NTHREADS=2]
"""
from __future__ import annotations

import ctypes
import sys

from toolkit.quantize.types import file_type


class Params(ctypes.Structure):
    # include/llama.h llama_model_quantize_params (llama.cpp 0c1e570)
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p), ("max_buf_size", ctypes.c_size_t)]


def main(argv: list[str]) -> int:
    lib_path, src, dst, typ = argv[:4]
    nthread = int(argv[4]) if len(argv) > 4 else 2
    lib = ctypes.CDLL(lib_path)
    lib.llama_model_quantize_default_params.restype = Params
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Params)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_backend_init()
    p = lib.llama_model_quantize_default_params()
    p.nthread = nthread
    p.ftype = int(file_type(typ).ftype)
    rc = lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
