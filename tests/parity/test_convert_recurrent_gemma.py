"""RecurrentGemma (RecurrentGemmaForCausalLM -> recurrent-gemma): the converter.

Checked, against the checkpoint and docs/specs/more-hybrids.md §6.3 (the runtime's parity with HF is
test_recurrent_gemma.py): every tensor's values (norms with 1 + w folded, the conv squeezed,
the RG-LRU gate matrices as stored), the keys (block_types cycled, MLP width F / 2, partial
RoPE dims, window, soft cap, rglru.width, embedding_scale = bf16(sqrt H)), bad input refused
with nothing at OUT, and that the file alone suffices: a float64 NumPy forward reading only the
GGUF (the contract the runtime's RG-LRU kind implements) gives HF's logits within 1e-5 relative
L2 (4.9e-7; seen failing at 0.21 / 0.77 / 0.18 with the whole head rotated, the +1 not folded,
the window not written).

recurrentgemma-tiny is the reference set's (transformers 5.24): 4 layers recurrent, recurrent,
attention, recurrent; H 64, 4 heads / 1 KV head of 16, lru 64, K 4, window 16, tied embeddings.
"""
from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file

from toolkit.convert import convert
from toolkit.convert.families import REGISTRY
from toolkit.convert.families.recurrent_gemma import RecurrentGemmaFamily, embedding_normalizer
from toolkit.errors import InputError, UnsupportedError
from toolkit.gguf_io import GGUFFile

FIXTURE = pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / "recurrentgemma-tiny"
ARCH = "recurrent-gemma"


def _source() -> dict[str, np.ndarray]:
    out = {}
    for p in sorted(FIXTURE.glob("*.safetensors")):
        out.update(load_file(str(p)))
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("rg") / "rg-f32.gguf"
    convert(str(FIXTURE), str(out), "f32")
    return GGUFFile(str(out))


def test_registered():
    assert REGISTRY["RecurrentGemmaForCausalLM"] is RecurrentGemmaFamily


def test_keys(converted):
    md = converted.metadata()
    k = lambda s: md[f"{ARCH}.{s}"]  # noqa: E731
    assert md["general.architecture"] == ARCH
    assert k("block_count") == 4 and k("embedding_length") == 64 and k("feed_forward_length") == 96
    assert k("attention.head_count") == 4 and k("attention.head_count_kv") == 1
    assert k("attention.key_length") == 16 and k("attention.value_length") == 16
    assert k("rope.dimension_count") == 8 and k("rope.freq_base") == 10000.0
    assert k("attention.sliding_window") == 16 and k("ssm.conv_kernel") == 4 and k("rglru.width") == 64
    assert list(k("attention.recurrent_layers")) == [True, True, False, True]     # block_types cycled
    assert k("final_logit_softcapping") == 30.0
    assert k("embedding_scale") == 8.0                                             # bf16(sqrt 64)
    assert abs(k("attention.layer_norm_rms_epsilon") - 1e-6) < 1e-12


def test_tensors_match_the_checkpoint(converted):
    src = _source()
    expect = {"token_embd.weight": src["model.embed_tokens.weight"],
              "output_norm.weight": 1 + src["model.final_norm.weight"]}
    for i in range(4):
        lp, b = f"model.layers.{i}.", f"blk.{i}."
        expect[b + "attn_norm.weight"] = 1 + src[lp + "temporal_pre_norm.weight"]
        expect[b + "ffn_norm.weight"] = 1 + src[lp + "channel_pre_norm.weight"]
        for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
            for s in ("weight", "bias"):
                expect[f"{b}{g}.{s}"] = src[f"{lp}mlp_block.{h}.{s}"]
        t = lp + "temporal_block."
        if i == 2:
            for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
                expect[f"{b}{g}.weight"] = src[f"{t}{h}.weight"]
            expect[b + "attn_output.bias"] = src[t + "o_proj.bias"]
            continue
        for g, h in (("rglru_x", "linear_x"), ("rglru_y", "linear_y"), ("ssm_out", "linear_out")):
            for s in ("weight", "bias"):
                expect[f"{b}{g}.{s}"] = src[f"{t}{h}.{s}"]
        expect[b + "ssm_conv1d.weight"] = src[t + "conv_1d.weight"][:, 0, :]
        expect[b + "ssm_conv1d.bias"] = src[t + "conv_1d.bias"]
        for g, h in (("rglru_gate_i", "input_gate"), ("rglru_gate_a", "recurrent_gate")):
            expect[f"{b}{g}.weight"] = src[f"{t}rg_lru.{h}_weight"]       # as stored: x_h . W[h]
            expect[f"{b}{g}.bias"] = src[f"{t}rg_lru.{h}_bias"]
        expect[b + "rglru_param.weight"] = src[t + "rg_lru.recurrent_param"]
    names = {t.name for t in converted}
    assert names == set(expect)
    for name, want in expect.items():
        got = converted.array(name)
        assert got.shape == want.shape, name
        assert np.array_equal(got, want.astype(np.float32)), name


@pytest.mark.parametrize("n_embd, want", [(64, 8.0), (96, 9.8125), (2560, 50.5), (2048, 45.25)])
def test_embedding_scale_is_sqrt_rounded_to_bfloat16(n_embd, want):
    # docs/specs/more-hybrids.md §6.4: HF's normalizer is a bfloat16 buffer (2560 -> 50.5, not 50.596)
    assert embedding_normalizer(n_embd) == want


def _broken(tmp_path, edit) -> pathlib.Path:
    d = tmp_path / "hf"
    shutil.copytree(FIXTURE, d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("edit, err, msg", [
    (lambda c: c.update(lru_width=96), InputError, r"linear_x.*\(lru_width\)"),
    (lambda c: c.update(block_types=["recurrent", "mamba"]), InputError, "block_types"),
    (lambda c: c.update(block_types=["attention"]), InputError, "missing tensor .*q_proj"),  # layout disagrees
    (lambda c: c.update(intermediate_size=191), InputError, "intermediate_size"),
    (lambda c: c.update(hidden_activation="mish"), UnsupportedError, "hidden_activation"),   # gelu etc.: recurrentgemma-act-tiny
    (lambda c: c.update(attention_window_size=0), InputError, "attention_window_size"),
    (lambda c: c.update(logits_soft_cap=-1.0), InputError, "logits_soft_cap"),
    (lambda c: c.update(attention_bias=True), InputError, "q_proj.bias"),
    (lambda c: c.update(num_attention_heads=3), InputError, "num_attention_heads"),
])
def test_bad_input_one_error_nothing_at_out(tmp_path, edit, err, msg):
    d = _broken(tmp_path, edit)
    out = tmp_path / "out.gguf"
    with pytest.raises(err, match=msg) as e:
        convert(str(d), str(out), "f32")
    assert "\n" not in str(e.value)
    assert not out.exists()


# ---- the file is sufficient: a float64 NumPy forward that reads only the GGUF ------------------
# (the contract the runtime's RG-LRU kind implements; docs/specs/more-hybrids.md §6.4)

def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w      # w already 1 + gamma


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _rglru_block(W, b, x, md, nh):
    T = len(x)
    lin = lambda n, v: v @ W(b + n + ".weight").T + W(b + n + ".bias")  # noqa: E731
    yb = _gelu_tanh(lin("rglru_y", x))
    u = lin("rglru_x", x)
    cw, K = W(b + "ssm_conv1d.weight"), md[f"{ARCH}.ssm.conv_kernel"]
    up = np.concatenate([np.zeros((K - 1, u.shape[1])), u])
    xb = sum(up[k:k + T] * cw[:, k] for k in range(K)) + W(b + "ssm_conv1d.bias")
    xh = xb.reshape(T, nh, -1)
    gi = _sigmoid(np.einsum("thi,hij->thj", xh, W(b + "rglru_gate_i.weight")) + W(b + "rglru_gate_i.bias")).reshape(T, -1)
    ga = _sigmoid(np.einsum("thi,hij->thj", xh, W(b + "rglru_gate_a.weight")) + W(b + "rglru_gate_a.bias")).reshape(T, -1)
    loga = -8.0 * ga * _softplus(W(b + "rglru_param.weight"))
    a, m = np.exp(loga), np.sqrt(1 - np.exp(2 * loga))
    a[0], m[0] = 0.0, 1.0                                                  # reset at position 0
    s, out = np.zeros(xb.shape[1]), np.zeros_like(xb)
    for t in range(T):
        s = a[t] * s + m[t] * gi[t] * xb[t]
        out[t] = s
    return lin("ssm_out", out * yb)


def _attention_block(W, b, x, md, nh):
    T, D = len(x), md[f"{ARCH}.attention.key_length"]
    nkv, rot, win = md[f"{ARCH}.attention.head_count_kv"], md[f"{ARCH}.rope.dimension_count"], md[f"{ARCH}.attention.sliding_window"]
    q, k, v = (x @ W(b + f"attn_{p}.weight").T for p in "qkv")
    q, k, v = q.reshape(T, nh, D), k.reshape(T, nkv, D), v.reshape(T, nkv, D)
    inv = md[f"{ARCH}.rope.freq_base"] ** (-np.arange(0, rot, 2) / rot)
    ang = np.arange(T)[:, None, None] * inv
    c, s = np.cos(ang), np.sin(ang)

    def rope(z):
        z1, z2 = z[..., :rot // 2], z[..., rot // 2:rot]
        return np.concatenate([z1 * c - z2 * s, z2 * c + z1 * s, z[..., rot:]], -1)
    q, k = rope(q), rope(k)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    ok = (j <= i) & (j > i - win)
    out = np.zeros((T, nh, D))
    for h in range(nh):
        sc = np.where(ok, q[:, h] @ k[:, h * nkv // nh].T / np.sqrt(D), -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        out[:, h] = (p / p.sum(-1, keepdims=True)) @ v[:, h * nkv // nh]
    return out.reshape(T, -1) @ W(b + "attn_output.weight").T + W(b + "attn_output.bias")


def _numpy_forward(f, tok):
    md = f.metadata()
    W = lambda n: f.array(n).astype(np.float64)  # noqa: E731
    eps, nh = md[f"{ARCH}.attention.layer_norm_rms_epsilon"], md[f"{ARCH}.attention.head_count"]
    h = W("token_embd.weight")[tok] * md[f"{ARCH}.embedding_scale"]
    for i, rec in enumerate(md[f"{ARCH}.attention.recurrent_layers"]):
        b = f"blk.{i}."
        x = _rms(h, W(b + "attn_norm.weight"), eps)
        h = h + (_rglru_block if rec else _attention_block)(W, b, x, md, nh)
        g = _rms(h, W(b + "ffn_norm.weight"), eps)
        lin = lambda n, v: v @ W(b + n + ".weight").T + W(b + n + ".bias")  # noqa: E731
        h = h + lin("ffn_down", _gelu_tanh(lin("ffn_gate", g)) * lin("ffn_up", g))
    lg = _rms(h, W("output_norm.weight"), eps) @ W("token_embd.weight").T
    cap = md[f"{ARCH}.final_logit_softcapping"]
    return cap * np.tanh(lg / cap)


def test_the_file_alone_reproduces_hf_logits(converted):
    ref = np.load(FIXTURE / "reference.npz")
    got = _numpy_forward(converted, ref["tokens"].astype(np.int64))
    want = ref["logits"].astype(np.float64)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-5, rel
