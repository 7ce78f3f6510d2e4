"""Float64 NumPy forward passes of the Mamba kinds (MambaForCausalLM, FalconMambaForCausalLM,
Mamba2ForCausalLM, BambaForCausalLM, GraniteMoeHybridForCausalLM, NemotronHForCausalLM without
MoE), written from transformers 5.24's modeling_mamba.py, modeling_falcon_mamba.py,
modeling_mamba2.py, modeling_bamba.py, modeling_granitemoehybrid.py and modeling_nemotron_h.py
and run on the HF safetensors directly.

They stand in for HF where no torch is at hand: each is checked against its family fixture's HF
reference.npz (tests/parity/test_runtime_granite_multipliers.py, tests/parity/test_config_variants.py),
then run on config variants (tools/make_config_variant_fixtures.py) that set the flags the
fixtures leave at their defaults: attention_bias (q/k/v/o_proj biases), mlp_bias (Bamba's
gate/up/down_proj biases), mamba_proj_bias / use_bias (in_proj / out_proj biases),
mamba_conv_bias / use_conv_bias false (no conv1d bias), tie_word_embeddings.

Glossary: T tokens, D hidden, DI mamba inner width, H heads, P head dim, N d_state,
G groups, E experts, F expert width, R dt rank, K conv width.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
from safetensors.numpy import load_file


def weights(hf_dir) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint's safetensors files, as float64."""
    w: dict[str, np.ndarray] = {}
    for p in sorted(pathlib.Path(hf_dir).glob("*.safetensors")):
        w.update({k: v.astype(np.float64) for k, v in load_file(str(p)).items()})
    return w


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _lin(w, name, x):
    """nn.Linear: x W^T (+ b where the checkpoint has ``name``.bias)."""
    y = x @ w[name + ".weight"].T
    b = w.get(name + ".bias")
    return y if b is None else y + b


def _causal_conv(w, p, x):
    """Depthwise causal conv1d (HF conv1d.weight [C, 1, K]) plus its bias where the checkpoint
    has one (use_conv_bias / mamba_conv_bias). x: [T, C]."""
    cw = w[p + "conv1d.weight"][:, 0, :]                                  # [C, K]
    K, T = cw.shape[1], x.shape[0]
    pad = np.concatenate([np.zeros((K - 1, x.shape[1])), x])
    return np.stack([(pad[t:t + K].T * cw).sum(1) for t in range(T)]) + w.get(p + "conv1d.bias", 0.0)


def mamba1_mixer(w, p, x, N, R, mixer_eps=None):
    """MambaMixer.slow_forward; FalconMambaMixer (``mixer_eps``: weightless RMSNorms on dt, B, C
    before dt_proj); JambaMambaMixer (dt/b/c_layernorm weights in the checkpoint, ``mixer_eps``
    their epsilon).  in_proj / out_proj biases where the checkpoint has them (use_bias,
    mamba_proj_bias). x: [T, D]."""
    T = x.shape[0]
    xz = _lin(w, p + "in_proj", x)
    DI = xz.shape[1] // 2
    xs, z = silu(_causal_conv(w, p, xz[:, :DI])), xz[:, DI:]
    dbc = xs @ w[p + "x_proj.weight"].T
    dt, B, C = dbc[:, :R], dbc[:, R:R + N], dbc[:, R + N:]
    if mixer_eps is not None:
        nw = [w.get(p + n + "_layernorm.weight", 1.0) for n in ("dt", "b", "c")]
        dt, B, C = rms(dt, nw[0], mixer_eps), rms(B, nw[1], mixer_eps), rms(C, nw[2], mixer_eps)
    dt = softplus(_lin(w, p + "dt_proj", dt))                                # [T, DI]
    A = -np.exp(w[p + "A_log"])                                             # [DI, N]
    s = np.zeros((DI, N))
    y = np.empty((T, DI))
    for t in range(T):
        s = np.exp(dt[t][:, None] * A) * s + (dt[t] * xs[t])[:, None] * B[t][None, :]
        y[t] = s @ C[t] + w[p + "D"] * xs[t]
    return _lin(w, p + "out_proj", y * silu(z))


def mamba1_logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of a MambaForCausalLM or FalconMambaForCausalLM checkpoint."""
    cfg = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())
    w = weights(hf_dir) if w is None else w
    eps, N = cfg["layer_norm_epsilon"], cfg["state_size"]
    R = cfg["time_step_rank"]
    R = -(-cfg["hidden_size"] // 16) if R == "auto" else R
    mixer_eps = cfg.get("mixer_rms_eps", 1e-6) if cfg["architectures"][0] == "FalconMambaForCausalLM" else None
    x = w["backbone.embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        x = x + mamba1_mixer(w, p + "mixer.", rms(x, w[p + "norm.weight"], eps), N, R, mixer_eps)
    x = rms(x, w["backbone.norm_f.weight"], eps)
    return _head(w, x, "backbone.embeddings.weight", cfg, True)


def mamba2_mixer(w, p, x, H, P, N, G, eps):
    """Mamba2Mixer / BambaMixer (== GraniteMoeHybridMambaLayer), recurrent form. x: [T, D].
    in_proj / out_proj biases (use_bias, mamba_proj_bias) and the conv bias (use_conv_bias,
    mamba_conv_bias) where the checkpoint has them."""
    T = x.shape[0]
    DI = H * P
    zxbcdt = _lin(w, p + "in_proj", x)
    z, xbc, dt = zxbcdt[:, :DI], zxbcdt[:, DI:DI + DI + 2 * G * N], zxbcdt[:, -H:]
    xbc = silu(_causal_conv(w, p, xbc))
    xs, B, C = xbc[:, :DI].reshape(T, H, P), xbc[:, DI:DI + G * N].reshape(T, G, N), xbc[:, DI + G * N:].reshape(T, G, N)
    dt = softplus(dt + w[p + "dt_bias"])
    A = -np.exp(w[p + "A_log"])
    g = np.arange(H) // (H // G)
    s = np.zeros((H, P, N))
    y = np.empty((T, H, P))
    for t in range(T):
        s = np.exp(dt[t] * A)[:, None, None] * s + (dt[t][:, None] * xs[t])[:, :, None] * B[t][g][:, None, :]
        y[t] = np.einsum("hpn,hn->hp", s, C[t][g]) + w[p + "D"][:, None] * xs[t]
    y = y.reshape(T, DI) * silu(z)
    y = rms(y.reshape(T, G, DI // G), 1.0, eps).reshape(T, DI) * w[p + "norm.weight"]
    return _lin(w, p + "out_proj", y)


def attention(w, p, x, cfg, bamba: bool):
    """BambaAttention (RoPE on the first head_dim * partial_rotary_factor dims, scale hd^-1/2) or
    GraniteMoeHybridAttention (RoPE over the whole head when position_embedding_type is "rope",
    scale attention_multiplier); q/k/v/o_proj biases where the checkpoint has them (attention_bias)."""
    T = x.shape[0]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // H
    q = _lin(w, p + "q_proj", x).reshape(T, H, hd)
    k = _lin(w, p + "k_proj", x).reshape(T, Hkv, hd)
    v = _lin(w, p + "v_proj", x).reshape(T, Hkv, hd)
    rp = cfg.get("rope_parameters") or {}
    if bamba or cfg.get("position_embedding_type") == "rope":        # rotate_half within the first rot dims
        rot = int(hd * rp.get("partial_rotary_factor", 1.0))
        inv = 1.0 / rp.get("rope_theta", 10000.0) ** (np.arange(0, rot, 2) / rot)
        ang = np.arange(T)[:, None] * inv[None, :]
        cos, sin = np.cos(np.concatenate([ang, ang], 1))[:, None], np.sin(np.concatenate([ang, ang], 1))[:, None]

        def rotate(a):
            r, rest = a[..., :rot], a[..., rot:]
            r = r * cos + np.concatenate([-r[..., rot // 2:], r[..., :rot // 2]], -1) * sin
            return np.concatenate([r, rest], -1)
        q, k = rotate(q), rotate(k)
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    scale = hd ** -0.5 if bamba else cfg["attention_multiplier"]
    s = np.einsum("thd,shd->hts", q, k) * scale
    s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    return _lin(w, p + "o_proj", np.einsum("hts,shd->thd", pr, v).reshape(T, H * hd))


def swiglu(w, p, x):
    """BambaMLP: down(silu(gate(x)) * up(x)), each with its bias where the checkpoint has one (mlp_bias)."""
    return _lin(w, p + "down_proj", silu(_lin(w, p + "gate_proj", x)) * _lin(w, p + "up_proj", x))


def granite_ffn(w, p, x, cfg):
    """block_sparse_moe (top-k of router logits, softmax over the k), when num_local_experts > 0,
    plus shared_mlp (input_linear = gate | up, no biases)."""
    out = np.zeros_like(x)
    if cfg.get("num_local_experts", 0):
        k = cfg["num_experts_per_tok"]
        logits = x @ w[p + "block_sparse_moe.router.layer.weight"].T         # [T, E]
        wi, wo = w[p + "block_sparse_moe.input_linear.weight"], w[p + "block_sparse_moe.output_linear.weight"]
        for t in range(x.shape[0]):
            top = np.argsort(-logits[t], kind="stable")[:k]
            g = np.exp(logits[t][top] - logits[t][top].max())
            g /= g.sum()
            for e, ge in zip(top, g):
                h = wi[e] @ x[t]
                F = h.shape[0] // 2
                out[t] += ge * (wo[e] @ (silu(h[:F]) * h[F:]))
    h = x @ w[p + "shared_mlp.input_linear.weight"].T
    F = h.shape[1] // 2
    return out + (silu(h[:, :F]) * h[:, F:]) @ w[p + "shared_mlp.output_linear.weight"].T


def _head(w, x, embd, cfg, tie_default):
    tie = cfg.get("tie_word_embeddings", tie_default)
    return x @ (w[embd] if tie else w["lm_head.weight"]).T


def hybrid_logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of a BambaForCausalLM or GraniteMoeHybridForCausalLM checkpoint."""
    cfg = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())
    w = weights(hf_dir) if w is None else w
    bamba = cfg["architectures"][0] == "BambaForCausalLM"
    eps = cfg["rms_norm_eps"]
    rm = 1.0 if bamba else cfg["residual_multiplier"]
    if "layer_types" in cfg:
        attn = [t in ("full_attention", "attention") for t in cfg["layer_types"]]
    else:
        attn = [i in cfg["attn_layer_indices"] for i in range(cfg["num_hidden_layers"])]
    x = w["model.embed_tokens.weight"][tokens] * (1.0 if bamba else cfg["embedding_multiplier"])
    H, N, G = cfg["mamba_n_heads"], cfg["mamba_d_state"], cfg["mamba_n_groups"]
    P = cfg.get("mamba_d_head") or cfg["mamba_expand"] * cfg["hidden_size"] // H
    for i, a in enumerate(attn):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        h = attention(w, p + "self_attn.", h, cfg, bamba) if a else mamba2_mixer(w, p + "mamba.", h, H, P, N, G, eps)
        x = x + h * rm
        h = rms(x, w[p + ("pre_ff_layernorm" if bamba else "post_attention_layernorm") + ".weight"], eps)
        x = x + (swiglu(w, p + "feed_forward.", h) if bamba else granite_ffn(w, p, h, cfg)) * rm
    x = rms(x, w["model.final_layernorm.weight" if bamba else "model.norm.weight"], eps)
    return _head(w, x, "model.embed_tokens.weight", cfg, False) / (1.0 if bamba else cfg["logits_scaling"])


def mamba2_logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of a Mamba2ForCausalLM checkpoint (time_step_limit (0, inf))."""
    cfg = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())
    w = weights(hf_dir) if w is None else w
    eps = cfg["layer_norm_epsilon"]
    H, P, N, G = cfg["num_heads"], cfg["head_dim"], cfg["state_size"], cfg["n_groups"]
    x = w["backbone.embeddings.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        x = x + mamba2_mixer(w, p + "mixer.", rms(x, w[p + "norm.weight"], eps), H, P, N, G, eps)
    x = rms(x, w["backbone.norm_f.weight"], eps)
    return _head(w, x, "backbone.embeddings.weight", cfg, True)


def _nope_attention(w, p, x, Hq, Hkv, hd):
    """Causal GQA attention without RoPE, scale hd^-1/2, no biases (Jamba, Nemotron-H). x: [T, D]."""
    T = x.shape[0]
    q = (x @ w[p + "q_proj.weight"].T).reshape(T, Hq, hd)
    k = np.repeat((x @ w[p + "k_proj.weight"].T).reshape(T, Hkv, hd), Hq // Hkv, axis=1)
    v = np.repeat((x @ w[p + "v_proj.weight"].T).reshape(T, Hkv, hd), Hq // Hkv, axis=1)
    s = np.where(np.tril(np.ones((T, T), bool))[None], np.einsum("thd,shd->hts", q, k) * hd ** -0.5, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", pr, v).reshape(T, Hq * hd) @ w[p + "o_proj.weight"].T


def jamba_logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of a JambaForCausalLM checkpoint: attention (no RoPE, scale hd^-1/2) at
    i % attn_layer_period == attn_layer_offset, else the Mamba-1 mixer with weighted dt/B/C norms;
    MoE (softmax over all experts, top-k, not renormalised) at i % expert_layer_period ==
    expert_layer_offset, else the SwiGLU MLP."""
    cfg = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())
    w = weights(hf_dir) if w is None else w
    eps, D = cfg["rms_norm_eps"], cfg["hidden_size"]
    R = cfg["mamba_dt_rank"]
    R = -(-D // 16) if R == "auto" else R
    Hq, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = D // Hq
    x = w["model.embed_tokens.weight"][tokens]
    T = x.shape[0]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]:
            h = _nope_attention(w, p + "self_attn.", h, Hq, Hkv, hd)
        else:
            h = mamba1_mixer(w, p + "mamba.", h, cfg["mamba_d_state"], R, eps)
        x = x + h
        h = rms(x, w[p + "pre_ff_layernorm.weight"], eps)
        f = p + "feed_forward."
        if i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]:
            lg = h @ w[f + "router.weight"].T
            pr = np.exp(lg - lg.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            y = np.zeros_like(h)
            for t in range(T):
                for e in np.argsort(-pr[t], kind="stable")[:cfg["num_experts_per_tok"]]:
                    y[t] += pr[t, e] * swiglu(w, f + f"experts.{e}.", h[t:t + 1])[0]
        else:
            y = swiglu(w, f, h)
        x = x + y
    x = rms(x, w["model.final_layernorm.weight"], eps)
    return _head(w, x, "model.embed_tokens.weight", cfg, False)


def nemotronh_logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of a NemotronHForCausalLM checkpoint without MoE layers: per layer
    x + mixer(RMSNorm(x)), the mixer a Mamba-2 one (use_bias, use_conv_bias), attention without
    RoPE (scale head_dim^-1/2) or the ReLU² MLP (up / down_proj, biases with mlp_bias)."""
    cfg = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())
    w = weights(hf_dir) if w is None else w
    eps = cfg["layer_norm_epsilon"]
    H, P, N, G = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"], cfg["n_groups"]
    Hq, Hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    x = w["backbone.embeddings.weight"][tokens]
    for i, kind in enumerate(cfg["layers_block_type"]):
        p = f"backbone.layers.{i}.mixer."
        h = rms(x, w[f"backbone.layers.{i}.norm.weight"], eps)
        if kind == "linear_attention":
            h = mamba2_mixer(w, p, h, H, P, N, G, eps)
        elif kind == "full_attention":
            h = _nope_attention(w, p, h, Hq, Hkv, hd)
        elif kind == "mlp":
            h = _lin(w, p + "down_proj", np.maximum(_lin(w, p + "up_proj", h), 0.0) ** 2)
        else:
            raise NotImplementedError(f"layer type {kind!r}")
        x = x + h
    x = rms(x, w["backbone.norm_f.weight"], eps)
    return x @ w["lm_head.weight" if "lm_head.weight" in w else "backbone.embeddings.weight"].T


def logits(hf_dir, tokens, w=None) -> np.ndarray:
    """Logits [T, V] of any checkpoint above, or of a Lara-Mini one (tests/lara_ref.py), picked by
    config.json's architectures."""
    arch = json.loads((pathlib.Path(hf_dir) / "config.json").read_text())["architectures"][0]
    if arch == "LaraMiniForCausalLM":
        import lara_ref
        return lara_ref.logits(hf_dir, tokens, w)
    fn = {"Mamba2ForCausalLM": mamba2_logits, "MambaForCausalLM": mamba1_logits,
          "FalconMambaForCausalLM": mamba1_logits, "NemotronHForCausalLM": nemotronh_logits,
          "JambaForCausalLM": jamba_logits}.get(arch, hybrid_logits)
    return fn(hf_dir, tokens, w)


def greedy(hf_dir, tokens, n: int, suppress: tuple[int, ...] = ()) -> list[int]:
    """``n`` greedy tokens after ``tokens`` (cache-free: the whole sequence each step), the ids
    ``suppress`` never chosen (as HF ``generate`` with ``min_new_tokens`` suppresses end-of-text)."""
    w = weights(hf_dir)
    seq = list(int(t) for t in tokens)
    out = []
    for _ in range(n):
        last = logits(hf_dir, np.array(seq), w)[-1].copy()
        last[list(suppress)] = -np.inf
        out.append(int(np.argmax(last)))
        seq.append(out[-1])
    return out
