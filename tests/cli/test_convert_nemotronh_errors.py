"""`toolkit convert` on bad Nemotron-H checkpoints: one line naming the file/key/tensor, exit 2,
nothing left at OUT.  Each test breaks a copy of a fixture in tmp_path."""
from __future__ import annotations

import json

import pytest

from convert_error_util import copy, drop_tensor, edit_config, expect_error


def to_pattern(d, pattern: str, n_layers: int | None = None) -> None:
    """config.json in the original form: hybrid_override_pattern (+ num_hidden_layers)."""
    c = json.loads((d / "config.json").read_text())
    c.pop("layers_block_type")
    c["hybrid_override_pattern"] = pattern
    if n_layers is not None:
        c["num_hidden_layers"] = n_layers
    (d / "config.json").write_text(json.dumps(c))


def test_pattern_length_differs_from_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "nemotronh-tiny")
    to_pattern(d, "M-*ME", n_layers=6)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'hybrid_override_pattern' has 5 letters",
                 "num_hidden_layers is 6")


def test_unknown_pattern_letter(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "nemotronh-tiny")
    to_pattern(d, "M-*XE", n_layers=5)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'hybrid_override_pattern' has unknown letter 'X' at 3")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "nemotronh-tiny")
    edit_config(d, layers_block_type=["linear_attention", "mlp", "full_attention", "mamba3", "moe"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layers_block_type' has unknown layer type 'mamba3'")


def test_two_forms_that_disagree(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "nemotronh-tiny")
    edit_config(d, hybrid_override_pattern="M-*-E")
    expect_error(monkeypatch, capsys, tmp_path, d, "'layers_block_type'", "'hybrid_override_pattern'", "disagree")


def test_no_layer_types(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "nemotronh-tiny")
    edit_config(d, drop=("layers_block_type",))
    expect_error(monkeypatch, capsys, tmp_path, d, "neither 'layers_block_type' nor 'hybrid_override_pattern'")


def test_pattern_that_misplaces_a_layer(monkeypatch, capsys, tmp_path):
    """The right length but an MLP where the checkpoint has Mamba-2 tensors."""
    d = copy(tmp_path, "nemotronh-tiny")
    to_pattern(d, "--*ME", n_layers=5)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'backbone.layers.0.mixer.up_proj.weight'")


def test_missing_expert(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "nemotronh-tiny")
    drop_tensor(d, "backbone.layers.4.mixer.experts.2.down_proj.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'backbone.layers.4.mixer.experts.2.down_proj.weight'")


@pytest.mark.parametrize("key, value, needle, code", [
    # an ACT2FN name outside the runtime's activations (silu etc. convert: nemotronh-act-tiny)
    ("mlp_hidden_act", "mish", "key 'mlp_hidden_act' = \"mish\" is not supported", 3),
    # NemotronHMLP experts take mlp_bias too: expert biases are not in the runtime (dense MLP layers
    # convert with their biases: tests/parity/test_config_variants.py nemotronh-bias-tiny)
    ("mlp_bias", True, "key 'mlp_bias' = true is not supported with MoE layers", 3),
    ("n_group", 3, "n_group 3 must divide n_routed_experts 4", 2),  # inconsistent input: exit 2
])
def test_unsupported_or_inconsistent_config(monkeypatch, capsys, tmp_path, key, value, needle, code):
    d = copy(tmp_path, "nemotronh-tiny")
    edit_config(d, **{key: value})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", needle, code=code)


@pytest.mark.parametrize("key, value", [("time_step_limit", [0.0, 0.1]), ("attention_bias", True), ("mamba_proj_bias", True)])
def test_keys_hf_does_not_read_convert(tmp_path, key, value):
    """HF's NemotronH model reads none of these (no dt clamp, no attention biases; use_bias sets
    the Mamba projection biases): the checkpoint converts as HF runs it (they were refused)."""
    from toolkit.convert import make_plan
    d = copy(tmp_path, "nemotronh-tiny")
    edit_config(d, **{key: value})
    assert make_plan(str(d)).tensors
