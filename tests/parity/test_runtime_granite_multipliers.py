"""Granite 4.0-H multipliers (embedding, attention, residual, logits), which the HF fixture
leaves at 1.0, checked against an independent float64 numpy forward pass written from
transformers' modeling_granitemoehybrid.py and run on the HF safetensors directly (tests/mamba_ref.py).

The numpy reference is first checked against the fixture's reference.npz (multipliers 1.0),
then the config is rewritten with other multipliers, converted, and run by the C runtime.

Glossary: T tokens, D hidden, DI mamba inner width, H heads, P head dim, N d_state,
G groups, E experts, F expert width.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from mamba_ref import hybrid_logits as reference_logits

pytestmark = pytest.mark.native

NAME = "granitehybrid-moe-tiny"


def rel_l2(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_numpy_reference_matches_hf(fixtures):
    ref = np.load(fixtures / "hf" / NAME / "reference.npz")
    assert rel_l2(reference_logits(fixtures / "hf" / NAME, ref["tokens"]), ref["logits"]) < 1e-5


@pytest.mark.parametrize("rope", [False, True], ids=["nope", "rope"])
def test_multipliers_match_numpy_reference(fixtures, tmp_path, rope):
    from toolkit.convert import convert
    from toolkit.runtime import Context, Model
    src = fixtures / "hf" / NAME
    hf = tmp_path / NAME
    shutil.copytree(src, hf)
    cfg = json.loads((hf / "config.json").read_text())
    cfg.update(embedding_multiplier=3.5, residual_multiplier=0.6, attention_multiplier=0.3, logits_scaling=2.5)
    if rope:   # Granite 4.0-H with RoPE over the whole head
        cfg["position_embedding_type"] = "rope"
    (hf / "config.json").write_text(json.dumps(cfg))
    tokens = np.load(src / "reference.npz")["tokens"]
    ref = reference_logits(hf, tokens)
    base = reference_logits(src, tokens)
    assert rel_l2(ref, base) > 0.1            # the multipliers matter
    if rope:                                  # and so does the rotation
        cfg["position_embedding_type"] = "nope"
        (hf / "config.json").write_text(json.dumps(cfg))
        assert rel_l2(ref, reference_logits(hf, tokens)) > 1e-3
        cfg["position_embedding_type"] = "rope"
        (hf / "config.json").write_text(json.dumps(cfg))
    convert(str(hf), str(tmp_path / "m.gguf"), "f32")
    with Model(tmp_path / "m.gguf") as m, Context(m, n_ctx=64) as ctx:
        got = ctx.decode(tokens, logits="all")
    err = rel_l2(got, ref)
    assert err < 1e-5, f"rel L2 {err:.2e}"
