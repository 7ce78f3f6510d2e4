#!/usr/bin/env python3
"""Every position's logits from llama.cpp's libllama (through ctypes), for machines that have
llama.cpp's shared libraries but not its binaries.  A dev-time cross-check tool: nothing in the
package or the tests imports it (docs/llamacpp-crosscheck.md has the figures it gave).

    logits_of(LIBLLAMA, GGUF, tokens, n_ubatch=..., f32_cache=True) -> float32 [n_tok, n_vocab]

loads GGUF with llama_model_load_from_file (CPU, default model parameters), makes a context with
llama_init_from_model (n_ctx = max(128, n_tok + 32), n_batch = n_tok, n_ubatch as given, one
sequence, flash attention off, the KV cache in GGML_TYPE_F32 when f32_cache, else llama.cpp's
default F16), decodes the tokens in one llama_decode call with an output at every position, and
copies llama_get_logits.  A file llama.cpp refuses raises LoadError (the library's own log lines
go to stderr).  The struct layouts are include/llama.h of llama.cpp 0c1e570
(llama-cpp-python 0.3.36's vendored copy); another commit may differ.

Command line (the reference's tokens; prints relative L2 against HF's logits and against
toolkit's on the same file, top-1 agreement, and the 16-token greedy continuation):
    python tools/llama_logits_ctypes.py LIBLLAMA.so FILE.gguf REFERENCE.npz [--ubatch N] [--f16-cache]
"""
from __future__ import annotations

import ctypes
import sys

import numpy as np

GGML_TYPE_F32 = 0
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0

_c_p = ctypes.c_void_p


class ModelParams(ctypes.Structure):
    # include/llama.h struct llama_model_params (0c1e570)
    _fields_ = [("devices", _c_p), ("tensor_buft_overrides", _c_p), ("n_gpu_layers", ctypes.c_int32),
                ("split_mode", ctypes.c_int), ("load_mode", ctypes.c_int), ("lazy_mode", ctypes.c_int),
                ("main_gpu", ctypes.c_int32), ("tensor_split", _c_p), ("progress_callback", _c_p),
                ("progress_callback_user_data", _c_p), ("kv_overrides", _c_p), ("vocab_only", ctypes.c_bool),
                ("check_tensors", ctypes.c_bool), ("use_extra_bufts", ctypes.c_bool), ("no_host", ctypes.c_bool),
                ("no_alloc", ctypes.c_bool), ("load_mtp", ctypes.c_bool)]


class ContextParams(ctypes.Structure):
    # include/llama.h struct llama_context_params (0c1e570)
    _fields_ = [("n_ctx", ctypes.c_uint32), ("n_batch", ctypes.c_uint32), ("n_ubatch", ctypes.c_uint32),
                ("n_seq_max", ctypes.c_uint32), ("n_rs_seq", ctypes.c_uint32), ("n_outputs_max", ctypes.c_uint32),
                ("n_outputs_max_per_seq", ctypes.c_uint32), ("n_threads", ctypes.c_int32),
                ("n_threads_batch", ctypes.c_int32), ("ctx_type", ctypes.c_int), ("rope_scaling_type", ctypes.c_int),
                ("pooling_type", ctypes.c_int), ("attention_type", ctypes.c_int), ("flash_attn_type", ctypes.c_int),
                ("rope_freq_base", ctypes.c_float), ("rope_freq_scale", ctypes.c_float),
                ("yarn_ext_factor", ctypes.c_float), ("yarn_attn_factor", ctypes.c_float),
                ("yarn_beta_fast", ctypes.c_float), ("yarn_beta_slow", ctypes.c_float),
                ("yarn_orig_ctx", ctypes.c_uint32), ("defrag_thold", ctypes.c_float), ("cb_eval", _c_p),
                ("cb_eval_user_data", _c_p), ("type_k", ctypes.c_int), ("type_v", ctypes.c_int),
                ("abort_callback", _c_p), ("abort_callback_data", _c_p), ("embeddings", ctypes.c_bool),
                ("offload_kqv", ctypes.c_bool), ("no_perf", ctypes.c_bool), ("op_offload", ctypes.c_bool),
                ("swa_full", ctypes.c_bool), ("kv_unified", ctypes.c_bool), ("samplers", _c_p),
                ("n_samplers", ctypes.c_size_t), ("ctx_other", _c_p)]


class Batch(ctypes.Structure):
    # include/llama.h struct llama_batch
    _fields_ = [("n_tokens", ctypes.c_int32), ("token", ctypes.POINTER(ctypes.c_int32)),
                ("embd", ctypes.POINTER(ctypes.c_float)), ("pos", ctypes.POINTER(ctypes.c_int32)),
                ("n_seq_id", ctypes.POINTER(ctypes.c_int32)),
                ("seq_id", ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))), ("logits", ctypes.POINTER(ctypes.c_int8))]


class LoadError(RuntimeError):
    pass


_LIBS: dict[str, ctypes.CDLL] = {}


def _lib(path: str) -> ctypes.CDLL:
    if path in _LIBS:
        return _LIBS[path]
    lib = ctypes.CDLL(path)
    lib.llama_model_default_params.restype = ModelParams
    lib.llama_context_default_params.restype = ContextParams
    lib.llama_model_load_from_file.argtypes = [ctypes.c_char_p, ModelParams]
    lib.llama_model_load_from_file.restype = _c_p
    lib.llama_init_from_model.argtypes = [_c_p, ContextParams]
    lib.llama_init_from_model.restype = _c_p
    lib.llama_model_get_vocab.argtypes = [_c_p]
    lib.llama_model_get_vocab.restype = _c_p
    lib.llama_vocab_n_tokens.argtypes = [_c_p]
    lib.llama_vocab_n_tokens.restype = ctypes.c_int32
    lib.llama_batch_init.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
    lib.llama_batch_init.restype = Batch
    lib.llama_batch_free.argtypes = [Batch]
    lib.llama_decode.argtypes = [_c_p, Batch]
    lib.llama_decode.restype = ctypes.c_int32
    lib.llama_get_logits.argtypes = [_c_p]
    lib.llama_get_logits.restype = ctypes.POINTER(ctypes.c_float)
    lib.llama_free.argtypes = [_c_p]
    lib.llama_model_free.argtypes = [_c_p]
    lib.llama_backend_init()
    _LIBS[path] = lib
    return lib


def _decode(lib, ctx, toks: list[int], pos0: int, n_vocab: int) -> np.ndarray:
    """One llama_decode of toks at positions pos0.. (sequence 0), an output at every position."""
    n = len(toks)
    b = lib.llama_batch_init(n, 0, 1)
    try:
        b.n_tokens = n
        for i, t in enumerate(toks):
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1
        rc = lib.llama_decode(ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return np.ctypeslib.as_array(lib.llama_get_logits(ctx), shape=(n, n_vocab)).copy()
    finally:
        lib.llama_batch_free(b)


def run(lib_path: str, gguf: str, tokens, n_ubatch: int | None = None, f32_cache: bool = True,
        n_greedy: int = 0, suppress=(), n_threads: int = 2) -> tuple[np.ndarray, list[int]]:
    """(float32 [len(tokens), n_vocab] logits of one decode call, split into ubatches of n_ubatch
    tokens (None = all at once); then the n_greedy-token argmax continuation, one token a call,
    the ids in suppress never chosen).  Raises LoadError when the model or the context does not
    load, RuntimeError when llama_decode fails."""
    lib = _lib(lib_path)
    toks = [int(t) for t in tokens]
    n = len(toks)
    mp = lib.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = lib.llama_model_load_from_file(gguf.encode(), mp)
    if not model:
        raise LoadError(f"{gguf}: llama_model_load_from_file returned NULL")
    ctx = None
    try:
        cp = lib.llama_context_default_params()
        cp.n_ctx = max(128, n + n_greedy + 32)
        cp.n_batch = max(n, 1)
        cp.n_ubatch = n_ubatch or max(n, 1)
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = n_threads
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED
        if f32_cache:
            cp.type_k = cp.type_v = GGML_TYPE_F32
        ctx = lib.llama_init_from_model(model, cp)
        if not ctx:
            raise LoadError(f"{gguf}: llama_init_from_model returned NULL")
        n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
        logits = _decode(lib, ctx, toks, 0, n_vocab)
        out: list[int] = []
        last = logits[-1]
        for k in range(n_greedy):
            last = last.copy()
            last[list(suppress)] = -np.inf
            out.append(int(np.argmax(last)))
            last = _decode(lib, ctx, [out[-1]], n + k, n_vocab)[-1]
        return logits, out
    finally:
        if ctx:
            lib.llama_free(ctx)
        lib.llama_model_free(model)


def logits_of(lib_path: str, gguf: str, tokens, n_ubatch: int | None = None, f32_cache: bool = True,
              n_threads: int = 2) -> np.ndarray:
    """float32 [len(tokens), n_vocab]: llama.cpp's logits at every position of one decode call."""
    return run(lib_path, gguf, tokens, n_ubatch, f32_cache, n_threads=n_threads)[0]


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| in float64 (b is the reference)."""
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))


def main(argv: list[str]) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="llama.cpp's logits of a GGUF on a reference.npz's tokens, "
                                 "against HF's (the npz) and toolkit's own on the same file")
    ap.add_argument("libllama")
    ap.add_argument("gguf")
    ap.add_argument("reference", help="reference.npz: tokens, logits, greedy")
    ap.add_argument("--ubatch", type=int, default=0, help="n_ubatch (0 = all tokens at once)")
    ap.add_argument("--f16-cache", action="store_true", help="llama.cpp's default F16 KV cache")
    ap.add_argument("--no-toolkit", action="store_true", help="skip toolkit's logits on the file")
    ap.add_argument("--suppress", type=int, nargs="*", default=[0],
                    help="ids never chosen in the greedy continuation (the references' end-of-text, 0)")
    a = ap.parse_args(argv)
    z = np.load(a.reference)
    hf = z["logits"]
    label = f"{a.gguf} ubatch {a.ubatch or 'all'} {'F16' if a.f16_cache else 'F32'} cache"
    try:
        lg, greedy = run(a.libllama, a.gguf, z["tokens"], n_ubatch=a.ubatch or None, f32_cache=not a.f16_cache,
                         n_greedy=len(z["greedy"]), suppress=tuple(a.suppress))
    except LoadError as e:
        print(f"{label}: LOAD FAILED ({e})")
        return 1
    if lg.shape != hf.shape:
        print(f"{label}: logits {lg.shape} against HF {hf.shape}")
        return 1
    top1 = float(np.mean(lg.argmax(-1) == hf.argmax(-1)))
    ref_g = z["greedy"].tolist()
    same = sum(x == y for x, y in zip(greedy, ref_g))
    line = (f"{label}: rel L2 vs HF {rel_l2(lg, hf):.3g}, top-1 {top1 * 100:.1f}%, "
            f"greedy {'identical' if greedy == ref_g else 'DIFFERS'} ({same} of {len(ref_g)} positions)")
    if not a.no_toolkit:
        try:
            from toolkit.runtime import Context, Model
            with Model(a.gguf) as m, Context(m, n_ctx=max(128, len(z["tokens"]) + 32)) as ctx:
                tk = ctx.decode(z["tokens"], logits="all")
            line += f", vs toolkit {rel_l2(lg, tk):.3g} (toolkit vs HF {rel_l2(tk, hf):.3g})"
        except Exception as e:  # noqa: BLE001 - a file toolkit refuses is a figure to report
            line += f", toolkit: {type(e).__name__}: {e}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
