"""Granite 4.0-H multipliers (embedding, attention, residual, logits), which the HF fixture
leaves at 1.0, checked against an independent float64 numpy forward pass written from
transformers' modeling_granitemoehybrid.py and run on the HF safetensors directly.

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
from safetensors.numpy import load_file

pytestmark = pytest.mark.native

NAME = "granitehybrid-moe-tiny"


def _weights(hf_dir) -> dict[str, np.ndarray]:
    w: dict[str, np.ndarray] = {}
    for p in sorted(hf_dir.glob("*.safetensors")):
        w.update({k: v.astype(np.float64) for k, v in load_file(str(p)).items()})
    return w


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _mamba(w, p, x, cfg):
    """GraniteMoeHybridMambaLayer (== Bamba mixer), recurrent form. x: [T, D]."""
    T = x.shape[0]
    H, P, N, G = cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_d_state"], cfg["mamba_n_groups"]
    DI = H * P
    zxbcdt = x @ w[p + "in_proj.weight"].T
    z, xbc, dt = zxbcdt[:, :DI], zxbcdt[:, DI:DI + DI + 2 * G * N], zxbcdt[:, -H:]
    cw = w[p + "conv1d.weight"][:, 0, :]                                  # [C, K]
    K = cw.shape[1]
    pad = np.concatenate([np.zeros((K - 1, xbc.shape[1])), xbc])
    xbc = _silu(np.stack([(pad[t:t + K].T * cw).sum(1) for t in range(T)]) + w[p + "conv1d.bias"])
    xs, B, C = xbc[:, :DI].reshape(T, H, P), xbc[:, DI:DI + G * N].reshape(T, G, N), xbc[:, DI + G * N:].reshape(T, G, N)
    dt = _softplus(dt + w[p + "dt_bias"])
    A = -np.exp(w[p + "A_log"])
    g = np.arange(H) // (H // G)
    s = np.zeros((H, P, N))
    y = np.empty((T, H, P))
    for t in range(T):
        s = np.exp(dt[t] * A)[:, None, None] * s + (dt[t][:, None] * xs[t])[:, :, None] * B[t][g][:, None, :]
        y[t] = np.einsum("hpn,hn->hp", s, C[t][g]) + w[p + "D"][:, None] * xs[t]
    y = y.reshape(T, DI) * _silu(z)
    y = _rms(y.reshape(T, G, DI // G), 1.0, cfg["rms_norm_eps"]).reshape(T, DI) * w[p + "norm.weight"]
    return y @ w[p + "out_proj.weight"].T


def _attention(w, p, x, cfg):
    """GraniteMoeHybridAttention without rope ("nope"), scaling = attention_multiplier."""
    T = x.shape[0]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // H
    q = (x @ w[p + "q_proj.weight"].T).reshape(T, H, hd)
    k = (x @ w[p + "k_proj.weight"].T).reshape(T, Hkv, hd)
    v = (x @ w[p + "v_proj.weight"].T).reshape(T, Hkv, hd)
    if cfg.get("position_embedding_type") == "rope":        # rotate_half over the whole head
        theta = cfg["rope_parameters"]["rope_theta"]
        inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
        ang = np.arange(T)[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], 1))[:, None], np.sin(np.concatenate([ang, ang], 1))[:, None]

        def rot(a):
            return a * cos + np.concatenate([-a[..., hd // 2:], a[..., :hd // 2]], -1) * sin
        q, k = rot(q), rot(k)
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    s = np.einsum("thd,shd->hts", q, k) * cfg["attention_multiplier"]
    s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", pr, v).reshape(T, H * hd) @ w[p + "o_proj.weight"].T


def _ffn(w, p, x, cfg):
    """block_sparse_moe (top-k of router logits, softmax over the k) + shared_mlp."""
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    logits = x @ w[p + "block_sparse_moe.router.layer.weight"].T         # [T, E]
    out = np.zeros_like(x)
    wi, wo = w[p + "block_sparse_moe.input_linear.weight"], w[p + "block_sparse_moe.output_linear.weight"]
    for t in range(x.shape[0]):
        top = np.argsort(-logits[t], kind="stable")[:k]
        g = np.exp(logits[t][top] - logits[t][top].max())
        g /= g.sum()
        for e, ge in zip(top, g):
            h = wi[e] @ x[t]
            F = h.shape[0] // 2
            out[t] += ge * (wo[e] @ (_silu(h[:F]) * h[F:]))
    h = x @ w[p + "shared_mlp.input_linear.weight"].T
    F = h.shape[1] // 2
    return out + (_silu(h[:, :F]) * h[:, F:]) @ w[p + "shared_mlp.output_linear.weight"].T


def reference_logits(hf_dir, tokens) -> np.ndarray:
    cfg = json.loads((hf_dir / "config.json").read_text())
    w = _weights(hf_dir)
    eps, rm = cfg["rms_norm_eps"], cfg["residual_multiplier"]
    x = w["model.embed_tokens.weight"][tokens] * cfg["embedding_multiplier"]
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        h = _attention(w, p + "self_attn.", h, cfg) if kind == "full_attention" else _mamba(w, p + "mamba.", h, cfg)
        x = x + h * rm
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + _ffn(w, p, h, cfg) * rm
    x = _rms(x, w["model.norm.weight"], eps)
    return (x @ w["lm_head.weight"].T) / cfg["logits_scaling"]


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
