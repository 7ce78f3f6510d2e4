"""`toolkit convert` on bad LFM3 checkpoints: one line naming the file and key, exit 2 (3: valid
but unsupported), nothing left at OUT.  Each test breaks a copy of lfm3-tiny in tmp_path."""
from __future__ import annotations

import pytest

from convert_error_util import config, copy, edit_config, expect_error


@pytest.mark.parametrize("w", [0, -4])
def test_sliding_window_of_zero_or_below(monkeypatch, capsys, tmp_path, w):
    d = copy(tmp_path, "lfm3-tiny")
    edit_config(d, sliding_window=w)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", f"'sliding_window' = {w} is out of range (must be >= 1)")


@pytest.mark.parametrize("w", [(1 << 24) + 1, 1 << 40, 1e30])
def test_sliding_window_too_large(monkeypatch, capsys, tmp_path, w):
    """Above the runtime's 2**24 (was: 2**24 + 1 written and refused by run; 2**40 and 1e30 an
    'internal error', exit 1)."""
    d = copy(tmp_path, "lfm3-tiny")
    edit_config(d, sliding_window=w)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'sliding_window' =", "out of range (must be <=")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm3-tiny")
    edit_config(d, layer_types=["conv", "linear_attention", "full_attention", "conv", "sliding_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' must list 5 of conv, sliding_attention")


def test_unknown_rope_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "lfm3-tiny")
    rp = config(d)["rope_parameters"]
    edit_config(d, rope_parameters={**rp, "full_attention": {**rp["full_attention"], "rope_type": "dynamic"}})
    expect_error(monkeypatch, capsys, tmp_path, d, "key 'rope_parameters.full_attention.rope_type' = \"dynamic\" is not supported",
                 code=3)


def test_sliding_rope_scaling_is_unsupported(monkeypatch, capsys, tmp_path):
    """llama.cpp's rope.scaling.* scale the non-sliding layers only: the sliding layers' yarn has no key."""
    d = copy(tmp_path, "lfm3-tiny")
    rp = config(d)["rope_parameters"]
    edit_config(d, rope_parameters={**rp, "sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                                                "original_max_position_embeddings": 16}})
    expect_error(monkeypatch, capsys, tmp_path, d, "key 'rope_parameters.sliding_attention.rope_type' = 'yarn' with "
                 "scaling is not supported", code=3)


def test_partial_yarn_is_unsupported(monkeypatch, capsys, tmp_path):
    """HF's yarn with partial_rotary_factor < 1 gives an inv_freq shorter than Lfm3's whole-head rotation."""
    d = copy(tmp_path, "lfm3-tiny")
    rp = config(d)["rope_parameters"]
    edit_config(d, rope_parameters={**rp, "full_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                                             "original_max_position_embeddings": 16,
                                                             "partial_rotary_factor": 0.5}})
    expect_error(monkeypatch, capsys, tmp_path, d, "key 'rope_parameters.full_attention.partial_rotary_factor' = 0.5 "
                 "is not supported with yarn", code=3)


def test_conv_bias_without_its_tensors(monkeypatch, capsys, tmp_path):
    """conv_bias true converts (lfm3-convbias-tiny); a checkpoint without the biases names the first."""
    d = copy(tmp_path, "lfm3-tiny")
    edit_config(d, conv_bias=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor 'model.layers.0.conv.in_proj.bias'", "conv_bias is true")


def test_missing_sandwich_norm(monkeypatch, capsys, tmp_path):
    """use_sandwich_norm with a checkpoint that lacks the post norms names the tensor."""
    import json
    d = copy(tmp_path, "lfm3-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"].pop("model.layers.3.post_ffn_norm.weight")
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    expect_error(monkeypatch, capsys, tmp_path, d, "model.layers.3.post_ffn_norm.weight")
