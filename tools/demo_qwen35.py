"""A Qwen3.5-style hybrid (``Qwen3_5ForCausalLM``) in plain torch, with its MTP (NextN) block,
for ``tools/train_demo_model.py --arch qwen35``.  No transformers: the math follows
docs/specs/gdn-family.md §2.1-2.3 (HF ``modeling_qwen3_5.py``) and the MTP block as
tests/unit/test_mtp_reference.py writes it (vLLM ``qwen3_next_mtp.py``), and the parameter
names are HF's, so ``toolkit convert`` reads the saved checkpoint as it reads Qwen's.

Layers: gated delta net (``linear_attn``) everywhere except every 4th layer, which is gated
full attention (``self_attn``); dense SwiGLU MLPs; RMSNorms Gemma-style (``x / rms * (1 + w)``)
except the GDN output norm (``x / rms * w``).  Hk == Hv, so the converter's V-head reorder is
the identity.

The MTP block at position i reads the main model's normed final hidden state h_i and the
embedding of token i + 1 and predicts token i + 2 through the shared ``lm_head``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def qwen35_config(vocab: int, eot: int, pad: int, *, hidden: int = 512, layers: int = 4, ffn: int = 1024,
                  heads: int = 4, kv_heads: int = 1, head_dim: int = 128, lin_heads: int = 4,
                  lin_dim: int = 128) -> dict:
    """The HF ``config.json`` dict of the demo model (Qwen3.5 text keys)."""
    n_rot = int(head_dim * 0.25)
    sec = [n_rot // 2 - 2 * (n_rot // 6), n_rot // 6, n_rot // 6]
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": eot, "eos_token_id": eot,
        "pad_token_id": pad, "dtype": "float32", "head_dim": head_dim, "hidden_act": "silu",
        "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": ffn,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": lin_dim, "linear_num_key_heads": lin_heads,
        "linear_num_value_heads": lin_heads, "linear_value_head_dim": lin_dim,
        "max_position_embeddings": 32768, "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-6,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": sec, "partial_rotary_factor": 0.25,
                            "rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": vocab,
        "mtp_num_hidden_layers": 1,
    }


class GemmaNorm(nn.Module):
    """RMSNorm x / rms(x) * (1 + w), w initialised to 0."""

    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def _l2(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gdr_recurrent(q, k, v, g, beta):
    """The gated delta rule token by token (the definition, for checks): q, k [B, H, T, Dk]
    (normed, q scaled), v [B, H, T, Dv], g (log decay <= 0) and beta [B, H, T] -> o [B, H, T, Dv]."""
    B, H, T, Dk = k.shape
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=v.dtype)
    out = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        u = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, :, t]))
        S = S + k[:, :, t, :, None] * u[:, :, None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(out, 2)


def gdr_chunked(q, k, v, g, beta, C: int = 64):
    """The same recurrence in chunks of C tokens (WY form, docs/specs/gdn-family.md §2.1)."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (-T) % C
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // C
    q, k, v = (t.reshape(B, H, n, C, -1) for t in (q, k, v))
    g, beta = g.reshape(B, H, n, C), beta.reshape(B, H, n, C)
    gc = g.cumsum(-1)
    upper = torch.triu(torch.ones(C, C, dtype=torch.bool), 1)
    decay = (gc[..., :, None] - gc[..., None, :]).masked_fill(upper, -math.inf).exp()
    kb = k * beta[..., None]
    A = (kb @ k.transpose(-1, -2) * decay).masked_fill(~torch.tril(torch.ones(C, C, dtype=torch.bool), -1), 0)
    eye = torch.eye(C, dtype=q.dtype).expand_as(A)
    Tm = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)
    U = Tm @ (v * beta[..., None])
    W = Tm @ (kb * gc.exp()[..., None])
    S = torch.zeros(B, H, Dk, Dv, dtype=v.dtype)
    outs = []
    for i in range(n):
        qi, ki, gi = q[:, :, i], k[:, :, i], gc[:, :, i]
        att = (qi @ ki.transpose(-1, -2) * decay[:, :, i]).masked_fill(upper, 0)
        vn = U[:, :, i] - W[:, :, i] @ S
        outs.append((qi * gi.exp()[..., None]) @ S + att @ vn)
        S = S * gi[..., -1, None, None].exp() + (ki * (gi[..., -1:] - gi).exp()[..., None]).transpose(-1, -2) @ vn
    return torch.stack(outs, 2).reshape(B, H, n * C, Dv)[:, :, :T]


class LinearAttn(nn.Module):
    """Qwen3.5's gated DeltaNet mixer (HF ``Qwen3_5GatedDeltaNet``), Hk == Hv."""

    def __init__(self, cfg: dict):
        super().__init__()
        D, H, Dk, Dv, K = (cfg["hidden_size"], cfg["linear_num_value_heads"], cfg["linear_key_head_dim"],
                           cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"])
        self.H, self.Dk, self.Dv = H, Dk, Dv
        C = 2 * H * Dk + H * Dv
        self.in_proj_qkv = nn.Linear(D, C, bias=False)
        self.in_proj_z = nn.Linear(D, H * Dv, bias=False)
        self.in_proj_b = nn.Linear(D, H, bias=False)
        self.in_proj_a = nn.Linear(D, H, bias=False)
        self.conv1d = nn.Conv1d(C, C, K, groups=C, bias=False, padding=K - 1)
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, H)))
        dt = torch.exp(torch.linspace(math.log(1e-3), math.log(1e-1), H))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.norm_weight = nn.Parameter(torch.ones(Dv))
        self.out_proj = nn.Linear(H * Dv, D, bias=False)
        self.eps = cfg["rms_norm_eps"]

    def forward(self, x):
        B, T, _ = x.shape
        H, Dk, Dv = self.H, self.Dk, self.Dv
        m = F.silu(self.conv1d(self.in_proj_qkv(x).transpose(1, 2))[..., :T]).transpose(1, 2)
        q, k, v = m.split([H * Dk, H * Dk, H * Dv], -1)
        q = _l2(q.reshape(B, T, H, Dk)).transpose(1, 2) * Dk ** -0.5
        k = _l2(k.reshape(B, T, H, Dk)).transpose(1, 2)
        v = v.reshape(B, T, H, Dv).transpose(1, 2)
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)
        g = (-self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)).transpose(1, 2)
        o = gdr_chunked(q, k, v, g, beta).transpose(1, 2)                      # [B, T, H, Dv]
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight
        o = o * F.silu(self.in_proj_z(x).reshape(B, T, H, Dv))
        return self.out_proj(o.reshape(B, T, H * Dv))


def _rope(x, n_rot: int, theta: float):
    """NEOX partial RoPE on the first n_rot dims of x [B, H, T, hd], positions 0..T-1."""
    T, half = x.shape[2], n_rot // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float32) * 2 / n_rot)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    c, s = ang.cos(), ang.sin()
    a, b, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([a * c - b * s, b * c + a * s, rest], -1)


class SelfAttn(nn.Module):
    """Qwen3.5's gated full attention: q_proj per head [q | gate], q/k norms, partial RoPE, GQA."""

    def __init__(self, cfg: dict):
        super().__init__()
        D, self.nh, self.nkv, self.hd = (cfg["hidden_size"], cfg["num_attention_heads"],
                                         cfg["num_key_value_heads"], cfg["head_dim"])
        self.q_proj = nn.Linear(D, 2 * self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(D, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(D, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, D, bias=False)
        self.q_norm = GemmaNorm(self.hd, cfg["rms_norm_eps"])
        self.k_norm = GemmaNorm(self.hd, cfg["rms_norm_eps"])
        rp = cfg["rope_parameters"]
        self.n_rot, self.theta = int(self.hd * rp["partial_rotary_factor"]), rp["rope_theta"]

    def forward(self, x):
        B, T, _ = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        q, gate = self.q_proj(x).reshape(B, T, nh, 2 * hd).split([hd, hd], -1)
        q = _rope(self.q_norm(q).transpose(1, 2), self.n_rot, self.theta)
        k = _rope(self.k_norm(self.k_proj(x).reshape(B, T, nkv, hd)).transpose(1, 2), self.n_rot, self.theta)
        v = self.v_proj(x).reshape(B, T, nkv, hd).transpose(1, 2)
        k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        return self.o_proj((o * torch.sigmoid(gate)).reshape(B, T, nh * hd))


class Mlp(nn.Module):
    def __init__(self, D: int, Fd: int):
        super().__init__()
        self.gate_proj = nn.Linear(D, Fd, bias=False)
        self.up_proj = nn.Linear(D, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: dict, kind: str):
        super().__init__()
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = GemmaNorm(D, eps)
        self.post_attention_layernorm = GemmaNorm(D, eps)
        self.kind = kind
        if kind == "linear_attention":
            self.linear_attn = LinearAttn(cfg)
        else:
            self.self_attn = SelfAttn(cfg)
        self.mlp = Mlp(D, cfg["intermediate_size"])

    def forward(self, x):
        mix = self.linear_attn if self.kind == "linear_attention" else self.self_attn
        x = x + mix(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen35Mtp(nn.Module):
    """Main model + one MTP block.  forward(ids [B, T]) -> (logits [B, T, V], mtp logits
    [B, T-1, V]: row i predicts token i + 2)."""

    def __init__(self, cfg: dict):
        super().__init__()
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], D)
        self.layers = nn.ModuleList(Layer(cfg, t) for t in cfg["layer_types"])
        self.norm = GemmaNorm(D, eps)
        self.lm_head = nn.Linear(D, cfg["vocab_size"], bias=False)
        self.mtp_fc = nn.Linear(2 * D, D, bias=False)
        self.mtp_pre_fc_norm_embedding = GemmaNorm(D, eps)
        self.mtp_pre_fc_norm_hidden = GemmaNorm(D, eps)
        self.mtp_layer = Layer(cfg, "full_attention")
        self.mtp_norm = GemmaNorm(D, eps)
        std = cfg["initializer_range"]
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, std)
        n_res = 2 * (len(self.layers) + 1)
        for name, p in self.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, 0.0, std / math.sqrt(n_res))
        for layer in self.layers:
            if layer.kind == "linear_attention":
                nn.init.kaiming_uniform_(layer.linear_attn.conv1d.weight, a=math.sqrt(5))

    def main_hidden(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)

    def forward(self, ids, mtp: bool = True):
        h = self.main_hidden(ids)
        logits = self.lm_head(h)
        if not mtp:
            return logits, None
        e = self.mtp_pre_fc_norm_embedding(self.embed_tokens(ids[:, 1:]))
        x = self.mtp_fc(torch.cat([e, self.mtp_pre_fc_norm_hidden(h[:, :-1])], -1))
        return logits, self.lm_head(self.mtp_norm(self.mtp_layer(x)))

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The parameters under HF's Qwen3.5 names (model.*, lm_head, mtp.*), float32."""
        out = {}
        for name, p in self.named_parameters():
            t = p.detach().float().contiguous()
            if name.startswith("mtp_layer."):
                n = "mtp.layers.0." + name[len("mtp_layer."):]
            elif name.startswith("mtp_"):
                n = "mtp." + name[4:]
            elif name.startswith("lm_head."):
                n = name
            else:
                n = "model." + name
            out[n.replace("linear_attn.norm_weight", "linear_attn.norm.weight")] = t
        return out
