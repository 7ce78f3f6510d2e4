"""`toolkit convert` on bad Lara-Mini input: one line naming the file / key /
tensor, exit 2 (3: valid but unsupported), nothing left at OUT.  Each test breaks a copy of
laramini-tiny (layers [linear, sliding, linear, full, sliding]) in tmp_path."""
from __future__ import annotations

import numpy as np

from convert_error_util import config, copy, drop_tensor, edit_config, expect_error, replace_tensor


def test_fused_in_proj_of_the_wrong_width(monkeypatch, capsys, tmp_path):
    """in_proj rows [q | k | v | z | b | a] = 2 x 32 + 2 x 64 + 2 x 4 = 200; one row short."""
    d = copy(tmp_path, "laramini-tiny")
    replace_tensor(d, "model.layers.2.linear_attn.in_proj.weight", np.zeros((199, 64), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.2.linear_attn.in_proj.weight'", "[199, 64]",
                 "config.json implies [200, 64]")


def test_value_heads_disagree_with_the_fused_in_proj(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "laramini-tiny")
    edit_config(d, linear_num_value_heads=2)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.linear_attn.in_proj.weight'", "config.json implies [132, 64]")


def test_missing_in_proj(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "laramini-tiny")
    drop_tensor(d, "model.layers.0.linear_attn.in_proj.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.0.linear_attn.in_proj.weight'")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "laramini-tiny")
    edit_config(d, layer_types=config(d)["layer_types"][:4] + ["conv"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' must list 5 of")


def test_layer_types_disagree_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "laramini-tiny")
    edit_config(d, layer_types=["sliding_attention"] + config(d)["layer_types"][1:])
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "model.layers.0.self_attn.")


def test_attention_bias_without_the_tensors(monkeypatch, capsys, tmp_path):
    """attention_bias converts (tests/parity/test_config_variants.py laramini-var-tiny; norm_topk_prob
    false too, no longer refused); a config that says so over a checkpoint without the biases
    names the missing tensor."""
    d = copy(tmp_path, "laramini-tiny")
    edit_config(d, attention_bias=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "self_attn.q_proj.bias", "attention_bias is true")


def test_sliding_window_of_zero(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "laramini-tiny")
    edit_config(d, sliding_window=0)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "sliding_window")


def test_shared_expert_gate_is_unknown(monkeypatch, capsys, tmp_path):
    """Lara-Mini's shared expert has no gate: a Qwen-style shared_expert_gate is not silently dropped."""
    import json
    from safetensors.numpy import load_file, save_file
    d = copy(tmp_path, "laramini-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    fn = idx["weight_map"]["model.layers.0.mlp.gate.weight"]
    t = load_file(str(d / fn))
    t["model.layers.0.mlp.shared_expert_gate.weight"] = np.zeros((1, 64), np.float32)
    save_file(t, str(d / fn), metadata={"format": "pt"})
    idx["weight_map"]["model.layers.0.mlp.shared_expert_gate.weight"] = fn
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    expect_error(monkeypatch, capsys, tmp_path, d, "unknown tensor name", "shared_expert_gate")

