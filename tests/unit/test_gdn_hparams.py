"""Reading the gated-delta-net families' hparams (toolkit/arch/readers.py, docs/specs/gdn-family.md
§1.3 and §8.1) from llama.cpp's files, with keys edited in memory: layer kinds from
``attention.recurrent_layers`` (before ``full_attention_interval``), n_layer = block_count -
nextn_predict_layers, the head sizes and their checks, each bad value one InputError naming
the key and the file."""
from __future__ import annotations

import pytest

from hparams_util import ABSENT as _ABSENT, edited
from toolkit.arch import FFNKind, HParams, LayerKind
from toolkit.errors import InputError

pytestmark = pytest.mark.native

G, A = LayerKind.GDN, LayerKind.ATTENTION


def test_files_read_as_expected():
    hp = HParams.from_gguf(edited("qwen35-tiny"))
    assert hp.layer_kinds == [G, A, G, A] and hp.ffn_kinds == [FFNKind.DENSE] * 4
    assert (hp.d_state, hp.ssm_head_dim, hp.n_group, hp.ssm_n_head, hp.d_conv) == (16, 16, 2, 4, 4)
    assert (hp.n_head, hp.n_head_kv[1], hp.head_dim, hp.n_rot) == (4, 1, 32, 16)
    hp = HParams.from_gguf(edited("qwen3next-tiny"))
    assert hp.layer_kinds == [G, G, G, A] and hp.ffn_kinds == [FFNKind.MOE] * 4


def test_recurrent_layers_before_the_interval_rule():
    """qwen35-tiny alternates (recurrent_layers) though its full_attention_interval is 4; without
    recurrent_layers the rule (i + 1) % interval == 0 applies."""
    assert HParams.from_gguf(edited("qwen35-tiny", attention__recurrent_layers=_ABSENT)).layer_kinds == [G, G, G, A]
    hp = HParams.from_gguf(edited("qwen35-tiny", attention__recurrent_layers=_ABSENT, full_attention_interval=2))
    assert hp.layer_kinds == [G, A, G, A]


def test_nextn_layers_are_not_run():
    hp = HParams.from_gguf(edited("qwen35-tiny", nextn_predict_layers=1))
    assert hp.n_layer == 3 and hp.layer_kinds == [G, A, G] and len(hp.ffn_kinds) == 3


@pytest.mark.parametrize("kv, key", [
    ({"nextn_predict_layers": 4}, "qwen35.nextn_predict_layers"),
    ({"rope__dimension_sections": [4, 3, 2, 0]}, "qwen35.rope.dimension_sections"),   # 9 > n_rot / 2 = 8
    ({"ssm__inner_size": 48}, "qwen35.ssm.inner_size"),
    ({"ssm__value_head_dim": 8}, "qwen35.ssm.inner_size"),                              # Hv Dv = 32 != 64
    ({"ssm__group_count": 3}, "qwen35.ssm.group_count"),
    ({"ssm__conv_kernel": 65}, "qwen35.ssm.conv_kernel"),     # the C check's bound; its message named no file
    ({"ssm__state_size": 4097}, "qwen35.ssm.state_size"),
    ({"attention__recurrent_layers": [True, False]}, "qwen35.attention.recurrent_layers"),
    ({"attention__recurrent_layers": "yes"}, "qwen35.attention.recurrent_layers"),
    ({"attention__recurrent_layers": _ABSENT, "full_attention_interval": 0}, "qwen35.full_attention_interval"),
])
def test_bad_values_name_the_key(kv, key):
    with pytest.raises(InputError, match=rf"qwen35-tiny\.f32\.gguf: key '{key}'"):
        HParams.from_gguf(edited("qwen35-tiny", **kv))


def test_value_head_dim_other_than_key_head_dim():
    """Dv from our ssm.value_head_dim (llama.cpp reads Dv = Dk); the sizes follow it."""
    hp = HParams.from_gguf(edited("qwen35-tiny", ssm__value_head_dim=32, ssm__inner_size=128))
    assert (hp.d_state, hp.ssm_head_dim, hp.d_inner) == (16, 32, 128)
