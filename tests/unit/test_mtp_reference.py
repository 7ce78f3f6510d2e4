"""The MTP block (toolkit/runtime/mtp.py, toolkit/native/layers/mtp.c) against a float64 NumPy
reference written from the HF checkpoint's mtp.* weights (save_pretrained drops them; the
fixture maker added them to the last shard), after vLLM's qwen3_next_mtp.py:

    x = fc [pre_fc_norm_embedding(embed(t)) ; pre_fc_norm_hidden(h)]
    x = decoder layer (Qwen3.5 gated attention: q_proj per head [q | gate], q/k RMSNorm,
        partial NEOX RoPE, causal GQA softmax, * sigmoid(gate), o_proj; then the MLP)
    logits = lm_head(norm(x))          (every RMSNorm Gemma-style: x / rms * (1 + w))

h at the block's position i is the main model's final hidden state (after its norm) at main
position i, t the token at i + 1; the main model's h here comes from the runtime (checked
first: lm_head(h) reproduces HF's logits of the fixture's reference.npz).  The block then runs
one drafted position (t = its own first draft, h = its own normed output), as a draft step does.
"""
from __future__ import annotations

import json
import pathlib
import struct

import numpy as np
import pytest

from mtp_util import MTP_FIXTURES
from toolkit.runtime import Context, Model
from toolkit.runtime.mtp import MtpModel

HF = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "hf"
CASES = MTP_FIXTURES   # every fixture with a NextN head


def _read_st(d: pathlib.Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors checkpoint (F32 only: the fixtures' dtype) as float64."""
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        raw = f.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        for name, v in head.items():
            if name == "__metadata__":
                continue
            assert v["dtype"] == "F32", (name, v["dtype"])
            a, b = v["data_offsets"]
            out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], np.float32).reshape(v["shape"]).astype(np.float64)
    return out


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)


def _rope(x, pos, n_rot, theta):
    """NEOX partial RoPE on the first n_rot dims of x [T, H, hd] (HF rotate_half)."""
    half = n_rot // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2 / n_rot)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    a, b = x[..., :half], x[..., half:n_rot]
    y[..., :half] = a * c - b * s
    y[..., half:n_rot] = b * c + a * s
    return y


def _mlp(W, p, x, cfg):
    if p + "mlp.gate.weight" not in W:
        return W[p + "mlp.down_proj.weight"] @ (_silu(W[p + "mlp.gate_proj.weight"] @ x) * (W[p + "mlp.up_proj.weight"] @ x))
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    r = W[p + "mlp.gate.weight"] @ x
    pr = np.exp(r - r.max())
    pr /= pr.sum()
    top = np.argsort(-pr, kind="stable")[:k]
    wt = pr[top] / pr[top].sum()
    y = np.zeros_like(x)
    for e, w in zip(top, wt):
        q = p + f"mlp.experts.{e}."
        y += w * (W[q + "down_proj.weight"] @ (_silu(W[q + "gate_proj.weight"] @ x) * (W[q + "up_proj.weight"] @ x)))
    s = p + "mlp.shared_expert."
    ys = W[s + "down_proj.weight"] @ (_silu(W[s + "gate_proj.weight"] @ x) * (W[s + "up_proj.weight"] @ x))
    g = 1.0 / (1.0 + np.exp(-(W[p + "mlp.shared_expert_gate.weight"] @ x)[0]))
    assert E > 0
    return y + g * ys


def _silu(x):
    return x / (1.0 + np.exp(-x))


def mtp_reference(W, cfg, toks, hs):
    """Logits [T, V] and normed outputs [T, D] of the MTP block over positions 0..T-1, token
    toks[i] and hidden state hs[i] at position i (float64)."""
    eps, D = cfg["rms_norm_eps"], cfg["hidden_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    n_rot = int(hd * rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    emb = W["model.embed_tokens.weight"] if "model.embed_tokens.weight" in W else W["model.language_model.embed_tokens.weight"]
    head = W.get("lm_head.weight", emb)
    T = len(toks)
    e = _rms(emb[np.asarray(toks)], W["mtp.pre_fc_norm_embedding.weight"], eps)
    h = _rms(np.asarray(hs, np.float64), W["mtp.pre_fc_norm_hidden.weight"], eps)
    x = np.concatenate([e, h], axis=1) @ W["mtp.fc.weight"].T                  # [T, D]
    p = "mtp.layers.0."
    xn = _rms(x, W[p + "input_layernorm.weight"], eps)
    qg = (xn @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (xn @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
    v = (xn @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
    q = _rms(q, W[p + "self_attn.q_norm.weight"], eps)
    k = _rms(k, W[p + "self_attn.k_norm.weight"], eps)
    pos = np.arange(T, dtype=np.float64)
    q, k = _rope(q, pos, n_rot, theta), _rope(k, pos, n_rot, theta)
    att = np.zeros((T, nh, hd))
    for hh in range(nh):
        kv = hh // (nh // nkv)
        s = q[:, hh] @ k[:, kv].T / np.sqrt(hd)
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        att[:, hh] = s @ v[:, kv]
    att = att * (1.0 / (1.0 + np.exp(-gate)))
    x = x + att.reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
    xn = _rms(x, W[p + "post_attention_layernorm.weight"], eps)
    x = x + np.stack([_mlp(W, p, xn[i], cfg) for i in range(T)])
    out = _rms(x, W["mtp.norm.weight"], eps)
    return out @ head.T, out


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))


@pytest.mark.native
@pytest.mark.parametrize("name", CASES)
def test_mtp_logits_match_the_float64_reference(hf_f32, name):
    d = HF / name
    if not d.exists():
        pytest.skip(f"no fixture {name}")
    cfg = json.loads((d / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    W = _read_st(d)
    ref = np.load(d / "reference.npz")
    toks = [int(t) for t in ref["tokens"][:24]]
    m = Model(hf_f32(name))
    try:
        with Context(m, n_ctx=64) as ctx:
            lo, hs = ctx.decode_batch([(toks, 0)], logits="all", hidden=True)
        lo, hs = lo[0], hs[0]
        # h is the vector the output head reads: lm_head(h) gives HF's logits
        head = W.get("lm_head.weight", W.get("model.embed_tokens.weight"))
        assert _rel(hs.astype(np.float64) @ head.T, ref["logits"][:len(toks)]) < 1e-4
        assert _rel(lo, ref["logits"][:len(toks)]) < 1e-4
        mm = MtpModel(m)
        with Context(mm, n_ctx=64) as mc:
            # block position i: token i + 1, h of main position i; the last row's logits draft d1
            got, gh = mc.decode_batch([(toks[1:], 0)], logits="all", embd=[hs[:-1]], hidden=True)
            want, wh = mtp_reference(W, cfg, toks[1:], hs[:-1])
            assert _rel(got[0], want) < 1e-5
            # a drafted position: the block's own first draft and its own normed output as h
            d1 = int(np.argmax(got[0][-1]))
            got2 = mc.decode_batch([([d1], 0)], logits="all", embd=[gh[0][-1:]])[0]
            want2, _ = mtp_reference(W, cfg, toks[1:] + [d1], np.concatenate([hs[:-1], gh[0][-1:]]))
            assert _rel(got2[-1], want2[-1]) < 1e-5
            assert _rel(gh[0], wh) < 1e-5
    finally:
        m.close()
