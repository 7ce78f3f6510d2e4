"""`toolkit convert` on bad LFM2 / LFM2-MoE checkpoints: one line naming the file/key/tensor,
exit 2 (3: valid but unsupported), nothing left at OUT.  Each test breaks a copy in tmp_path.

The layer pattern of LFM2 is ``layer_types`` ("conv" / "full_attention", transformers 5) or the
original ``full_attn_idxs`` list; LFM2 has no ``hybrid_override_pattern`` string."""
from __future__ import annotations

import numpy as np

from convert_cases import count_config_kind_errors
from convert_error_util import config, copy, drop_tensor, edit_config, expect_error, replace_tensor


def test_layer_types_longer_than_the_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, layer_types=config(d)["layer_types"] + ["conv"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' must be a list of 4 layer types")


def test_layer_types_shorter_than_the_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2moe-tiny")
    edit_config(d, layer_types=["conv", "conv", "full_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' must be a list of 4 layer types")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, layer_types=["conv", "sliding_attention", "conv", "full_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types'[1] = 'sliding_attention'",
                 "is not a known layer type")


def test_full_attn_idxs_outside_the_layers(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-k4-tiny")                  # the original form: full_attn_idxs, no layer_types
    edit_config(d, full_attn_idxs=[0, 5])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'full_attn_idxs' = [0, 5]", "[0, 5)")


def test_both_layer_forms_must_agree(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, full_attn_idxs=[1, 2])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' ([1, 3])",
                 "'full_attn_idxs' ([1, 2]) disagree")


def test_layer_types_disagree_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, layer_types=["full_attention", "full_attention", "conv", "full_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "model.layers.0.self_attn.")


def test_conv_kernel_disagrees_with_config(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, conv_L_cache=4)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.conv.conv.weight'", "[64, 1, 3]",
                 "config.json implies [64, 1, 4]", "conv_L_cache")


def test_conv_kernel_out_of_range(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, conv_L_cache=1)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'conv_L_cache' = 1 must be in [2, 64]")


def test_conv_bias_without_its_tensors(monkeypatch, capsys, tmp_path):
    """conv_bias true (converted since issue 43: tests/parity/test_config_variants.py) on a
    checkpoint without the biases: the first one is named, exit 2."""
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, conv_bias=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", ".conv.in_proj.bias'", "conv_bias is true")


def test_conv_biases_the_config_turns_off_are_leftovers(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-convbias-tiny")
    edit_config(d, conv_bias=False)
    expect_error(monkeypatch, capsys, tmp_path, d, ".bias", "was not converted")


def test_ff_dim_rule_disagrees_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, block_auto_adjust_ff_dim=True)     # int(2 * 128 / 3) = 85 -> 256 (block_multiple_of)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.feed_forward.w1.weight'", "[128, 64]",
                 "config.json implies [256, 64]")


def test_missing_expert(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2moe-tiny")
    drop_tensor(d, "model.layers.3.feed_forward.experts.2.w3.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.3.feed_forward.experts.2.w3.weight'",
                 "moe_intermediate_size")


def test_dense_layer_count_disagrees_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2moe-tiny")
    edit_config(d, num_dense_layers=2)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.1.feed_forward.w1.weight'")


def test_more_dense_layers_than_layers(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2moe-tiny")
    edit_config(d, num_dense_layers=9)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "num_dense_layers = 9 is more than num_hidden_layers = 4")


def test_expert_bias_of_another_width(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2moe-tiny")
    fn = replace_tensor(d, "model.layers.2.feed_forward.expert_bias", np.zeros((5,), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, fn, "'model.layers.2.feed_forward.expert_bias'", "[5]", "[4]")


def test_config_values_of_the_wrong_kind(tmp_path):
    """Every config.json key set to a string, zero, 10**9 or 0.5: a plan or a ToolkitError,
    never a traceback or an allocation sized by the bad value."""
    assert count_config_kind_errors(copy(tmp_path, "lfm2-k4-tiny")) > 20
    assert count_config_kind_errors(copy(tmp_path, "lfm2moe-bias-tiny")) > 20


def test_untied_output_without_lm_head(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, tie_word_embeddings=False)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor 'lm_head.weight'", "tie_word_embeddings is false")


def test_original_tie_embedding_key(monkeypatch, capsys, tmp_path):
    """The original config's ``tie_embedding`` (no tie_word_embeddings) is read too."""
    d = copy(tmp_path, "lfm2-tiny")
    edit_config(d, drop=("tie_word_embeddings",), tie_embedding=False)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor 'lm_head.weight'")
