"""Reading Nemotron-H hparams (toolkit/arch/readers.py: read_nemotron_layers,
check_nemotron_layers, read_moe_routing) from our conversion of nemotronh-tiny with keys edited
in memory: the layer kinds (Mamba-2 / attention from head_count_kv, FFN-only blocks from the
per-layer feed_forward_length), the routing keys, and each bad value one InputError naming the
key and the file."""
from __future__ import annotations

import pathlib

import pytest

from hparams_util import ABSENT as _ABSENT, edited_file as edited
from toolkit.arch import FFNKind, HParams, LayerKind
from toolkit.errors import InputError

pytestmark = pytest.mark.native

M, A, N = LayerKind.MAMBA2, LayerKind.ATTENTION, LayerKind.NONE


@pytest.fixture
def f32(hf_f32) -> pathlib.Path:
    return hf_f32("nemotronh-tiny")   # converted once per session (conftest.py)


def test_file_reads_as_expected(f32):
    hp = HParams.from_gguf(edited(f32))
    assert hp.layer_kinds == [M, N, A, M, N]
    assert hp.ffn_kinds == [FFNKind.NONE, FFNKind.RELU2, FFNKind.NONE, FFNKind.NONE, FFNKind.MOE]
    assert hp.recurrent_layers == [0, 3] and hp.attention_layers == [2]
    assert (hp.n_expert, hp.n_expert_used, hp.moe_n_group, hp.moe_topk_group) == (4, 2, 1, 1)
    assert hp.moe_weights_norm is True and hp.moe_weights_scale == 1.0 and not hp.use_rope


def test_layer_norm_epsilon_alone_is_read(f32):
    """llama.cpp's Nemotron-H files carry only attention.layer_norm_epsilon."""
    hp = HParams.from_gguf(edited(f32, attention__layer_norm_rms_epsilon=_ABSENT, attention__layer_norm_epsilon=2e-5))
    assert hp.rms_eps == 2e-5


@pytest.mark.parametrize("kv, needle", [
    # llama.cpp 0c1e570's file of this checkpoint: 0 on the MLP layer -> read as Mamba-2
    ({"feed_forward_length": [0, 0, 0, 0, 32]}, "layer 1 is mamba2 but has FFN tensors"),
    ({"feed_forward_length": [0, 128, 0, 0]}, "must be a per-layer list of 5 entries"),
    ({"feed_forward_length": 128}, "must be a per-layer list of 5 entries"),
    ({"feed_forward_length": [0, 128, 64, 0, 32]}, "[2] = 64 but layer 2 is an attention layer"),
    ({"feed_forward_length": [0, 128, 0, 32, 32]}, "layer 3 has no ffn_up / ffn_gate_inp tensor"),
    ({"expert_group_count": 3}, "'nemotron_h_moe.expert_group_count' = 3 must divide expert_count 4"),
    ({"expert_group_count": 2, "expert_group_used_count": 3}, "expert_group_used_count' = 3 must be in [1, 2]"),
    ({"expert_group_count": 4, "expert_group_used_count": 1}, "hold fewer than expert_used_count 2"),
    ({"expert_weights_scale": "x"}, "'nemotron_h_moe.expert_weights_scale' = x"),
])
def test_bad_values_name_the_key(f32, kv, needle):
    with pytest.raises(InputError) as e:
        HParams.from_gguf(edited(f32, **kv))
    msg = str(e.value)
    assert needle in msg and str(f32) in msg and "\n" not in msg, msg
