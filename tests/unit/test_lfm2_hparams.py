"""Reading the LFM2 / LFM2-MoE hparams (toolkit/arch/readers.py read_shortconv,
read_lfm2_moe_routing) from llama.cpp's files, with keys edited in memory: conv layers from the
per-layer head_count_kv (0 = conv), K from shortconv.l_cache, the sigmoid routing keys, each
bad value one InputError naming the key and the file; and the C loader's own checks."""
from __future__ import annotations

import pytest

from hparams_util import ABSENT as _ABSENT, edited
from toolkit.arch import FFNKind, HParams, LayerKind
from toolkit.errors import InputError

pytestmark = pytest.mark.native

S, A = LayerKind.SHORTCONV, LayerKind.ATTENTION


def test_files_read_as_expected():
    hp = HParams.from_gguf(edited("lfm2-tiny"))
    assert hp.layer_kinds == [S, A, S, A] and hp.ffn_kinds == [FFNKind.DENSE] * 4
    assert (hp.d_conv, hp.d_inner, hp.d_state, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_rot) == \
        (3, 64, 0, 4, [0, 2, 0, 2], 16, 16)
    assert not hp.moe_sigmoid
    hp = HParams.from_gguf(edited("lfm2moe-tiny"))
    assert hp.layer_kinds == [S, S, A, S] and hp.ffn_kinds == [FFNKind.DENSE] + [FFNKind.MOE] * 3
    assert (hp.moe_sigmoid, hp.moe_weights_norm, hp.moe_weights_scale) == (True, True, 1.0)
    hp = HParams.from_gguf(edited("lfm2moe-tiny", expert_weights_norm=False, expert_weights_scale=2.5))
    assert (hp.moe_weights_norm, hp.moe_weights_scale) == (False, 2.5)


def test_layer_indices_take_precedence():
    """Our attention.layer_indices, when present, says which layers are attention (layer 3
    keeps its KV heads in head_count_kv but runs as a conv layer)."""
    hp = HParams.from_gguf(edited("lfm2-tiny", attention__layer_indices=[1]))
    assert hp.layer_kinds == [S, A, S, S] and hp.n_head_kv == [0, 2, 0, 0]


@pytest.mark.parametrize("name, kv, key", [
    ("lfm2-tiny", {"shortconv__l_cache": 1}, "lfm2.shortconv.l_cache' = 1 must be in [2, 64]"),
    ("lfm2-tiny", {"shortconv__l_cache": 65}, "lfm2.shortconv.l_cache' = 65 must be in [2, 64]"),
    ("lfm2-tiny", {"shortconv__l_cache": _ABSENT}, "lfm2.shortconv.l_cache"),
    ("lfm2-tiny", {"attention__layer_indices": [1, 4]}, "lfm2.attention.layer_indices' = [1, 4] has an index outside"),
    ("lfm2moe-tiny", {"expert_gating_func": 1}, "lfm2moe.expert_gating_func' = 1 is not supported for lfm2moe"),
    ("lfm2moe-tiny", {"expert_gating_func": _ABSENT}, "lfm2moe.expert_gating_func"),
    ("lfm2moe-tiny", {"expert_weights_scale": "x"}, "lfm2moe.expert_weights_scale"),
])
def test_bad_keys_name_the_key(name, kv, key):
    with pytest.raises(InputError, match=r".*\.f32\.gguf.*" + key.replace("[", r"\[").replace("]", r"\]")
                       .replace(".", r"\.")):
        HParams.from_gguf(edited(name, **kv))


def test_c_loader_checks_the_short_conv(fixtures):
    """The C side refuses what the readers would not pass (a direct tk_hparams edit)."""
    from toolkit.errors import NativeError, UnsupportedError
    from toolkit.runtime import Model
    from toolkit.runtime.model import _load
    with Model(fixtures / "llamacpp" / "lfm2-tiny.f32.gguf") as m:
        m._c_hparams.ssm.d_conv = 1
        with pytest.raises(NativeError, match="short conv kernel d_conv = 1 must be in"):
            _load(m.path, m._c_hparams, list(m.gguf))
        m._c_hparams.ssm.d_conv = 3
        m._c_hparams.ssm.d_inner = 32
        with pytest.raises(NativeError, match="short conv d_inner = 32 must equal n_embd = 64"):
            _load(m.path, m._c_hparams, list(m.gguf))
    with Model(fixtures / "llamacpp" / "lfm2moe-tiny.f32.gguf") as m:
        m._c_hparams.moe.sigmoid = 0
        with pytest.raises(UnsupportedError, match="exp_probs_b.bias': an expert selection bias needs sigmoid routing"):
            _load(m.path, m._c_hparams, list(m.gguf))
