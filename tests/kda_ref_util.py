"""A float64 numpy forward of GLM-5-Next (glm5-next) and Ling 3 (bailingmoe3) read from a GGUF
file in llama.cpp's layout (docs/specs/kda-family.md §2), for tests: it checks the layout our converter
writes against HF's logits, and runs the C pieces this branch owns (mHC: tk_mhc_pre_rows /
tk_mhc_post_rows; the DSA selection: tk_dsa_select) inside a whole model when asked (``use_c``).

Formulas: transformers 5.24 modeling_glm5_next.py / modeling_bailing_hybrid.py (KDA recurrence
modeling_kimi_linear.py:449-462, the bounded / softplus gates, MLA, DSA modeling_glm5_next.py:772-1061, mHC modeling_glm5_next.py:266-340, MoE modeling_kimi_linear.py:719-781).
One sequence, the whole prompt at once (HF's one-shot call).
"""
from __future__ import annotations

import numpy as np


def load(path) -> tuple[dict, dict]:
    """(tensors by name as float64 numpy arrays in numpy order, keys without the arch prefix)"""
    import gguf
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    keys = {k[len(arch) + 1:]: f.contents() for k, f in r.fields.items() if k.startswith(arch + ".")}
    keys["arch"] = arch
    return {t.name: np.asarray(t.data, np.float64).reshape(tuple(reversed([int(x) for x in t.shape])))
            for t in r.tensors}, keys


def rms(x, w, eps):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y * w if w is not None else y


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def kda(W, i, x, K, eps, gate, l2_eps=1e-6):
    """KDA layer i on x [T, H]; gate: ('bounded', lb, sign of ssm_a) or ('softplus', None, sign)."""
    p = f"blk.{i}."
    T = x.shape[0]
    n = W[p + "ssm_beta.weight"].shape[0]
    C = W[p + "attn_q.weight"].shape[0]
    D = C // n
    cols = []
    for nm in "qkv":
        m = x @ W[p + f"attn_{nm}.weight"].T
        w = W[p + f"ssm_conv1d_{nm}.weight"].reshape(C, K)
        pad = np.concatenate([np.zeros((K - 1, C)), m])
        cols.append(silu(sum(w[:, j] * pad[j:j + T] for j in range(K))))
    q, k, v = (c.reshape(T, n, D) for c in cols)
    if p + "ssm_f_b.weight" in W:
        u = (x @ W[p + "ssm_f_a.weight"].T) @ W[p + "ssm_f_b.weight"].T
        z = (x @ W[p + "ssm_g_a.weight"].T) @ W[p + "ssm_g_b.weight"].T
    else:
        u, z = x @ W[p + "ssm_f_a.weight"].T, x @ W[p + "ssm_g_a.weight"].T
    u = (u + W[p + "ssm_dt.bias"]).reshape(T, n, D)
    a = (W[p + "ssm_a"].reshape(n) * gate[2])[None, :, None]          # exp(A_log) > 0
    g = gate[1] * sigmoid(a * u) if gate[0] == "bounded" else -a * softplus(u)
    beta = sigmoid(x @ W[p + "ssm_beta.weight"].T)
    qn = q / np.sqrt((q * q).sum(-1, keepdims=True) + l2_eps) / np.sqrt(D)
    kn = k / np.sqrt((k * k).sum(-1, keepdims=True) + l2_eps)
    S = np.zeros((n, D, D))
    o = np.zeros((T, n, D))
    for t in range(T):
        S = np.exp(g[t])[:, :, None] * S
        uu = beta[t][:, None] * (v[t] - np.einsum("hij,hi->hj", S, kn[t]))
        S = S + kn[t][:, :, None] * uu[:, None, :]
        o[t] = np.einsum("hij,hi->hj", S, qn[t])
    y = rms(o, W[p + "ssm_norm.weight"], eps) * sigmoid(z.reshape(T, n, D))
    return y.reshape(T, C) @ W[p + "attn_output.weight"].T


def rope_interleaved(x, pos, base):
    """x [T, ..., dr]: pairs (2i, 2i+1) rotated by pos * base^(-2i/dr)"""
    dr = x.shape[-1]
    th = pos[:, None] * base ** (-np.arange(0, dr, 2) / dr)             # [T, dr/2]
    th = th.reshape(th.shape[0], *([1] * (x.ndim - 2)), dr // 2)
    c, s = np.cos(th), np.sin(th)
    y = x.copy()
    y[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    y[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return y


def dsa_select(W, i, x, qr, keys, use_c, prev):
    """bool [T, T]: the keys each query attends (§2.4); a shared layer returns prev."""
    p = f"blk.{i}."
    if p + "indexer.attn_q_b.weight" not in W:
        return prev
    nI, dI = keys["attention.indexer.head_count"], keys["attention.indexer.key_length"]
    kp, B = keys["attention.indexer.kpool"], keys["attention.indexer.top_k"]
    tail = bool(keys["attention.indexer.kpool_select_tail"])
    T = x.shape[0]
    qI = (qr @ W[p + "indexer.attn_q_b.weight"].T).reshape(T, nI, dI)
    k = x @ W[p + "indexer.attn_k.weight"].T
    k = (k - k.mean(-1, keepdims=True)) / np.sqrt(k.var(-1, keepdims=True) + keys["attention.layer_norm_epsilon"])
    k = k * W[p + "indexer.k_norm.weight"] + W[p + "indexer.k_norm.bias"]
    gam = x @ W[p + "indexer_compressor_gate.weight"].T
    ape = W[p + "indexer_compressor_ape.weight"]                        # [kp, dI]
    w = (x @ W[p + "indexer.proj.weight"].T) * nI ** -0.5
    if use_c:
        from toolkit.binding import ffi, lib
        f32 = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
        kg, ap, q32, w32 = f32(np.concatenate([k, gam], 1)), f32(ape), f32(qI), f32(w)
        nv = np.ascontiguousarray(np.arange(1, T + 1), np.int32)
        sel = np.zeros((T, T), np.uint8)
        fp = lambda a: ffi.cast("float *", ffi.from_buffer(a))  # noqa: E731
        assert lib.tk_dsa_select(fp(kg), ffi.NULL, 2 * dI, T, fp(ap), fp(q32), fp(w32),
                                 ffi.cast("int32_t *", ffi.from_buffer(nv)), T, nI, dI, kp, B, int(tail),
                                 ffi.cast("uint8_t *", ffi.from_buffer(sel)), T) == 0
        return sel.astype(bool)
    n_pool = T // kp
    P = np.zeros((n_pool, dI))
    for pp in range(n_pool):
        zz = gam[pp * kp:(pp + 1) * kp] + ape
        e = np.exp(zz - zz.max(0))
        P[pp] = (e / e.sum(0) * k[pp * kp:(pp + 1) * kp]).sum(0)
    sc = np.einsum("th,thp->tp", w, np.maximum(np.einsum("thc,pc->thp", qI, P) * dI ** -0.5, 0))
    sel = np.zeros((T, T), bool)
    for t in range(T):
        nb = (t + 1) // kp
        for pp in np.argsort(-sc[t, :nb], kind="stable")[:B // kp]:
            sel[t, pp * kp:(pp + 1) * kp] = True
        if tail:
            sel[t, nb * kp:t + 1] = True
    return sel


def mla(W, i, x, keys, eps, mla_eps, sel=None):
    """MLA layer i in llama.cpp's absorbed layout (attn_k_b [h, rkv, dn], attn_v_b [h, dv, rkv]);
    sel [T, T] the allowed keys (None: causal); returns (out, q-LoRA latent)"""
    p = f"blk.{i}."
    T = x.shape[0]
    h = keys["attention.head_count"]
    dr = keys.get("rope.dimension_count", 0)
    kb, vb = W[p + "attn_k_b.weight"], W[p + "attn_v_b.weight"]
    dn, dv, rkv = kb.shape[2], vb.shape[1], kb.shape[1]
    qr = None
    if p + "attn_q_a.weight" in W:
        qr = rms(x @ W[p + "attn_q_a.weight"].T, W[p + "attn_q_a_norm.weight"], mla_eps)
        q = qr @ W[p + "attn_q_b.weight"].T
    else:
        q = x @ W[p + "attn_q.weight"].T
    q = q.reshape(T, h, dn + dr)
    kva = x @ W[p + "attn_kv_a_mqa.weight"].T
    c = rms(kva[:, :rkv], W[p + "attn_kv_a_norm.weight"], mla_eps)
    knope = np.einsum("tr,hrd->thd", c, kb)
    v = np.einsum("tr,hdr->thd", c, vb)
    qn, krot = q[..., :dn], kva[:, rkv:]
    s = np.einsum("thd,shd->hts", qn, knope)
    if dr:
        pos = np.arange(T, dtype=np.float64)
        qrot = rope_interleaved(q[..., dn:], pos, keys["rope.freq_base"])
        krot = rope_interleaved(krot, pos, keys["rope.freq_base"])
        s = s + np.einsum("thd,sd->hts", qrot, krot)
    s = s * (dn + dr) ** -0.5
    allow = np.tril(np.ones((T, T), bool)) if sel is None else sel
    s = np.where(allow[None], s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr = pr / pr.sum(-1, keepdims=True)
    o = np.einsum("hts,shd->thd", pr, v)
    if p + "attn_gate.weight" in W:
        o = o * sigmoid(x @ W[p + "attn_gate.weight"].T)[:, :, None]
    return o.reshape(T, h * dv) @ W[p + "attn_output.weight"].T, qr


def swiglu(x, g, u, d, lim):
    a, b = x @ g.T, x @ u.T
    if lim:
        a, b = np.minimum(a, lim), np.clip(b, -lim, lim)
    return (silu(a) * b) @ d.T


def ffn(W, i, x, keys, lim_exp, lim_sh):
    p = f"blk.{i}."
    if p + "ffn_gate_inp.weight" not in W:
        return swiglu(x, W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"], W[p + "ffn_down.weight"], lim_sh)
    E, k = keys["expert_count"], keys["expert_used_count"]
    G, tg = keys.get("expert_group_count", 1), keys.get("expert_group_used_count", 1)
    s = sigmoid(x @ W[p + "ffn_gate_inp.weight"].T)
    ch = s + W[p + "exp_probs_b.bias"]
    y = swiglu(x, W[p + "ffn_gate_shexp.weight"], W[p + "ffn_up_shexp.weight"], W[p + "ffn_down_shexp.weight"], lim_sh)
    for t in range(x.shape[0]):
        c = ch[t].copy()
        if G > 1:
            gs = np.array([np.sort(grp)[-2:].sum() for grp in c.reshape(G, -1)])
            keep = np.argsort(-gs, kind="stable")[:tg]
            mask = np.repeat(~np.isin(np.arange(G), keep), E // G)
            c[mask] = -np.inf
        sel = np.argsort(-c, kind="stable")[:k]
        w = s[t, sel]
        if keys.get("expert_weights_norm", True):
            w = w / (w.sum() + 1e-20)
        w = w * keys["expert_weights_scale"]
        for e, we in zip(sel, w):
            y[t] += we * swiglu(x[t:t + 1], W[p + "ffn_gate_exps.weight"][e], W[p + "ffn_up_exps.weight"][e],
                                W[p + "ffn_down_exps.weight"][e], lim_exp)[0]
    return y


def mhc_pre(W, i, blk, X, keys, eps, use_c):
    """(x_in [T, H], post [T, hc], comb [T, hc, hc]) of the streams X [T, hc, H]"""
    T, hc, H = X.shape
    fn, base, sc = (W[f"blk.{i}.hc_{blk}_{n}.weight"] for n in ("fn", "base", "scale"))
    iters, heps = keys["hyper_connection.sinkhorn_iterations"], keys["hyper_connection.epsilon"]
    if use_c:
        from toolkit.binding import ffi, lib
        f32 = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
        fp = lambda a: ffi.cast("float *", ffi.from_buffer(a))  # noqa: E731
        Xf, fnf, bf, sf = f32(X.reshape(T, hc * H)), f32(fn), f32(base), f32(sc)
        xin, post, comb = (np.zeros(s, np.float32) for s in ((T, H), (T, hc), (T, hc, hc)))
        assert lib.tk_mhc_pre_rows(fp(Xf), T, hc, H, fp(fnf), fp(bf), fp(sf), eps, heps, iters, fp(xin), fp(post),
                                   fp(comb)) == 0
        return xin.astype(np.float64), post.astype(np.float64), comb.astype(np.float64)
    f = rms(X.reshape(T, hc * H), None, eps)
    m = f @ fn.T
    pre = sigmoid(m[:, :hc] * sc[0] + base[:hc]) + heps
    post = 2 * sigmoid(m[:, hc:2 * hc] * sc[1] + base[hc:2 * hc])
    z = (m[:, 2 * hc:] * sc[2] + base[2 * hc:]).reshape(T, hc, hc)
    z = np.exp(z - z.max(-1, keepdims=True))
    cm = z / z.sum(-1, keepdims=True) + heps
    cm = cm / (cm.sum(-2, keepdims=True) + heps)
    for _ in range(iters - 1):
        cm = cm / (cm.sum(-1, keepdims=True) + heps)
        cm = cm / (cm.sum(-2, keepdims=True) + heps)
    return (pre[:, :, None] * X).sum(1), post, cm


def forward(path, tokens, use_c: bool = False, sel_break=None) -> np.ndarray:
    """logits [T, V] of the whole prompt; use_c: run the C mHC and DSA selection inside.
    sel_break(sel) -> sel: a deliberate break of the selection (tests)."""
    W, keys = load(path)
    arch = keys["arch"]
    eps = keys["attention.layer_norm_rms_epsilon"]
    L, K = keys["block_count"], keys["ssm.conv_kernel"]
    kv = keys["attention.head_count_kv"]
    x = W["token_embd.weight"][np.asarray(tokens)]
    glm = arch == "glm5-next"
    if glm:
        gate = ("bounded", keys["kda.gate_lower_bound"], -1) if "kda.gate_lower_bound" in keys else ("softplus", None, -1)
        lim_e, lim_s = keys["swiglu_clamp_exp"][0], keys["swiglu_clamp_shexp"][0]
        mla_eps, l2_eps = eps, 1e-6
        X = np.repeat(x[:, None, :], keys["hyper_connection.count"], 1)
    else:
        gate = ("bounded", keys["kda.gate_lower_bound"], 1) if keys.get("kda.safe_gate", True) else ("softplus", None, 1)
        lim_e = lim_s = 0
        mla_eps = keys.get("attention.mla_norm_epsilon", eps)
        l2_eps = keys.get("kda.l2_norm_epsilon", eps)
    sel = None
    for i in range(L):
        def mixer(h):
            nonlocal sel
            if kv[i] == 0:
                return kda(W, i, h, K, eps, gate, l2_eps)
            if not glm:
                return mla(W, i, h, keys, eps, mla_eps)[0]
            qr = rms(h @ W[f"blk.{i}.attn_q_a.weight"].T, W[f"blk.{i}.attn_q_a_norm.weight"], mla_eps)
            sel = dsa_select(W, i, h, qr, keys, use_c, sel)
            return mla(W, i, h, keys, eps, mla_eps, sel if sel_break is None else sel_break(sel))[0]
        if glm:
            for blk, norm, fn in (("attn", "attn_norm", mixer),
                                  ("ffn", "ffn_norm", lambda h: ffn(W, i, h, keys, lim_e, lim_s))):
                xin, post, comb = mhc_pre(W, i, blk, X, keys, eps, use_c)
                y = fn(rms(xin, W[f"blk.{i}.{norm}.weight"], eps))
                X = post[:, :, None] * y[:, None, :] + np.einsum("tij,tid->tjd", comb, X)
        else:
            x = x + mixer(rms(x, W[f"blk.{i}.attn_norm.weight"], eps))
            x = x + ffn(W, i, rms(x, W[f"blk.{i}.ffn_norm.weight"], eps), keys, 0, 0)
    if glm:
        x = X.mean(1)
    return rms(x, W["output_norm.weight"], eps) @ W["output.weight"].T
