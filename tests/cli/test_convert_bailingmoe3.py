"""`toolkit convert` of Ling 3 (BailingMoeV3ForCausalLM / BailingHybridForCausalLM -> bailingmoe3):
our f32 file of bailinghybrid-tiny holds llama.cpp's tensor names, shapes and data
(tests/fixtures/llamacpp/bailinghybrid-tiny.f32.gguf) and exactly its keys (config.json read as
it is: llama.cpp's converter fails on the attribute-map spellings, D1); HF's saved architecture
name gives the same file (D2); the softplus gate is written (llama.cpp refuses it, D3); our
epsilon keys only where rms_norm_eps != 1e-6 (D4, D5); the layer schedule's tail follows HF
(D14) and the shared-expert width HF (D15), each said in one line; bad input gives one line
naming the file / key / tensor and nothing at OUT."""
from __future__ import annotations

import json

import pytest

from convert_error_util import copy, drop_tensor, edit_config, expect_error
from kda_convert_util import FIX, convert, read_gguf, same_as_llama_cpp


@pytest.fixture(autouse=True)
def registered(monkeypatch):
    """the family's converter, registered or not yet"""
    from toolkit.convert import core
    from toolkit.convert.families.bailingmoe3 import BailingMoe3Family
    for a in BailingMoe3Family.hf_archs:
        monkeypatch.setitem(core.REGISTRY, a, BailingMoe3Family)


def test_llama_cpp_names_shapes_data_and_keys(monkeypatch, capsys, tmp_path):
    out = tmp_path / "b.gguf"
    convert(monkeypatch, capsys, FIX / "hf" / "bailinghybrid-tiny", out)
    keys, ours_only = same_as_llama_cpp(out, "bailinghybrid-tiny")
    assert ours_only == []
    assert keys["bailingmoe3.attention.head_count_kv"] == [0, 1, 0, 1]


def test_hf_saved_architecture_and_spellings(monkeypatch, capsys, tmp_path):
    """BailingHybridForCausalLM with transformers' attribute-map spellings and explicit schedules"""
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, drop=("n_group", "norm_topk_prob", "num_experts_per_tok", "layer_group_size", "first_k_dense_replace"),
                architectures=["BailingHybridForCausalLM"], num_expert_group=4, moe_renormalize=True,
                num_experts_per_token=2, layer_types=["linear_attention", "full_attention"] * 2,
                mlp_layer_types=["dense", "sparse", "sparse", "sparse"])
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    convert(monkeypatch, capsys, FIX / "hf" / "bailinghybrid-tiny", a)
    convert(monkeypatch, capsys, d, b)
    assert read_gguf(a)[1] == read_gguf(b)[1]


def test_softplus_gate(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, kda_safe_gate=False)
    out = tmp_path / "b.gguf"
    convert(monkeypatch, capsys, d, out)
    _, keys = read_gguf(out)
    assert keys["bailingmoe3.kda.safe_gate"] is False and "bailingmoe3.kda.gate_lower_bound" not in keys


def test_our_epsilons_only_where_they_differ(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, rms_norm_eps=1e-5)
    out = tmp_path / "b.gguf"
    convert(monkeypatch, capsys, d, out)
    _, keys = read_gguf(out)
    assert keys["bailingmoe3.kda.l2_norm_epsilon"] == pytest.approx(1e-6)
    assert keys["bailingmoe3.attention.mla_norm_epsilon"] == pytest.approx(1e-6)


def test_tail_of_the_layer_schedule_follows_hf(monkeypatch, capsys, tmp_path, caplog):
    """3 layers in groups of 2: HF makes layer 2 KDA, llama.cpp's converter attention (D14)"""
    d = copy(tmp_path, "bailinghybrid-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    for n in [n for n in idx["weight_map"] if n.startswith("model.layers.3.")]:
        drop_tensor(d, n)
    edit_config(d, num_hidden_layers=3)
    out = tmp_path / "b.gguf"
    with caplog.at_level("WARNING"):
        convert(monkeypatch, capsys, d, out)
    _, keys = read_gguf(out)
    assert keys["bailingmoe3.attention.head_count_kv"] == [0, 1, 0]
    assert any("layers 2..2 follow HF's rule" in r.getMessage() for r in caplog.records)


def test_shared_expert_width_follows_hf(monkeypatch, capsys, tmp_path, caplog):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, moe_shared_expert_intermediate_size=64)
    out = tmp_path / "b.gguf"
    with caplog.at_level("WARNING"):
        convert(monkeypatch, capsys, d, out)
    _, keys = read_gguf(out)
    assert keys["bailingmoe3.expert_shared_feed_forward_length"] == 32
    assert any("following HF" in r.getMessage() for r in caplog.records)


def test_more_experts_per_token_than_the_kept_groups_hold(monkeypatch, capsys, tmp_path):
    """wrote a file (exit 0) that toolkit run then refused: 2 of 4 groups of 2 experts hold 4 < 5"""
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, num_experts_per_tok=5)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "num_experts_per_tok 5 is more than the 4 experts")


def test_layer_group_size_of_zero(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, layer_group_size=0)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "layer_group_size = 0")


def test_kda_head_dim_disagrees_with_projections(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, head_dim=8)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.attention.q_proj.weight'", "config.json implies [32, 64]")


def test_head_gate_shape(monkeypatch, capsys, tmp_path):
    import numpy as np
    from convert_error_util import replace_tensor
    d = copy(tmp_path, "bailinghybrid-tiny")
    replace_tensor(d, "model.layers.1.attention.g_proj.weight", np.zeros((3, 64), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.1.attention.g_proj.weight'", "[3, 64]")


def test_other_rope_types_refused(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "rope_type' = \"dynamic\"", code=3)


def test_mscale_all_dim_must_be_a_number(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "bailinghybrid-tiny")
    edit_config(d, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                                    "original_max_position_embeddings": 16, "mscale_all_dim": "big"})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'rope_parameters.mscale_all_dim' = 'big' must be a positive number")
