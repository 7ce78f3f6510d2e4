"""The gated-delta-net families' forward (mixer_gdn.c, the gated attention of
mixer_attention.c, the Qwen MoE) against a float64 numpy reference written from docs/specs/gdn-family.md
(docs/specs/gdn-family.md §2), on llama.cpp's f32 files.

The reference reads the GGUF tensors as they are (no HF in the loop), so it also checks the
parts the HF parity cannot reach: the sigmoid output gate of the gated norm (gdn_gate_act = 1,
which no fixture uses yet) and both head orders (qwen3next grouped, qwen35 tiled).
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from toolkit.arch import HParams, LayerKind, arch_spec
from toolkit.gguf_io import GGUFFile

pytestmark = pytest.mark.native

LLAMACPP = pathlib.Path(__file__).parent.parent / "fixtures" / "llamacpp"
TOKENS = np.array([5, 300, 17, 42, 42, 99, 0, 511, 3, 250, 64, 7, 128, 1], np.int32)


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


class Ref:
    """float64 forward of one GGUF file (docs/specs/gdn-family.md §2.1-2.4)."""

    def __init__(self, path, act: int):
        self.f = GGUFFile(str(path))
        self.hp = HParams.from_gguf(self.f)
        self.spec = arch_spec(self.hp.arch)
        self.act = sigmoid if act else silu

    def W(self, name):
        return np.asarray(self.f.array(name), np.float64)

    def has(self, name):
        return name in self.f.tensors

    def gdn(self, il, x):
        hp, T, b = self.hp, len(x), f"blk.{il}."
        Hk, Hv, Dk, Dv, K = hp.n_group, hp.ssm_n_head, hp.d_state, hp.ssm_head_dim, hp.d_conv
        r = Hv // Hk
        m, z = x @ self.W(b + "attn_qkv.weight").T, x @ self.W(b + "attn_gate.weight").T
        if self.has(b + "ssm_ba.weight"):      # per K-head [b (r) | a (r)]
            ba = (x @ self.W(b + "ssm_ba.weight").T).reshape(T, Hk, 2 * r)
            bb, aa = ba[:, :, :r].reshape(T, Hv), ba[:, :, r:].reshape(T, Hv)
        else:
            bb, aa = x @ self.W(b + "ssm_beta.weight").T, x @ self.W(b + "ssm_alpha.weight").T
        w = self.W(b + "ssm_conv1d.weight")    # [C, K]
        mp = np.concatenate([np.zeros((K - 1, m.shape[1])), m])
        c = silu(sum(w[:, i] * mp[i:i + T] for i in range(K)))
        q = c[:, :Hk * Dk].reshape(T, Hk, Dk)
        k = c[:, Hk * Dk:2 * Hk * Dk].reshape(T, Hk, Dk)
        v = c[:, 2 * Hk * Dk:].reshape(T, Hv, Dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(Dk)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        beta = sigmoid(bb)
        sp = aa + self.W(b + "ssm_dt.bias")
        g = self.W(b + "ssm_a") * np.where(sp > 20, sp, np.log1p(np.exp(np.minimum(sp, 20))))
        kh = [h % Hk if self.spec.gdn_head_tiled else h // r for h in range(Hv)]
        S, o = np.zeros((Hv, Dk, Dv)), np.zeros((T, Hv, Dv))
        for t in range(T):
            for h in range(Hv):
                S[h] *= np.exp(g[t, h])
                u = beta[t, h] * (v[t, h] - S[h].T @ k[t, kh[h]])
                S[h] += np.outer(k[t, kh[h]], u)
                o[t, h] = S[h].T @ q[t, kh[h]]
        y = rms(o, self.W(b + "ssm_norm.weight"), hp.rms_eps) * self.act(z.reshape(T, Hv, Dv))
        return y.reshape(T, Hv * Dv) @ self.W(b + "ssm_out.weight").T

    def rope(self, x, pos):
        n_rot, half = self.hp.n_rot, self.hp.n_rot // 2
        ang = pos[:, None] * self.hp.rope_freq_base ** (-2.0 * np.arange(half) / n_rot)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x = x.copy()
        x1, x2 = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half], x[..., half:n_rot] = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        return x

    def attention(self, il, x):
        hp, T, b = self.hp, len(x), f"blk.{il}."
        nh, hd, nkv = hp.n_head, hp.head_dim, hp.n_head_kv[il]
        qg = (x @ self.W(b + "attn_q.weight").T).reshape(T, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        k = (x @ self.W(b + "attn_k.weight").T).reshape(T, nkv, hd)
        v = (x @ self.W(b + "attn_v.weight").T).reshape(T, nkv, hd)
        q, k = rms(q, self.W(b + "attn_q_norm.weight"), hp.rms_eps), rms(k, self.W(b + "attn_k_norm.weight"), hp.rms_eps)
        pos = np.arange(T, dtype=np.float64)
        q, k = self.rope(q, pos), self.rope(k, pos)
        o = np.zeros((T, nh, hd))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for h in range(nh):
            j = h // (nh // nkv)
            s = q[:, h] @ k[:, j].T / np.sqrt(hd) + mask
            p = np.exp(s - s.max(-1, keepdims=True))
            o[:, h] = (p / p.sum(-1, keepdims=True)) @ v[:, j]
        return (o * sigmoid(gate)).reshape(T, nh * hd) @ self.W(b + "attn_output.weight").T

    def ffn(self, il, x):
        b = f"blk.{il}."
        if not self.has(b + "ffn_gate_inp.weight"):
            return (silu(x @ self.W(b + "ffn_gate.weight").T) * (x @ self.W(b + "ffn_up.weight").T)) @ self.W(b + "ffn_down.weight").T
        lg = x @ self.W(b + "ffn_gate_inp.weight").T
        p = np.exp(lg - lg.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        ge, ue, de = self.W(b + "ffn_gate_exps.weight"), self.W(b + "ffn_up_exps.weight"), self.W(b + "ffn_down_exps.weight")
        out = np.zeros_like(x)
        for t in range(len(x)):
            sel = np.argsort(-p[t], kind="stable")[:self.hp.n_expert_used]
            for e in sel:
                out[t] += p[t, e] / p[t, sel].sum() * (de[e] @ (silu(ge[e] @ x[t]) * (ue[e] @ x[t])))
        sh = (silu(x @ self.W(b + "ffn_gate_shexp.weight").T) * (x @ self.W(b + "ffn_up_shexp.weight").T)) @ self.W(b + "ffn_down_shexp.weight").T
        return out + sigmoid(x @ self.W(b + "ffn_gate_inp_shexp.weight").reshape(-1))[:, None] * sh

    def logits(self, tokens):
        hp = self.hp
        x = self.W("token_embd.weight")[tokens]
        for il in range(hp.n_layer):
            h = rms(x, self.W(f"blk.{il}.attn_norm.weight"), hp.rms_eps)
            x = x + (self.gdn(il, h) if hp.layer_kinds[il] == LayerKind.GDN else self.attention(il, h))
            x = x + self.ffn(il, rms(x, self.W(f"blk.{il}.post_attention_norm.weight"), hp.rms_eps))
        out = self.W("output.weight") if self.has("output.weight") else self.W("token_embd.weight")
        return rms(x, self.W("output_norm.weight"), hp.rms_eps) @ out.T


@pytest.mark.parametrize("act", [0, 1], ids=["silu", "sigmoid"])
@pytest.mark.parametrize("name", ["qwen3next-tiny", "qwen35-tiny", "qwen35moe-tiny"])
def test_runtime_matches_float64_reference(monkeypatch, name, act):
    from toolkit.runtime import Context, Model
    orig = HParams.from_gguf.__func__

    def with_act(cls, f):
        hp = orig(cls, f)
        hp.gdn_gate_act = act
        return hp
    monkeypatch.setattr(HParams, "from_gguf", classmethod(with_act))
    path = LLAMACPP / f"{name}.f32.gguf"
    want = Ref(path, act).logits(TOKENS)
    with Model(path) as m, Context(m, n_ctx=32) as ctx:
        assert m.hparams.gdn_gate_act == act
        got = ctx.decode(TOKENS, logits="all")
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    print(f"{name} act={act}: rel L2 {err:.2e}")
    assert err < 1e-5, f"{name} act={act}: rel L2 {err:.2e}"
