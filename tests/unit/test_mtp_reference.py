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
GLM-5-Next's and Ling 3's DeepSeek-style NextN layers (``layers.{num_hidden_layers}.*``) have
references of their own (glm_mtp_reference, ling_mtp_reference: MLA with GLM's DSA indexer and
clamped MoE, Ling's RoPE, head gate and grouped MoE; plain RMSNorms).
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


def _rms_plain(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _glm_swiglu(x, g, u, d, lim):
    a, b = x @ g.T, x @ u.T
    return (_silu(np.minimum(a, lim)) * np.clip(b, -lim, lim)) @ d.T


def glm_mtp_reference(W, cfg, toks, hs):
    """GLM-5-Next's NextN layer L = num_hidden_layers (DeepSeek-V3 style, HF names
    model.language_model.layers.L.*), float64, over positions 0..T-1 (token toks[i], h hs[i]):

        x = eh_proj [enorm(embed(t)) ; hnorm(h)]                       (plain RMSNorms: x w)
        x += o_proj(MLA(input_layernorm(x)))   NoPE MLA: q = q_b(q_a_layernorm(q_a(x))), c =
             kv_a_layernorm(kv_a(x)), [k_nope | v] = kv_b(c) per head, scores * (dn)^-1/2,
             the keys its DSA indexer selects (modeling_glm5_next.py Glm5NextTextIndexer: pools
             of kp tokens pooled by softmax(gate + ape), ReLU scores weighted per head, the top
             index_topk / kp complete visible pools, + the tail)
        x += MoE(post_attention_layernorm(x))  (sigmoid router, choice bias, top-k, renormalised,
             * routed_scaling_factor, + the shared expert; every SwiGLU clamped at swiglu_limit)
        logits = lm_head(shared_head.norm(x))
    Returns (logits [T, V], the normed outputs [T, D])."""
    eps, T = cfg["rms_norm_eps"], len(toks)
    p = f"model.language_model.layers.{cfg['num_hidden_layers']}."
    a = p + "self_attn."
    emb = W["model.language_model.embed_tokens.weight"]
    head = W.get(p + "shared_head.head.weight", W.get("lm_head.weight", emb))
    e = _rms_plain(emb[np.asarray(toks)], W[p + "enorm.weight"], eps)
    h = _rms_plain(np.asarray(hs, np.float64), W[p + "hnorm.weight"], eps)
    x = np.concatenate([e, h], axis=1) @ W[p + "eh_proj.weight"].T
    xn = _rms_plain(x, W[p + "input_layernorm.weight"], eps)
    nh, dn, dv = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    qr = _rms_plain(xn @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], eps)
    q = (qr @ W[a + "q_b_proj.weight"].T).reshape(T, nh, dn)
    c = _rms_plain(xn @ W[a + "kv_a_proj_with_mqa.weight"].T, W[a + "kv_a_layernorm.weight"], eps)
    kv = (c @ W[a + "kv_b_proj.weight"].T).reshape(T, nh, dn + dv)
    k, v = kv[..., :dn], kv[..., dn:]
    # the indexer's choice
    nI, dI, kp, B = cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_kpool"], cfg["index_topk"]
    qI = (qr @ W[a + "indexer.wq_b.weight"].T).reshape(T, nI, dI)
    kI = xn @ W[a + "indexer.wk.weight"].T
    kI = (kI - kI.mean(-1, keepdims=True)) / np.sqrt(kI.var(-1, keepdims=True) + 1e-6)
    kI = kI * W[a + "indexer.k_norm.weight"] + W[a + "indexer.k_norm.bias"]
    gam = xn @ W[a + "indexer.index_kpool_compress_gate"].T
    ape = W[a + "indexer.index_kpool_compress_ape"]
    wI = (xn @ W[a + "indexer.weights_proj.weight"].T) * nI ** -0.5
    n_pool = T // kp
    P = np.zeros((n_pool, dI))
    for pp in range(n_pool):
        z = gam[pp * kp:(pp + 1) * kp] + ape
        z = np.exp(z - z.max(0))
        P[pp] = (z / z.sum(0) * kI[pp * kp:(pp + 1) * kp]).sum(0)
    sc = np.einsum("th,thp->tp", wI, np.maximum(np.einsum("thc,pc->thp", qI, P) * dI ** -0.5, 0))
    sel = np.zeros((T, T), bool)
    for t in range(T):
        nb = (t + 1) // kp
        for pp in np.argsort(-sc[t, :nb], kind="stable")[:B // kp]:
            sel[t, pp * kp:(pp + 1) * kp] = True
        if cfg.get("index_kpool_always_select_tail", True):
            sel[t, nb * kp:t + 1] = True
    s = np.einsum("thd,shd->hts", q, k) * dn ** -0.5
    s = np.where(sel[None], s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    x = x + np.einsum("hts,shd->thd", pr, v).reshape(T, nh * dv) @ W[a + "o_proj.weight"].T
    xn = _rms_plain(x, W[p + "post_attention_layernorm.weight"], eps)
    lim, f = cfg["swiglu_limit"], p + "mlp."
    y = _glm_swiglu(xn, W[f + "shared_experts.gate_proj.weight"], W[f + "shared_experts.up_proj.weight"],
                    W[f + "shared_experts.down_proj.weight"], lim)
    sg = 1.0 / (1.0 + np.exp(-(xn @ W[f + "gate.weight"].T)))
    ch = sg + W[f + "gate.e_score_correction_bias"]
    assert cfg.get("n_group", 1) == 1
    for t in range(T):
        top = np.argsort(-ch[t], kind="stable")[:cfg["num_experts_per_tok"]]
        wt = sg[t, top]
        if cfg.get("norm_topk_prob", True):
            wt = wt / (wt.sum() + 1e-20)
        for ex, we in zip(top, wt * cfg["routed_scaling_factor"]):
            q_ = f + f"experts.{ex}."
            y[t] += we * _glm_swiglu(xn[t:t + 1], W[q_ + "gate_proj.weight"], W[q_ + "up_proj.weight"],
                                     W[q_ + "down_proj.weight"], lim)[0]
    x = x + y
    out = _rms_plain(x, W[p + "shared_head.norm.weight"], eps)
    return out @ head.T, out


def _rope_pairs(x, pos, theta):
    """x [T, ..., dr]: adjacent pairs (2i, 2i+1) rotated by pos theta^(-2i/dr) (HF
    apply_rotary_pos_emb_interleave writes them de-interleaved, the same on q and k: the same scores)."""
    dr = x.shape[-1]
    th = pos[:, None] * theta ** (-np.arange(0, dr, 2) / dr)
    th = th.reshape(th.shape[0], *([1] * (x.ndim - 2)), dr // 2)
    c, sn = np.cos(th), np.sin(th)
    y = x.copy()
    y[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * sn
    y[..., 1::2] = x[..., 0::2] * sn + x[..., 1::2] * c
    return y


def ling_mtp_reference(W, cfg, toks, hs):
    """Ling 3's NextN layer L = num_hidden_layers (HF names model.layers.L.*; llama.cpp 0c1e570
    bailingmoe3.cpp graph_mtp), float64, positions 0..T-1 (token toks[i], h hs[i]):

        x = eh_proj [enorm(embed(t)) ; hnorm(h)]                       (plain RMSNorms, rms_norm_eps)
        x += dense(MLA(input_layernorm(x)) * sigmoid(g_proj(.)) per head)   q-LoRA, q_a / kv_a
             RMSNorms at HF's 1e-6, RoPE on the dr dims (adjacent pairs, rope_theta), scores *
             (dn + dr)^-1/2, causal
        x += MoE(post_attention_layernorm(x))  (sigmoid router, expert_bias for the choice, groups
             (two best per group, topk_group kept), top-k, renormalised, * routed_scaling_factor,
             + the shared expert of width moe_intermediate_size x num_shared_experts)
        logits = lm_head(final_layernorm(x))
    Returns (logits [T, V], the normed outputs [T, D])."""
    eps, T = cfg["rms_norm_eps"], len(toks)
    p = f"model.layers.{cfg['num_hidden_layers']}."
    a = p + "attention."
    e = _rms_plain(W["model.word_embeddings.weight"][np.asarray(toks)], W[p + "enorm.weight"], eps)
    h = _rms_plain(np.asarray(hs, np.float64), W[p + "hnorm.weight"], eps)
    x = np.concatenate([e, h], axis=1) @ W[p + "eh_proj.weight"].T
    xn = _rms_plain(x, W[p + "input_layernorm.weight"], eps)
    nh, dn, dr, dv, rkv = (cfg[k] for k in ("num_attention_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                            "kv_lora_rank"))
    if cfg.get("q_lora_rank"):
        q = _rms_plain(xn @ W[a + "q_a_proj.weight"].T, W[a + "q_a_layernorm.weight"], 1e-6) @ W[a + "q_b_proj.weight"].T
    else:
        q = xn @ W[a + "q_proj.weight"].T
    q = q.reshape(T, nh, dn + dr)
    kva = xn @ W[a + "kv_a_proj_with_mqa.weight"].T
    c = _rms_plain(kva[:, :rkv], W[a + "kv_a_layernorm.weight"], 1e-6)
    kv = (c @ W[a + "kv_b_proj.weight"].T).reshape(T, nh, dn + dv)
    pos = np.arange(T, dtype=np.float64)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 6e6))
    qr, kr = _rope_pairs(q[..., dn:], pos, theta), _rope_pairs(kva[:, rkv:], pos, theta)
    s = (np.einsum("thd,shd->hts", q[..., :dn], kv[..., :dn]) + np.einsum("thd,sd->hts", qr, kr)) * (dn + dr) ** -0.5
    s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", pr, kv[..., dn:]) * (1.0 / (1.0 + np.exp(-(xn @ W[a + "g_proj.weight"].T))))[:, :, None]
    x = x + o.reshape(T, nh * dv) @ W[a + "dense.weight"].T
    xn = _rms_plain(x, W[p + "post_attention_layernorm.weight"], eps)
    f = p + "mlp."
    inf = float("inf")
    y = _glm_swiglu(xn, W[f + "shared_experts.gate_proj.weight"], W[f + "shared_experts.up_proj.weight"],
                    W[f + "shared_experts.down_proj.weight"], inf)
    sg = 1.0 / (1.0 + np.exp(-(xn @ W[f + "gate.weight"].T)))
    ch = sg + W[f + "gate.expert_bias"]
    E, G, tg = cfg["num_experts"], cfg.get("n_group", 8), cfg.get("topk_group", 4)
    for t in range(T):
        cc = ch[t].copy()
        if G > 1:
            gs = np.array([np.sort(grp)[-2:].sum() for grp in cc.reshape(G, -1)])
            keep = np.argsort(-gs, kind="stable")[:tg]
            cc[np.repeat(~np.isin(np.arange(G), keep), E // G)] = -np.inf
        top = np.argsort(-cc, kind="stable")[:cfg["num_experts_per_tok"]]
        wt = sg[t, top]
        if cfg.get("norm_topk_prob", True):
            wt = wt / (wt.sum() + 1e-20)
        for ex, we in zip(top, wt * cfg["routed_scaling_factor"]):
            q_ = f + f"experts.{ex}."
            y[t] += we * _glm_swiglu(xn[t:t + 1], W[q_ + "gate_proj.weight"], W[q_ + "up_proj.weight"],
                                     W[q_ + "down_proj.weight"], inf)[0]
    x = x + y
    out = _rms_plain(x, W[p + "final_layernorm.weight"], eps)
    return out @ W["lm_head.weight"].T, out


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
    glm = cfg.get("model_type") == "glm5_next_text"
    reference = (glm_mtp_reference if glm else ling_mtp_reference if cfg.get("model_type") == "bailing_hybrid"
                 else mtp_reference)
    # GLM: 48 positions, so that the block's indexer chooses 4 of 5 complete pools of 8 from position 39
    toks = [int(t) for t in ref["tokens"][:48 if glm else 24]]
    m = Model(hf_f32(name))
    try:
        with Context(m, n_ctx=64) as ctx:
            lo, hs = ctx.decode_batch([(toks, 0)], logits="all", hidden=True)
        lo, hs = lo[0], hs[0]
        # h is the vector the output head reads: lm_head(h) gives HF's logits
        head = W["lm_head.weight"] if "lm_head.weight" in W else W.get("model.embed_tokens.weight",
                                                                        W.get("model.language_model.embed_tokens.weight"))
        assert _rel(hs.astype(np.float64) @ head.T, ref["logits"][:len(toks)]) < 1e-4
        assert _rel(lo, ref["logits"][:len(toks)]) < 1e-4
        mm = MtpModel(m)
        with Context(mm, n_ctx=64) as mc:
            # block position i: token i + 1, h of main position i; the last row's logits draft d1
            got, gh = mc.decode_batch([(toks[1:], 0)], logits="all", embd=[hs[:-1]], hidden=True)
            want, wh = reference(W, cfg, toks[1:], hs[:-1])
            assert _rel(got[0], want) < 1e-5
            # a drafted position: the block's own first draft and its own normed output as h
            d1 = int(np.argmax(got[0][-1]))
            got2 = mc.decode_batch([([d1], 0)], logits="all", embd=[gh[0][-1:]])[0]
            want2, _ = reference(W, cfg, toks[1:] + [d1], np.concatenate([hs[:-1], gh[0][-1:]]))
            assert _rel(got2[-1], want2[-1]) < 1e-5
            assert _rel(gh[0], wh) < 1e-5
    finally:
        m.close()
