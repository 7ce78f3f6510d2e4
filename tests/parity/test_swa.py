"""Sliding-window attention: the runtime against a float64 NumPy reference with a window.

No released family in tests/fixtures has sliding-window layers, so the test models are
lfm2-tiny's conversion with llama.cpp's ``attention.sliding_window`` and
``attention.sliding_window_pattern`` added (tests/swa_util.py).  The reference below is LFM2's
forward pass (HF Lfm2ForCausalLM: gated short conv, q/k-normed NEOX-RoPE attention, SwiGLU,
tied output after ``embedding_norm``) read from the HF checkpoint; a sliding layer's query i
sees the keys j with i - W < j <= i (W tokens including itself: HF
``create_sliding_window_causal_mask``; docs/specs/more-hybrids.md "Sliding window W").  Without a
window it equals HF's logits (reference.npz), which checks the reference itself.

Each model: relative L2 of all 64 positions' logits < 1e-5 in one shot and in ubatches of 1 and 7
tokens (the -b 7 context's sliding cache holds W + 7 cells: eviction runs), greedy continuation
identical to the reference's.
"""
from __future__ import annotations

import glob
import json
import pathlib

import numpy as np
import pytest

from parity_util import MODES, greedy_of, logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

HF = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "lfm2-tiny"
BOUND = 1e-5
# (window, sliding pattern): one sliding and one full layer; both attention layers sliding
CASES = [(5, (False, False, False, True)), (9, (False, True, False, True))]


def _load():
    from safetensors.numpy import load_file
    W = {}
    for f in glob.glob(str(HF / "*.safetensors")):
        W.update({k: v.astype(np.float64) for k, v in load_file(f).items()})
    return W, json.loads((HF / "config.json").read_text())


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def ref_logits(tokens, window: int = 0, sliding=()) -> np.ndarray:
    """float64 [T, V] logits of LFM2 with the layers in ``sliding`` limited to ``window``."""
    W, c = _load()
    eps, L, K = c["norm_eps"], c["num_hidden_layers"], c["conv_L_cache"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    D = c["hidden_size"] // nh
    theta = c["rope_parameters"]["rope_theta"]
    T = len(tokens)
    h = W["model.embed_tokens.weight"][np.asarray(tokens)]
    pos = np.arange(T, dtype=np.float64)
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(x):                       # NEOX (rotate_half) over the whole head
        x1, x2 = x[..., :D // 2], x[..., D // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    for li in range(L):
        p = f"model.layers.{li}."
        x = _rms(h, W[p + "operator_norm.weight"], eps)
        if c["layer_types"][li] == "conv":
            bcx = x @ W[p + "conv.in_proj.weight"].T
            B, C, u = np.split(bcx, 3, axis=1)                  # rows [0, H) B, [H, 2H) C, [2H, 3H) x
            bx = B * u
            w = W[p + "conv.conv.weight"][:, 0, :]             # [C, K], tap K-1 = current token
            xp = np.concatenate([np.zeros((K - 1, bx.shape[1])), bx], 0)
            conv = sum(xp[i:i + T] * w[:, i] for i in range(K))
            y = (C * conv) @ W[p + "conv.out_proj.weight"].T
        else:
            q = (x @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, D)
            k = (x @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, D)
            v = (x @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, D)
            q = rope(_rms(q, W[p + "self_attn.q_layernorm.weight"], eps))
            k = rope(_rms(k, W[p + "self_attn.k_layernorm.weight"], eps))
            i, j = np.arange(T)[:, None], np.arange(T)[None, :]
            ok = j <= i
            if li in sliding:
                ok &= j > i - window
            o = np.zeros((T, nh, D))
            for hh in range(nh):
                s = q[:, hh] @ k[:, hh // (nh // nkv)].T / np.sqrt(D)
                s = np.where(ok, s, -np.inf)
                e = np.exp(s - s.max(-1, keepdims=True))
                o[:, hh] = (e / e.sum(-1, keepdims=True)) @ v[:, hh // (nh // nkv)]
            y = o.reshape(T, nh * D) @ W[p + "self_attn.out_proj.weight"].T
        h = h + y
        x = _rms(h, W[p + "ffn_norm.weight"], eps)
        g, up = x @ W[p + "feed_forward.w1.weight"].T, x @ W[p + "feed_forward.w3.weight"].T
        h = h + (g / (1 + np.exp(-g)) * up) @ W[p + "feed_forward.w2.weight"].T
    h = _rms(h, W["model.embedding_norm.weight"], eps)
    return h @ W["model.embed_tokens.weight"].T


def ref_greedy(tokens, n: int, window: int, sliding) -> list[int]:
    toks, out = list(tokens), []
    for _ in range(n):
        out.append(int(np.argmax(ref_logits(toks, window, sliding)[-1])))
        toks.append(out[-1])
    return out


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "sliding-window parity")


@pytest.fixture(scope="module")
def ref():
    return np.load(HF / "reference.npz")


def test_reference_without_window_is_hf(ref):
    """The NumPy reference is LFM2: without a window it gives HF's logits."""
    assert rel_l2(ref_logits(ref["tokens"]), ref["logits"]) < 1e-6


@pytest.mark.parametrize("window,pattern", CASES)
def test_sliding_window_matches_reference(tmp_path_factory, ref, report, window, pattern):
    from swa_util import swa_lfm2
    path = swa_lfm2(tmp_path_factory.mktemp("swa"), window, pattern)
    sliding = tuple(i for i, s in enumerate(pattern) if s)
    want = ref_logits(ref["tokens"], window, sliding)
    assert rel_l2(want, ref["logits"]) > 1e-2          # the window changes the model's output
    errs = {mode: rel_l2(logits_of(path, ref["tokens"], **kw), want) for mode, kw in MODES}
    g = greedy_of(path, ref["tokens"], 8)
    same = g == ref_greedy(ref["tokens"], 8, window, sliding)
    report.append(f"W={window} sliding layers {sliding}: rel L2 " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items())
                  + f" (bound {BOUND:.0e}); greedy {'identical' if same else 'DIFFERS'}")
    for mode, e in errs.items():
        assert e < BOUND, f"W={window} {mode}: relative L2 error {e:.3e}"
    assert same
