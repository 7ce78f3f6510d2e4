"""The C loader trusts nothing it is handed: every tensor's type, shape and byte range is
checked before use, and a bad one is a clean error naming the tensor (never a crash)."""
from __future__ import annotations

import dataclasses
import shutil

import pytest

from toolkit.errors import InputError, NativeError, UnsupportedError
from toolkit.gguf_io import GGMLType
from toolkit.runtime import Model
from toolkit.runtime.model import _load

pytestmark = pytest.mark.native


@pytest.fixture(scope="module")
def base():
    import pathlib
    m = Model(pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "bamba-tiny.f32.gguf")
    yield m
    m.close()


def load_with(m: Model, edit):
    infos = [edit(t) for t in m.gguf]
    infos = [t for t in infos if t is not None]
    return _load(m.path, m._c_hparams, infos)


def test_loads_and_frees(base, fixtures):
    """The unedited table loads into a model with the GGUF's vocabulary that computes what
    llama.cpp's runtime computes on this file (so every tensor was bound from the table); then
    it frees (ASan in CI checks that)."""
    import numpy as np
    from toolkit.binding import check, ffi, lib
    tokens = np.load(fixtures / "hf" / "bamba-tiny" / "reference.npz")["tokens"]
    want = np.load(fixtures / "llamacpp" / "bamba-tiny.logits.npy")   # llama.cpp's runtime, same tokens
    ptr = load_with(base, lambda t: t)
    try:
        assert ptr != ffi.NULL
        assert lib.tk_n_vocab(ptr) == base.gguf.tensors["token_embd.weight"].shape[1] == want.shape[1]
        p = ffi.new("tk_context_params *", {"n_ctx": 32, "n_seq_max": 1, "n_ubatch": 32, "n_threads": 1})
        out = ffi.new("tk_context **")
        check(lib.tk_context_new(ptr, p, out))
        try:
            n = len(tokens)
            tok, pos = ffi.new("int32_t[]", tokens.tolist()), ffi.new("int32_t[]", list(range(n)))
            seq, flags = ffi.new("int32_t[]", n), ffi.new("int8_t[]", [1] * n)   # seq 0; logits of every token
            batch = ffi.new("tk_batch *", {"n_tokens": n, "token": tok, "pos": pos, "seq_id": seq, "logits": flags})
            got = np.zeros((n, want.shape[1]), np.float32)
            check(lib.tk_decode(out[0], batch, ffi.cast("float *", ffi.from_buffer(got, require_writable=True))))
        finally:
            lib.tk_context_free(out[0])
        err = float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want.astype(np.float64)))
        assert err < 3e-4, err   # llama.cpp keeps K/V in f16 (tests/parity/test_runtime_parity.py)
    finally:
        lib.tk_model_free(ptr)


@pytest.mark.parametrize("name", ["blk.1.attn_k.weight", "blk.0.ssm_a", "blk.0.ssm_norm.weight", "output_norm.weight",
                                  "blk.2.ffn_down.weight", "token_embd.weight"])
def test_missing_tensor_is_named(base, name):
    with pytest.raises(NativeError, match=f"missing tensor '{name}'"):
        load_with(base, lambda t: None if t.name == name else t)


@pytest.mark.parametrize("name", ["blk.1.attn_q.weight", "blk.0.ssm_in.weight", "blk.0.ssm_conv1d.weight", "blk.0.ssm_d"])
def test_wrong_shape_is_named(base, name):
    def edit(t):
        if t.name != name:
            return t
        return dataclasses.replace(t, shape=(t.shape[0] * 2,) + t.shape[1:])
    with pytest.raises(NativeError, match=f"tensor '{name}' has shape"):
        load_with(base, edit)


def test_data_beyond_end_of_file(base):
    import os
    size = os.path.getsize(base.path)
    with pytest.raises(NativeError, match="'blk.3.attn_v.weight' data .* beyond the end of the file"):
        load_with(base, lambda t: dataclasses.replace(t, offset=size - 16) if t.name == "blk.3.attn_v.weight" else t)


def test_unknown_type_and_misaligned_offset(base):
    with pytest.raises(NativeError, match="unknown ggml type 77"):
        load_with(base, lambda t: dataclasses.replace(t, type=77) if t.name == "blk.0.ssm_d" else t)
    with pytest.raises(NativeError, match="not aligned"):
        load_with(base, lambda t: dataclasses.replace(t, offset=t.offset + 1) if t.name == "blk.0.ssm_d" else t)
    with pytest.raises(NativeError, match="not a multiple of the Q8_0 block size"):
        load_with(base, lambda t: dataclasses.replace(t, type=GGMLType.Q8_0) if t.name == "blk.0.ssm_d" else t)


def test_unsupported_type_for_a_tensor(base):
    # an integer type where weights are expected: the dequantizer refuses it
    with pytest.raises(UnsupportedError, match="blk.1.attn_q.weight"):
        load_with(base, lambda t: dataclasses.replace(t, type=GGMLType.I32) if t.name == "blk.1.attn_q.weight" else t)


def test_truncated_file(tmp_path, base):
    p = tmp_path / "short.gguf"
    shutil.copy(base.path, p)
    with open(p, "r+b") as fh:
        fh.truncate(p.stat().st_size - 4096)
    with pytest.raises((InputError, NativeError), match="short.gguf"):
        Model(p)


def test_not_a_gguf(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(InputError):
        Model(p)


def test_llamacpp_granite_file_with_zero_head_count_kv(fixtures):
    """llama.cpp's converter writes head_count_kv = 0 for every layer of a transformers-5
    Granite 4.0-H checkpoint: attention layer 1 then looks recurrent, and the error says so."""
    p = fixtures / "llamacpp" / "granitehybrid-moe-tiny.f32.gguf"
    if not p.exists():
        pytest.skip("fixture not copied")
    with pytest.raises(NativeError, match=r"missing tensor 'blk\.1\.ssm_in\.weight' \(layer 1 is mamba2"):
        Model(p)
