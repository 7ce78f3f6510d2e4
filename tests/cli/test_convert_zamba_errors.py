"""`toolkit convert` on bad Zamba (v1) checkpoints: one line naming the file/key/tensor, exit 2
(3 for an unsupported variant), nothing left at OUT.  Each test breaks a copy in tmp_path."""
from __future__ import annotations

import json

import pytest

from convert_error_util import config, copy, drop_tensor, edit_config, expect_error

UNTIED = "zamba-odd-tiny"   # tie_word_embeddings false: hybrid layers 0 and 3 each store a shared block
TIED = "zamba-tiny"         # one shared block, stored under layer 2 (hybrid layers 2 and 4)


def test_shared_block_missing_from_an_untied_zamba(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, UNTIED)
    idx = json.loads((d / "model.safetensors.index.json").read_text())["weight_map"]
    for name in [n for n in idx if n.startswith("model.layers.3.shared_transf.")]:
        drop_tensor(d, name)
    expect_error(monkeypatch, capsys, tmp_path, d, "layer 3 has no shared block", "'model.layers.3.shared_transf.*'",
                 "tie_word_embeddings false")


def test_tied_checkpoint_without_its_block(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, TIED)
    drop_tensor(d, "model.layers.2.shared_transf.self_attn.k_proj.weight")
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.2.shared_transf.self_attn.k_proj.weight'")


def test_untied_config_on_a_tied_checkpoint(monkeypatch, capsys, tmp_path):
    """zamba-tiny says tie_word_embeddings false: then layer 4 would need its own block."""
    d = copy(tmp_path, TIED)
    edit_config(d, tie_word_embeddings=False)
    expect_error(monkeypatch, capsys, tmp_path, d, "layer 4 has no shared block")


def test_block_types_shorter_than_the_layer_count(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, TIED)
    edit_config(d, layers_block_type=config(d)["layers_block_type"][:4])
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "'layers_block_type' has 4 entries")


def test_mamba_heads_not_dividing_the_inner_size(monkeypatch, capsys, tmp_path):
    d = copy(tmp_path, TIED)
    edit_config(d, n_mamba_heads=3)
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "n_mamba_heads 3")


def test_mamba_proj_bias_without_its_tensors(monkeypatch, capsys, tmp_path):
    """mamba_proj_bias true (converted since issue 43: zamba-projbias-tiny) on a checkpoint without
    the biases: the first one is named, exit 2."""
    d = copy(tmp_path, TIED)
    edit_config(d, mamba_proj_bias=True)
    expect_error(monkeypatch, capsys, tmp_path, d, "missing tensor", "'model.layers.0.mamba.in_proj.bias'")


# hidden_act: an ACT2FN name outside the runtime's activations (silu etc. convert: zamba-act-tiny)
@pytest.mark.parametrize("key,value", [("hidden_act", "mish"), ("hidden_mamba_act", "mish"),
                                       ("attention_hidden_size", 96)])
def test_unsupported_variants(monkeypatch, capsys, tmp_path, key, value):
    d = copy(tmp_path, TIED)
    edit_config(d, **{key: value})
    expect_error(monkeypatch, capsys, tmp_path, d, "config.json", "not supported" if key != "attention_hidden_size"
                 else "attention_hidden_size", code=3)
