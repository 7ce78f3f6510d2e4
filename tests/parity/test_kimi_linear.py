"""Kimi-Linear (KimiLinearForCausalLM -> kimi-linear): our conversion against HF's logits,
llama.cpp's own file, and the layout.

kimilinear-tiny is the reference set's (transformers 5.24): KDA at 0, 1, 3 (4 heads of 16, conv
4), NoPE MLA at 2 (dn 16, dr 8, dv 16, kv_lora_rank 32, no q-LoRA), layer 0 dense, MoE 8 experts
top-2 + shared, rms_norm_eps 1e-5.  kimilinear-var-tiny (tools/make_kimi_fixtures.py) is a
held-back-like variant saved as transformers 5.24 writes it: MLA first (0 and 3) with q-LoRA 24,
kv_lora_rank 20, dn 12, dr 4, dv 10, 2 heads; KDA 3 heads of 24 (!= the MLA heads), conv 3;
two leading dense layers; 8 experts in 4 groups (2 kept), top-3, norm_topk_prob false, 2 shared
experts, routed_scaling_factor 1.7.

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7, greedy
continuation identical (end-of-text, id 0, suppressed as HF's reference did); llama.cpp's own file
runs here at its own l2 / MLA epsilon (rms_norm_eps, docs/specs/kda-family.md D4 / D5): 2.9e-4 from HF, as llama.cpp
itself with an F32 cache, and near llama.cpp's own F16-cache logits; two sequences in one batch
give each its own run's logits; Q8_0 / Q4_K_M ordered by bits.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from parity_util import logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

F32_BOUND = 1e-5
EOT = (0,)
FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
LLAMACPP = FIX / "llamacpp" / "kimilinear-tiny.f32.gguf"   # copied from shared/


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "kimi-linear parity")


def _ref(name):
    return np.load(FIX / "hf" / name / "reference.npz")


def test_layout(hf_f32):
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile
    hp = HParams.from_gguf(GGUFFile(str(hf_f32("kimilinear-tiny"))))
    assert hp.arch == "kimi-linear" and hp.attention_layers == [2] and hp.recurrent_layers == [0, 1, 3]
    assert hp.layer_kinds[2] == LayerKind.MLA and hp.layer_kinds[0] == LayerKind.KDA
    assert (hp.kda_n_head, hp.kda_head_dim, hp.d_conv, hp.kda_l2_eps) == (4, 16, 4, pytest.approx(1e-6))
    assert (hp.mla_dn, hp.mla_dr, hp.mla_dv, hp.mla_kv_lora_rank, hp.mla_q_lora_rank) == (16, 8, 16, 32, 0)
    assert hp.moe_sigmoid and hp.moe_weights_norm and hp.moe_n_group == 1 and hp.use_rope is False
    var = HParams.from_gguf(GGUFFile(str(hf_f32("kimilinear-var-tiny"))))
    assert var.attention_layers == [0, 3] and (var.kda_n_head, var.n_head, var.mla_q_lora_rank) == (3, 2, 24)
    assert (var.moe_n_group, var.moe_topk_group, var.moe_weights_norm) == (4, 2, False)


def test_llama_cpp_file_runs(report):
    """llama.cpp's file has none of our keys: it runs with llama.cpp's epsilons (rms_norm_eps for
    the l2-norm and the MLA norms), 2.9e-4 from HF as llama.cpp with an F32 cache (docs/specs/kda-family.md §5), and
    1e-4 from llama.cpp's own logits (its F16 cache)."""
    ref = _ref("kimilinear-tiny")
    lo = logits_of(LLAMACPP, ref["tokens"])
    err, lc = rel_l2(lo, ref["logits"]), rel_l2(lo, np.load(FIX / "llamacpp" / "kimilinear-tiny.logits.npy"))
    report.append(f"kimilinear-tiny: llama.cpp's file run here vs HF {err:.2e}, vs llama.cpp's logits {lc:.2e}")
    assert 1e-4 < err < 5e-4 and lc < 2e-4
    assert (lo.argmax(-1) == ref["logits"].argmax(-1)).all()


def test_info_memory_shows_the_latent_cache(hf_f32, monkeypatch, capsys):
    """`info --memory`: the KV cache is the MLA latent alone (kv_lora_rank + qk_rope_head_dim floats
    a token, no V), and the line says what caching K and V would take."""
    import json

    from cli_runner import cli
    for name, lat, full in (("kimilinear-tiny", 40, 4 * (16 + 8 + 16)), ("kimilinear-var-tiny", 24, 2 * (12 + 4 + 10))):
        rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32(name)), "--memory", "--json", "-c", "1000")
        assert rc == 0, err
        d = json.loads(out)
        m = d["mla_latent"]
        assert (m["floats_per_token"], m["kv_floats_per_token"]) == (lat, full)
        assert d["memory"]["kv"] == m["bytes"] == m["layers"] * lat * 1000 * 4   # the C library's figure
        rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32(name)), "--memory", "-c", "1000")
        assert "kv holds the MLA latent" in out and f"{full / lat:.1f}x less" in out, out


@pytest.fixture
def kda_threshold():
    """Set tk_kda_threshold for one test (1: every KDA run takes the chunked form; 0: the
    token-by-token recurrence), restored after it."""
    from toolkit.binding import lib
    before = lib.tk_kda_threshold()
    yield lib.tk_kda_set_threshold
    lib.tk_kda_set_threshold(before)


@pytest.mark.parametrize("name", ["kimilinear-tiny", "kimilinear-var-tiny"])
def test_chunked_and_recurrent_kda_agree(hf_f32, report, kda_threshold, name):
    """KDA's chunked prefill (kernels/gdn.c, HF's form; forced for every run) and the recurrence:
    logits to 1e-5 (relative L2) in one shot and in ubatches of 7, the same greedy continuation,
    and the chunked runs within the bound of HF."""
    from parity_util import greedy_of
    ref = _ref(name)
    path, tok = hf_f32(name), ref["tokens"]
    res = {}
    for label, th in (("recurrent", 0), ("chunked", 1)):
        kda_threshold(th)
        res[label] = (logits_of(path, tok), logits_of(path, tok, n_ubatch=7), greedy_of(path, tok, 16, EOT))
    err = max(rel_l2(res["chunked"][i], res["recurrent"][i]) for i in (0, 1))
    hf = max(rel_l2(res["chunked"][i], ref["logits"]) for i in (0, 1))
    report.append(f"{name}: chunked vs recurrent KDA: rel L2 {err:.2e}, chunked vs HF {hf:.2e}; greedy "
                  f"{'identical' if res['chunked'][2] == res['recurrent'][2] else 'DIFFERS'}")
    assert 0 < err < 1e-5, f"chunked vs recurrent: {err:.3e} (0 would mean the chunked form did not run)"
    assert hf < F32_BOUND
    assert res["chunked"][2] == res["recurrent"][2] == ref["greedy"].tolist()


@pytest.mark.parametrize("kv, drop, needles", [
    ({"kimi-linear.kda.head_dim": (8, "UINT32")}, (), ("blk.0.attn_q.weight",)),                    # disagrees with the tensors
    ({"kimi-linear.attention.kv_lora_rank": (24, "UINT32")}, (), ("blk.2.attn_kv_a_mqa.weight",)),
    ({"kimi-linear.expert_group_count": (2, "UINT32"), "kimi-linear.expert_group_used_count": (3, "UINT32")}, (),
     ("expert_group_used_count", "[1, 2]")),
    ({}, ("kimi-linear.expert_gating_func",), ("expert_gating_func",)),
    ({"kimi-linear.kda.l2_norm_epsilon": (-1.0, "FLOAT32")}, (), ("kda.l2_norm_epsilon",)),
    # a stored bound is the value the file holds (the message said "= -1.0" for 1.0), and a stored 0
    # is refused rather than run as the softplus gate its absence means
    ({"kimi-linear.kda.gate_lower_bound": (1.0, "FLOAT32")}, (), ("kda.gate_lower_bound' = 1.0 must be a negative",)),
    ({"kimi-linear.kda.gate_lower_bound": (0.0, "FLOAT32")}, (), ("kda.gate_lower_bound' = 0.0 must be a negative",)),
])
def test_run_refuses_bad_files(monkeypatch, capsys, tmp_path, hf_f32, kv, drop, needles):
    """A file whose keys disagree with its tensors or with each other: one line naming the key or
    tensor, exit 2."""
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32("kimilinear-tiny"), bad, kv={k: (v, gguf.GGUFValueType[t], None) for k, (v, t) in kv.items()},
            drop_kv=drop)
    err = run_error(monkeypatch, capsys, bad)
    for n in needles:
        assert n in err, err
