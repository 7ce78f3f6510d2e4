"""GLM-5-Next (glm5-next) and Ling 3 (bailingmoe3) run: our f32 conversion against HF's logits at
one shot and ubatches of 1 and 7, greedy identical; llama.cpp's own files run here; two
sequences in one batch equal separate runs; deliberate breaks of this branch's pieces seen
failing (docs/specs/kda-family.md; fixtures the reference set's {glm5next,bailinghybrid}-tiny:
glm5next-tiny 160 tokens, sparse from position 39, hc 4, k-pools of 8, budget 32, SwiGLU limit
1.0; bailinghybrid-tiny 64 tokens, KDA at 0 and 2, MLA with q-LoRA, dr 8, head gate at 1 and 3).

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
FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
NAMES = ["glm5next-tiny", "bailinghybrid-tiny"]
# held-back-like variants (tools/make_glm_ling_fixtures.py): other hc counts, Sinkhorn iterations,
# k-pools, budgets, gate bounds, the softplus gate, SwiGLU limits, no renormalisation, attention
# first, a shared indexer, expert groups, no q-LoRA, rms_norm_eps 1e-5, a layer-group tail
# glm5next-notail-tiny: index_kpool_always_select_tail false (the first kp - 1 queries attend
# nothing: a zero attention output, as HF's sdpa gives; docs/specs/kda-family.md §2.4 / D18 calls it undefined)
VARIANTS = ["glm5next-var-tiny", "glm5next-softplus-tiny", "glm5next-notail-tiny", "bailinghybrid-var-tiny"]


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "glm5-next / bailingmoe3 parity")


def _ref(name):
    return np.load(FIX / "hf" / name / "reference.npz")


def test_layout(hf_f32):
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile
    hp = HParams.from_gguf(GGUFFile(str(hf_f32("glm5next-tiny"))))
    assert hp.attention_layers == [2, 3] and hp.layer_kinds[2] == LayerKind.MLA and hp.layer_kinds[0] == LayerKind.KDA
    assert (hp.hc_count, hp.hc_sinkhorn_iters, hp.dsa_kpool, hp.idx_top_k, hp.dsa_full) == (4, 20, 8, 32, [1, 1, 1, 0, 1])
    assert hp.kda_gate_lower_bound == -5.0 and hp.kda_l2_eps == pytest.approx(1e-6) and hp.swiglu_clamp_exp == 1.0
    b = HParams.from_gguf(GGUFFile(str(hf_f32("bailinghybrid-tiny"))))
    assert b.attention_layers == [1, 3] and (b.mla_rope, b.attn_head_gate, b.kda_a_positive, b.mla_dr) == (1, 1, 1, 8)
    v = HParams.from_gguf(GGUFFile(str(hf_f32("glm5next-var-tiny"))))
    assert v.attention_layers == [0, 1, 4] and v.dsa_full == [1, 0, 1, 1, 1] and (v.hc_count, v.hc_sinkhorn_iters) == (3, 6)
    assert (v.dsa_kpool, v.idx_top_k, v.kda_gate_lower_bound, v.swiglu_clamp_exp, v.moe_weights_norm) == (6, 12, -3.0, 
        pytest.approx(0.3), False)
    s = HParams.from_gguf(GGUFFile(str(hf_f32("glm5next-softplus-tiny"))))
    assert s.kda_gate_lower_bound == 0.0 and s.hc_count == 2 and s.moe_n_group == 2
    bv = HParams.from_gguf(GGUFFile(str(hf_f32("bailinghybrid-var-tiny"))))
    assert bv.attention_layers == [1, 3] and bv.kda_gate_lower_bound == 0.0 and bv.mla_q_lora_rank == 0
    assert bv.kda_l2_eps == pytest.approx(1e-6) and bv.mla_norm_eps == pytest.approx(1e-6) and bv.rms_eps == pytest.approx(1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_llama_cpp_file_runs(report, name):
    """llama.cpp's files (= ours byte for byte) run here as ours do; llama.cpp's own logits (F16
    cache) are ~1e-4 away (docs/specs/kda-family.md §5)"""
    ref = _ref(name)
    lo = logits_of(FIX / "llamacpp" / f"{name}.f32.gguf", ref["tokens"])
    err, lc = rel_l2(lo, ref["logits"]), rel_l2(lo, np.load(FIX / "llamacpp" / f"{name}.logits.npy"))
    report.append(f"{name}: llama.cpp's file run here vs HF {err:.2e}, vs llama.cpp's own logits {lc:.2e}")
    assert err < F32_BOUND and lc < 5e-4


def test_info_memory_counts_the_dsa_keys(hf_f32, monkeypatch, capsys):
    """`info --memory`: the KV cache is the MLA latent of every attention layer plus the DSA
    indexer's [k_I | gamma] (2 dI floats a token) on the full indexer layers only: the C
    library's figure is their sum"""
    import json

    from cli_runner import cli
    for name, full_layers in (("glm5next-tiny", 1), ("glm5next-var-tiny", 2)):
        rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32(name)), "--memory", "--json", "-c", "1000")
        assert rc == 0, err
        d = json.loads(out)
        m = d["mla_latent"]
        assert m["dsa_layers"] == full_layers
        assert d["memory"]["kv"] == m["bytes"] + m["dsa_bytes"]
    rc, out, err = cli(monkeypatch, capsys, "info", str(hf_f32("bailinghybrid-tiny")), "--memory", "--json", "-c", "100")
    d = json.loads(out)
    assert "dsa_layers" not in d["mla_latent"] and d["memory"]["kv"] == d["mla_latent"]["bytes"]


@pytest.mark.parametrize("name", ["glm5next-tiny"])   # bailinghybrid-tiny: tests/parity/test_families.py
def test_quantized_error_ordered_by_bits(hf_f32, tmp_path, report, name):
    """Q8_0 and Q4_K_M by toolkit quantize (llama-quantize's rules: glm5-next keeps hc_*, the
    indexer, the KDA gates, kv_a / k_b / v_b as they are, attn_q_a / attn_q_b at Q8_0 at least):
    the error against HF grows as the bits shrink and the logits stay finite"""
    from toolkit.gguf_io import GGMLType, GGUFFile
    from toolkit.quantize import Options, quantize_file
    ref = _ref(name)
    src = hf_f32(name)
    errs = {"F32": rel_l2(logits_of(src, ref["tokens"]), ref["logits"])}
    for qtype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{name}.{qtype}.gguf"
        quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
        f = GGUFFile(str(out))
        if name.startswith("glm"):
            for n, t in f.tensors.items():
                if "hc_" in n or "indexer" in n or n.endswith(("attn_k_b.weight", "attn_v_b.weight")):
                    assert t.type == GGMLType.F32, (qtype, n)
                if n.endswith(("attn_q_a.weight", "attn_q_b.weight")):
                    assert t.type in (GGMLType.Q8_0, GGMLType.F16, GGMLType.F32), (qtype, n)
        lo = logits_of(out, ref["tokens"])
        assert np.isfinite(lo).all()
        errs[qtype] = rel_l2(lo, ref["logits"])
    report.append(f"{name} vs HF: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert errs["F32"] < errs["Q8_0"] < errs["Q4_K_M"] < 1.0


@pytest.mark.parametrize("name", NAMES + VARIANTS)
def test_chunked_kda_matches_hf(hf_f32, report, name):
    """the chunked KDA form (kernels/gdn.c, forced for every run of 1+ tokens) as the recurrence"""
    from toolkit.binding import lib
    before = lib.tk_kda_threshold()
    lib.tk_kda_set_threshold(1)
    try:
        ref = _ref(name)
        errs = {k: rel_l2(logits_of(hf_f32(name), ref["tokens"], **kw), ref["logits"])
                for k, kw in (("one-shot", {}), ("ubatch 7", {"n_ubatch": 7}))}
    finally:
        lib.tk_kda_set_threshold(before)
    report.append(f"{name} chunked KDA: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert max(errs.values()) < F32_BOUND
