"""`toolkit convert` on bad OLMo-Hybrid checkpoints: one line naming the file / key / tensor, exit 2
(3: valid but unsupported), nothing left at OUT.  Each test breaks a copy of olmohybrid-tiny
(layers [linear, linear, full, linear]) in tmp_path."""
from __future__ import annotations

import numpy as np

from convert_error_util import config, copy, drop_tensor, edit_config, expect_error, replace_tensor


def test_layer_types_shorter_than_the_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, layer_types=config(d)["layer_types"][:3])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' has 3 entries", "num_hidden_layers is 4")


def test_layer_types_longer_than_the_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, layer_types=config(d)["layer_types"] + ["linear_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layer_types' has 5 entries")


def test_unknown_layer_type(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, layer_types=["linear_attention", "sliding_attention", "full_attention", "linear_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'sliding_attention'", "linear_attention or full_attention")


def test_no_attention_layer(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, layer_types=["linear_attention"] * 4)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "at least one linear_attention and one full_attention")


def test_layer_types_disagree_with_tensors(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, layer_types=["full_attention", "linear_attention", "full_attention", "linear_attention"])
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "model.layers.0.self_attn.")


def test_value_head_dim_disagrees_with_the_conv(monkeypatch, capsys, tmp_path):
    """Dv 24 instead of 32: v_proj's shape is the first to disagree."""
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, linear_value_head_dim=24)
    expect_error(monkeypatch, capsys, tmp_path, d, "'model.layers.0.linear_attn.v_proj.weight'", "config.json implies [96, 64]")


def test_conv_pieces_of_the_wrong_size(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    replace_tensor(d, "model.layers.1.linear_attn.k_conv1d.weight", np.zeros((60, 1, 4), np.float32))
    expect_error(monkeypatch, capsys, tmp_path, d, "conv1d pieces of layer 1 have 188 rows", "2 x 32 + 128 = 192")


def test_missing_conv_piece(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-tiny")
    drop_tensor(d, "model.layers.3.linear_attn.v_conv1d.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.3.linear_attn.v_conv1d.weight'")


def test_attention_bias_without_its_tensors(monkeypatch, capsys, tmp_path):
    """attention_bias true (converted since issue 43: tests/parity/test_config_variants.py) on a
    checkpoint without the biases: the first one is named."""
    d = copy(tmp_path, "olmohybrid-tiny")
    edit_config(d, attention_bias=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.2.self_attn.q_proj.bias'",
                 "attention_bias is true")


def test_attention_biases_the_config_turns_off_are_leftovers(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, "olmohybrid-bias-tiny")
    edit_config(d, attention_bias=False)
    expect_error(monkeypatch, capsys, tmp_path, d, "self_attn", "_proj.bias", "was not converted")


def test_norms_under_their_module_names_convert(tmp_path):
    """The load-time names (input_layernorm / post_attention_layernorm, conversion_mapping.py:1303-1304) are accepted
    for the renamed norms: the same file as from the saved names."""
    import json
    from safetensors.numpy import load_file, save_file
    from toolkit.convert import convert
    d = copy(tmp_path, "olmohybrid-tiny")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    ren = {"attention_layer_norm": "input_layernorm", "feedforward_layer_norm": "post_attention_layernorm"}
    for fn in sorted(set(idx["weight_map"].values())):
        t = load_file(str(d / fn))
        out = {}
        for k, v in t.items():
            for a, b in ren.items():
                k = k.replace(a, b)
            out[k] = v
        save_file(out, str(d / fn), metadata={"format": "pt"})
    new = {}
    for k, v in idx["weight_map"].items():
        for a, b in ren.items():
            k = k.replace(a, b)
        new[k] = v
    idx["weight_map"] = new
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    convert(str(d), str(tmp_path / "a.gguf"), "f32")
    convert(str(copy(tmp_path / "b", "olmohybrid-tiny")), str(tmp_path / "b.gguf"), "f32")
    from toolkit.gguf_io import GGUFFile
    fa, fb = GGUFFile(str(tmp_path / "a.gguf")), GGUFFile(str(tmp_path / "b.gguf"))
    assert sorted(fa.tensors) == sorted(fb.tensors)
