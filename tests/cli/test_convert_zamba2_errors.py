"""`toolkit convert` on bad Zamba2 checkpoints: one line naming the file/key/tensor, exit 2,
nothing left at OUT.  Each test breaks a copy in tmp_path.  (Bad zamba2.* keys in a GGUF:
tests/unit/test_zamba2_hparams.py.)"""
from __future__ import annotations

import pytest

from cli_runner import cli as run_cli
from convert_cases import count_config_kind_errors
from convert_error_util import config, copy, drop_tensor, edit_config, expect_error

NAME = "zamba2-tiny"   # layers_block_type: L H L L H (hybrid layers 1 and 4)


def test_block_types_shorter_than_the_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    edit_config(d, layers_block_type=config(d)["layers_block_type"][:4], drop=("hybrid_layer_ids",))
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layers_block_type' has 4 entries",
                 "num_hidden_layers is 5")


def test_unknown_block_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    types = config(d)["layers_block_type"]
    edit_config(d, layers_block_type=types[:2] + ["attention"] + types[3:])
    expect_error(monkeypatch, capsys, tmp_path, d, "'layers_block_type' has unknown block type 'attention'")


def test_hybrid_layer_ids_disagree_with_block_types(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    edit_config(d, hybrid_layer_ids=[1, 3])
    expect_error(monkeypatch, capsys, tmp_path, d, "'hybrid_layer_ids' = [1, 3]", "[1, 4]")


def test_hybrid_layer_marked_mamba_leaves_its_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    types = config(d)["layers_block_type"]
    edit_config(d, layers_block_type=types[:4] + ["mamba"], drop=("hybrid_layer_ids",))
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.4.input_layernorm.weight'")


def test_missing_adapter(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    name = "model.layers.1.shared_transformer.self_attn.linear_k_adapter_list.1.0.weight"
    drop_tensor(d, name)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", f"'{name}'")


def test_add_bias_linear_without_its_tensors(monkeypatch, capsys, tmp_path):
    """add_bias_linear true (converted since issue 43: zamba2-bias-tiny) on a checkpoint without
    the biases: the first one (the shared block's, written first) is named, exit 2."""
    d = copy(tmp_path, NAME)
    edit_config(d, add_bias_linear=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor",
                 "'model.layers.1.shared_transformer.feed_forward.gate_up_proj.bias'")


# hidden_act: an ACT2FN name outside the runtime's activations (silu etc. convert: zamba2-act-tiny)
@pytest.mark.parametrize("key,value", [("hidden_act", "mish")])
def test_unsupported_variants(monkeypatch, capsys, tmp_path, key, value):
    d = copy(tmp_path, NAME)
    edit_config(d, **{key: value})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", f"'{key}'", "not supported", code=3)


def test_config_values_of_the_wrong_kind_are_errors(tmp_path):
    assert count_config_kind_errors(copy(tmp_path, NAME)) > 40


def test_attention_adapters_the_config_turns_off_are_leftovers(monkeypatch, capsys, tmp_path):
    """use_shared_attention_adapter false: HF builds no q/k/v adapters, so stored ones do not fit."""
    d = copy(tmp_path, NAME)
    edit_config(d, use_shared_attention_adapter=False)
    expect_error(monkeypatch, capsys, tmp_path, d, "linear_", "_adapter_list", "was not converted")
