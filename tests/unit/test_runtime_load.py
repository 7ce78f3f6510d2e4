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


def test_loads_and_frees(base):
    from toolkit.binding import lib
    ptr = load_with(base, lambda t: t)
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
