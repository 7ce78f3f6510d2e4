"""Float64 NumPy forward pass of LaraMiniForCausalLM (docs/specs/more-hybrids.md §8), written from
transformers 5.24's modeling_lara_mini.py and run on the HF safetensors directly; it stands in for
HF on the config variants (tools/make_config_variant_fixtures.py) and is checked against
laramini-tiny's HF reference.npz (tests/parity/test_config_variants.py).  Beyond the fixture it
honours attention_bias (q/k/v/o_proj biases, added before the q / k norms) and norm_topk_prob
(false: the top-k softmax weights are not renormalised).

Glossary: T tokens, Hq / Hkv attention heads, hd head dim, Hk / Hv GDN key / value heads, Dk / Dv
their dims, E experts, F expert width, W sliding window.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from mamba_ref import _lin, rms, silu, softplus, weights


def _l2n(x, eps=1e-6):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)


def _gdn(w, p, x, cfg):
    """LaraMiniGatedDeltaNet: fused in_proj rows [q k v | z | b | a], causal conv (no bias) + SiLU,
    l2-normed q (scaled Dk^-1/2) and k, the delta rule with v-head h on k-head h // (Hv / Hk),
    RMSNorm (out_norm, plain weight) times silu(z), out_proj."""
    T = x.shape[0]
    Hk, Hv, Dk, Dv = (cfg[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                       "linear_value_head_dim"))
    C = 2 * Hk * Dk + Hv * Dv
    P = x @ w[p + "in_proj.weight"].T
    m, z, b, a = P[:, :C], P[:, C:C + Hv * Dv], P[:, C + Hv * Dv:C + Hv * Dv + Hv], P[:, C + Hv * Dv + Hv:]
    cw = w[p + "conv1d.weight"][:, 0, :]
    K = cw.shape[1]
    pad = np.concatenate([np.zeros((K - 1, C)), m])
    m = silu(np.stack([(pad[t:t + K].T * cw).sum(1) for t in range(T)]))
    q = _l2n(m[:, :Hk * Dk].reshape(T, Hk, Dk)) / np.sqrt(Dk)
    k = _l2n(m[:, Hk * Dk:2 * Hk * Dk].reshape(T, Hk, Dk))
    v = m[:, 2 * Hk * Dk:].reshape(T, Hv, Dv)
    g = -np.exp(w[p + "A_log"]) * softplus(a + w[p + "dt_bias"])           # [T, Hv]
    beta = 1.0 / (1.0 + np.exp(-b))
    r = Hv // Hk
    S = np.zeros((Hv, Dk, Dv))
    o = np.empty((T, Hv, Dv))
    for t in range(T):
        for h in range(Hv):
            kk = k[t, h // r]
            S[h] *= np.exp(g[t, h])
            S[h] += np.outer(kk, beta[t, h] * (v[t, h] - S[h].T @ kk))
            o[t, h] = S[h].T @ q[t, h // r]
    o = rms(o, w[p + "out_norm.weight"], cfg["rms_norm_eps"]) * silu(z.reshape(T, Hv, Dv))
    return o.reshape(T, Hv * Dv) @ w[p + "out_proj.weight"].T


def _attention(w, p, x, cfg, sliding: bool):
    """LaraMiniAttention: q/k/v_proj (+ biases), per-head RMSNorm on q and k, NeoX RoPE over the
    whole head on the sliding layers only (NoPE on the full ones), window W on the sliding ones."""
    T = x.shape[0]
    H, Hkv, hd, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rms_norm_eps"]
    q = rms(_lin(w, p + "q_proj", x).reshape(T, H, hd), w[p + "q_norm.weight"], eps)
    k = rms(_lin(w, p + "k_proj", x).reshape(T, Hkv, hd), w[p + "k_norm.weight"], eps)
    v = _lin(w, p + "v_proj", x).reshape(T, Hkv, hd)
    if sliding:
        inv = 1.0 / cfg["rope_parameters"]["rope_theta"] ** (np.arange(0, hd, 2) / hd)
        ang = np.arange(T)[:, None] * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rot(u):
            u1, u2 = u[..., :hd // 2], u[..., hd // 2:]
            return np.concatenate([u1 * c - u2 * s, u2 * c + u1 * s], -1)
        q, k = rot(q), rot(k)
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    ok = (j <= i) & ((j > i - cfg["sliding_window"]) if sliding else True)
    sc = np.where(ok[None], np.einsum("thd,shd->hts", q, k) * hd ** -0.5, -np.inf)
    pr = np.exp(sc - sc.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    return _lin(w, p + "o_proj", np.einsum("hts,shd->thd", pr, v).reshape(T, H * hd))


def _moe(w, p, x, cfg):
    """LaraMiniSparseMoeBlock: softmax over the experts, top-k, renormalised when norm_topk_prob;
    experts gate_up_proj [E, 2F, D] (gate rows first) / down_proj [E, D, F]; plus the shared
    SwiGLU expert, ungated."""
    logits = x @ w[p + "gate.weight"].T
    pr = np.exp(logits - logits.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    gu, dn = w[p + "experts.gate_up_proj"], w[p + "experts.down_proj"]
    F = gu.shape[1] // 2
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        top = np.argsort(-pr[t], kind="stable")[:cfg["num_experts_per_tok"]]
        wt = pr[t, top] / (pr[t, top].sum() if cfg.get("norm_topk_prob", True) else 1.0)
        for e, we in zip(top, wt):
            h = gu[e] @ x[t]
            out[t] += we * (dn[e] @ (silu(h[:F]) * h[F:]))
    s = p + "shared_expert."
    return out + _lin(w, s + "down_proj", silu(_lin(w, s + "gate_proj", x)) * _lin(w, s + "up_proj", x))


def logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of a LaraMiniForCausalLM checkpoint."""
    cfg = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())
    w = weights(hf_dir) if w is None else w
    eps = cfg["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][tokens]
    for i, lt in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        if lt == "linear_attention":
            x = x + _gdn(w, p + "linear_attn.", h, cfg)
        else:
            x = x + _attention(w, p + "self_attn.", h, cfg, lt == "sliding_attention")
        x = x + _moe(w, p + "mlp.", rms(x, w[p + "post_attention_layernorm.weight"], eps), cfg)
    x = rms(x, w["model.norm.weight"], eps)
    tie = cfg.get("tie_word_embeddings", True)
    return x @ (w["model.embed_tokens.weight"] if tie else w["lm_head.weight"]).T
