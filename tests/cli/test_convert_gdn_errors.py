"""`toolkit convert` on bad gated-delta-net checkpoints (qwen3next / qwen35 / qwen35moe): one line
naming the file/key/tensor, exit 2, nothing left at OUT.  Each test breaks a copy in tmp_path."""
from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import load_file, save_file

from cli_runner import cli as run_cli
from convert_cases import count_config_kind_errors
from convert_error_util import config, copy, drop_tensor, edit_config, edit_rope, expect_error, replace_tensor


# ---- a missing in_proj_* ------------------------------------------------------------------------

def test_qwen35_missing_in_proj_z(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-tiny")
    drop_tensor(d, "model.layers.2.linear_attn.in_proj_z.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.2.linear_attn.in_proj_z.weight'")


def test_qwen35moe_missing_in_proj_a(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35moe-tiny")
    drop_tensor(d, "model.layers.0.linear_attn.in_proj_a.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.0.linear_attn.in_proj_a.weight'")


def test_qwen3next_missing_in_proj_qkvz(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen3next-tiny")
    drop_tensor(d, "model.layers.1.linear_attn.in_proj_qkvz.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.1.linear_attn.in_proj_qkvz.weight'")


def test_qwen3next_missing_in_proj_ba(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen3next-dkdv-tiny")
    drop_tensor(d, "model.layers.3.linear_attn.in_proj_ba.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.3.linear_attn.in_proj_ba.weight'")


def test_split_projection_in_a_qwen3next_checkpoint(monkeypatch, capsys, tmp_path):
    """Qwen3.5's in_proj_qkv in a Qwen3-Next checkpoint: an unknown tensor name, not a silent mix."""
    d = copy(tmp_path, "qwen3next-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    fn = idx["weight_map"]["model.layers.0.linear_attn.in_proj_ba.weight"]
    t = load_file(str(d / fn))
    t["model.layers.0.linear_attn.in_proj_qkv.weight"] = np.zeros((128, 64), np.float32)
    save_file(t, str(d / fn), metadata={"format": "pt"})
    idx["weight_map"]["model.layers.0.linear_attn.in_proj_qkv.weight"] = fn
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    expect_error(monkeypatch, capsys, tmp_path, d, fn, "unknown tensor name", "in_proj_qkv.weight", "Qwen3NextForCausalLM")


# ---- conv kernel vs linear_conv_kernel_dim ------------------------------------------------------

def test_conv_kernel_disagrees_with_config(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-tiny")
    edit_config(d, linear_conv_kernel_dim=3)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.linear_attn.conv1d.weight'", "[128, 1, 4]",
                 "config.json implies [128, 1, 3]", "linear_conv_kernel_dim")


def test_conv_kernel_tensor_of_another_width(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen3next-tiny")
    fn = replace_tensor(d, "model.layers.2.linear_attn.conv1d.weight", np.zeros((128, 1, 5), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, fn, "'model.layers.2.linear_attn.conv1d.weight'", "[128, 1, 5]",
                 "[128, 1, 4]")


# ---- layer patterns -----------------------------------------------------------------------------

def test_no_attention_layer_in_layer_types(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-tiny")
    edit_config(d, layer_types=["linear_attention"] * 4)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "layer_types gives no full_attention layer")


def test_no_attention_layer_by_interval(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35moe-pattern-tiny")
    edit_config(d, full_attention_interval=7)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "full_attention_interval = 7 with 6 layers",
                 "no full_attention layer")


def test_layer_types_disagree_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen3next-dkdv-tiny")
    lt = config(d)["layer_types"]
    edit_config(d, layer_types=["linear_attention"] + lt[1:3] + ["full_attention", lt[4]])
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "model.layers.0.linear_attn.")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-tiny")
    edit_config(d, layer_types=["linear_attention", "sliding_attention", "linear_attention", "full_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types'[1] = 'sliding_attention'", code=3)


# ---- M-RoPE sections ------------------------------------------------------------------------------

def test_mrope_sections_beyond_the_rotary_pairs(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-tiny")          # head_dim 32 x partial_rotary_factor 0.5: 8 pairs
    edit_rope(d, mrope_section=[4, 3, 2])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "mrope_section [4, 3, 2] sums to 9",
                 "8 rotary pairs")


def test_default_mrope_sections_must_fit_too(monkeypatch, capsys, tmp_path):
    """No mrope_section: llama.cpp (and HF) use [11, 11, 10], which 8 pairs cannot hold."""
    d = copy(tmp_path, "qwen35moe-tiny")
    c = config(d)
    edit_config(d, rope_parameters={k: v for k, v in c["rope_parameters"].items() if k != "mrope_section"})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "mrope_section [11, 11, 10] sums to 32",
                 "2 rotary pairs")


def test_mrope_sections_fill_exactly(tmp_path):
    from toolkit.convert import make_plan

    d = copy(tmp_path, "qwen35-tiny")
    edit_rope(d, mrope_section=[4, 2, 2])
    plan = make_plan(str(d))
    assert next(kv.value for kv in plan.kv if kv.key == "qwen35.rope.dimension_sections") == [4, 2, 2, 0]


# ---- head sizes and MTP -------------------------------------------------------------------------

def test_value_head_dim_disagrees_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-dkdv-tiny")
    edit_config(d, linear_value_head_dim=16)
    expect_error(monkeypatch, capsys, tmp_path, d, "model.layers.0.linear_attn.in_proj_qkv.weight", "config.json implies")


def test_key_heads_must_divide_value_heads(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-tiny")
    edit_config(d, linear_num_value_heads=5)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "linear_num_key_heads 2 does not divide linear_num_value_heads 5")


def test_mtp_head_without_its_layer(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35-mtp-tiny")
    for n in [n for n in json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
              if n.startswith("mtp.layers.")]:
        drop_tensor(d, n)
    expect_error(monkeypatch, capsys, tmp_path, d, "mtp.* tensors but none of mtp.layers.0")
    # --no-mtp converts it
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(tmp_path / "ok.gguf"), "--no-mtp")
    assert rc == 0, err


def test_mtp_missing_fc(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "qwen35moe-vl-tiny")
    drop_tensor(d, "mtp.fc.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'mtp.fc.weight'")


def test_rope_scaling_refused(monkeypatch, capsys, tmp_path):
    """yarn and linear convert (tests/parity/test_config_variants.py); dynamic NTK stays refused, with why."""
    d = copy(tmp_path, "qwen3next-tiny")
    edit_rope(d, rope_type="dynamic", factor=4.0)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "rope_type' = \"dynamic\"", "llama.cpp has no such type",
                 code=3)


def test_config_values_of_the_wrong_kind(tmp_path):
    """Every config.json key set to a string, zero, 10**9 or 0.5: a plan or a ToolkitError,
    never a traceback or an allocation sized by the bad value."""
    assert count_config_kind_errors(copy(tmp_path, "qwen3next-dkdv-tiny")) > 40
    assert count_config_kind_errors(copy(tmp_path, "qwen35moe-vl-tiny")) >= 4
