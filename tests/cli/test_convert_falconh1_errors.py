"""`toolkit convert` on bad Falcon-H1 checkpoints: one line naming the file/key/tensor, exit 2
(exit 3 for options the layout does not support: UnsupportedError), nothing left at OUT.  Each test
breaks a copy of tests/fixtures/hf/falconh1-tiny in tmp_path."""
from __future__ import annotations

import numpy as np
import pytest

from cli_runner import cli as run_cli
from convert_error_util import copy, drop_tensor, edit_config, edit_rope, expect_error, replace_tensor

NAME = "falconh1-tiny"


@pytest.mark.parametrize("key, value, needle", [
    ("ssm_multipliers", [0.5, 0.8, 1.1, 1.4], "must be a list of 5 finite numbers"),
    ("ssm_multipliers", [0.5, 0.8, "x", 1.4, 0.9], "must be a list of 5 finite numbers"),
    ("mlp_multipliers", [0.7], "must be a list of 2 finite numbers"),
    ("mlp_multipliers", 0.7, "must be a list of 2 finite numbers"),
    ("key_multiplier", "big", "is not a finite number"),
    ("mamba_d_head", 24, "mamba_n_heads 8 x mamba_d_head 24 != mamba_d_ssm = 128"),
    ("mamba_n_groups", 3, "mamba_n_groups 3 does not divide mamba_n_heads 8"),
    ("num_key_value_heads", 3, "num_key_value_heads 3 does not divide num_attention_heads 4"),
])
def test_bad_config_value(monkeypatch, capsys, tmp_path, key, value, needle):
    d = copy(tmp_path, NAME)
    edit_config(d, **{key: value})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", needle)


@pytest.mark.parametrize("key, value", [("mamba_proj_bias", True), ("hidden_act", "mish"), ("time_step_limit", [0.0, 8.0])])
def test_unsupported_option(monkeypatch, capsys, tmp_path, key, value):
    d = copy(tmp_path, NAME)
    edit_config(d, **{key: value})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", key, code=3)


def test_attention_bias_without_its_tensors(monkeypatch, capsys, tmp_path):
    """attention_bias true (converted since issue 43: tests/parity/test_config_variants.py) on a
    checkpoint without the biases: the first one is named, exit 2."""
    d = copy(tmp_path, NAME)
    edit_config(d, attention_bias=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.0.self_attn.q_proj.bias'")


def test_scaled_rope_is_refused(monkeypatch, capsys, tmp_path):
    """linear / yarn convert (tests/parity/test_config_variants.py); llama3 stays refused, with why."""
    d = copy(tmp_path, NAME)
    edit_rope(d, rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "rope_type' = \"llama3\"", "rope_freqs", code=3)


def test_missing_mamba_tensor(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    drop_tensor(d, "model.layers.1.mamba.in_proj.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.1.mamba.in_proj.weight'")


def test_in_proj_shape_disagrees_with_the_multiplier_blocks(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    fn = replace_tensor(d, "model.layers.0.mamba.in_proj.weight", np.zeros((300, 64), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, fn, "'model.layers.0.mamba.in_proj.weight'", "[300, 64]", "[296, 64]")


def test_layer_count_past_the_checkpoint(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, NAME)
    edit_config(d, num_hidden_layers=4)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.3.")


def test_auto_head_dim_and_null_d_ssm_are_read(monkeypatch, capsys, tmp_path):
    """mamba_d_head "auto" (d_ssm / heads) and mamba_d_ssm null (expand x hidden) convert."""
    d = copy(tmp_path, NAME)
    edit_config(d, mamba_d_head="auto", mamba_d_ssm=None, mamba_expand=2)
    out = tmp_path / "ok.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(out))
    assert rc == 0, err
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(out))
    assert f.get("falcon-h1.ssm.inner_size") == 128 and f.get("falcon-h1.ssm.head_dim") == 16
