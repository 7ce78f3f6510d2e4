"""The block recipe (tk_hparams.block, from the architecture row) is what model.c binds and
forward.c runs: a norm placement, a residual scheme and the norms' tensor names, never a family."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from toolkit.arch import Norm, Residual, arch_spec
from toolkit.binding import ffi, lib
from toolkit.errors import NativeError
from toolkit.runtime import Context, Model
from toolkit.runtime.model import _load

pytestmark = pytest.mark.native

BAMBA = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp" / "bamba-tiny.f32.gguf"


def _edited(m: Model, **block):
    """A copy of m's tk_hparams with block.<name> set (a str is kept alive in the returned list)."""
    c = ffi.new("tk_hparams *")
    ffi.buffer(c)[:] = ffi.buffer(m._c_hparams)[:]
    keep = []
    for k, v in block.items():
        if isinstance(v, str):
            v = ffi.new("char[]", v.encode())
            keep.append(v)
        setattr(c.block, k, v)
    return c, keep


def _logits(m: Model, c=None, unused: str | None = None) -> np.ndarray:
    if c is not None:      # run m's file under the edited recipe (less the tensors ending in `unused`)
        ptr = _load(m.path, c, [t for t in m.gguf if not (unused and t.name.endswith(unused))])
        lib.tk_model_free(m._ptr)
        m._ptr = ptr
    ctx = Context(m, n_ctx=64, n_ubatch=64, n_threads=1)
    try:
        return ctx.decode(np.arange(1, 9, dtype=np.int32), 0, logits="all")
    finally:
        ctx.close()


def test_the_rows_say_the_recipe():
    assert arch_spec("olmo-hybrid").norm == Norm.POST and arch_spec("lfm3").norm == Norm.SANDWICH
    assert arch_spec("qwen4exp").norm == Norm.HYPER and arch_spec("mamba2").norm == Norm.PRE
    assert arch_spec("minimax-01").residual.c_id == lib.TK_RESIDUAL_NORMED
    assert arch_spec("qwen35").ffn_norm == "post_attention_norm.weight" and arch_spec("falcon-h1").ffn_norm == "ffn_norm"
    assert arch_spec("lfm2").output_norm == "token_embd_norm.weight" and arch_spec("recurrent-gemma").attn_bias


def test_the_loader_binds_the_norms_the_recipe_names():
    with Model(BAMBA, n_threads=1) as m:
        base = _logits(m)
        c, keep = _edited(m, ffn_norm="no_such_norm.weight")
        with pytest.raises(NativeError, match="missing tensor 'blk.0.no_such_norm.weight'"):
            _load(m.path, c, list(m.gguf))
        c, keep = _edited(m, output_norm="no_such_output.weight")
        with pytest.raises(NativeError, match="missing tensor 'no_such_output.weight'"):
            _load(m.path, c, list(m.gguf))
        # the FFN under the block's attn_norm: a file of the same shapes, other numbers
        c, keep = _edited(m, ffn_norm="attn_norm.weight")
        with pytest.raises(NativeError, match="tensors the runtime does not use: 'blk.0.ffn_norm.weight'"):
            _load(m.path, c, list(m.gguf))     # the file's own ffn_norm left unread: refused
        other = _logits(m, c, unused=".ffn_norm.weight")
        assert other.shape == base.shape and not np.array_equal(other, base)


@pytest.mark.parametrize("norm", [Norm.POST, Norm.SANDWICH])
def test_post_norm_placements_need_the_post_norms(norm):
    # bamba has attention layers but no post_attention_norm: a post-norm or sandwich recipe asks for it
    with Model(BAMBA, n_threads=1) as m:
        c, keep = _edited(m, norm=int(norm))
        first = "blk.0" if norm == Norm.SANDWICH else f"blk.{m.hparams.attention_layers[0]}"
        with pytest.raises(NativeError, match=f"missing tensor '{first}.post_attention_norm.weight'"):
            _load(m.path, c, list(m.gguf))


def test_the_residual_scheme_is_the_recipes():
    with Model(BAMBA, n_threads=1) as m:
        base = _logits(m)
        c, keep = _edited(m, residual=Residual.NORMED_FACTORS.c_id)    # alpha = beta = 1: x = rmsnorm(x) + f
        assert not np.array_equal(_logits(m, c), base)


@pytest.mark.parametrize("edit, msg", [
    (dict(norm=7), "norm placement 7"),
    (dict(residual=-1), "residual -1"),
    (dict(norm=int(Norm.HYPER)), "disagree with hc_count"),
    (dict(residual=Residual.MHC.c_id), "disagree with hc_count"),
])
def test_a_bad_recipe_is_refused(edit, msg):
    with Model(BAMBA, n_threads=1) as m:
        c, keep = _edited(m, **edit)
        with pytest.raises(NativeError, match=msg):
            _load(m.path, c, list(m.gguf))
