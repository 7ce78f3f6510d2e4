"""LFM3 (Lfm3ForCausalLM -> lfm3): our conversion against HF's logits, and the file's layout.

lfm3-tiny is ../shared/fixtures' (transformers 5.24): 5 layers conv, conv, full attention, conv,
sliding attention (window 16), 4 heads / 2 KV heads of 16, proportional RoPE (factor 0.5) on the
full layer and θ 10 000 on the sliding one, sandwich norms, the per-head output gate, tied
embeddings.  llama.cpp has no lfm3: no llama.cpp file (README "LFM3 layout").

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7 (64 tokens: the
sliding layer's window is passed, its cache evicts), greedy continuation identical (HF's
reference was generated with end-of-text masked: suppressed here too); two sequences in one batch
give each its own run's logits; `toolkit quantize` Q8_0 / Q4_K_M with the error ordered by bits.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from parity_util import check_against_hf, logits_of, rel_l2, terminal_report, two_sequences_vs_separate

pytestmark = pytest.mark.native

NAME = "lfm3-tiny"
F32_BOUND = 1e-5
EOT = (0,)


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "lfm3 parity")


@pytest.fixture(scope="module")
def ref():
    return np.load(pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / NAME / "reference.npz")


def test_layout(hf_f32):
    from toolkit.arch import HParams, Norm
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32(NAME)))
    hp = HParams.from_gguf(f)
    assert hp.arch == "lfm3" and hp.attention_layers == [2, 4] and hp.recurrent_layers == [0, 1, 3]
    assert hp.n_swa == 16 and hp.swa_layers == [0, 0, 0, 0, 1]
    assert hp.rope_freq_base == 1e6 and hp.rope_freq_base_swa == 1e4 and hp.n_rot == 16 and hp.rope_prop_rot == 8
    assert hp.attn_head_gate == 1 and hp.norm_place == Norm.SANDWICH
    assert tuple(f.tensors["blk.2.attn_gate.weight"].shape) == (64, 4)          # ne: [D, H]
    assert "blk.0.post_attention_norm.weight" in f.tensors and "blk.0.post_ffw_norm.weight" in f.tensors
    assert "output.weight" not in f.tensors                                      # tied


def test_converted_f32_matches_hf(hf_f32, ref, report):
    check_against_hf(hf_f32(NAME), ref, NAME, report, F32_BOUND, suppress=EOT)


def test_two_sequences_in_one_batch_equal_separate_runs(hf_f32, ref, report):
    diff = two_sequences_vs_separate(hf_f32(NAME), ref["tokens"])
    report.append(f"{NAME}: two sequences in one batch vs separate runs: max |diff| {diff:.1e}")
    assert diff == 0.0


def test_quantize_error_ordered_by_bits(hf_f32, ref, tmp_path, report):
    """Q8_0 and Q4_K_M by lfm2's (llama.cpp's name-based) rules: norms, the conv kernel and every
    1-D tensor stay F32; the error against HF grows as the bits shrink."""
    from toolkit.gguf_io import GGMLType, GGUFFile
    from toolkit.quantize import Options, quantize_file
    src = hf_f32(NAME)
    errs = {"F32": rel_l2(logits_of(src, ref["tokens"]), ref["logits"])}
    for qtype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{NAME}.{qtype}.gguf"
        quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
        f = GGUFFile(str(out))
        for n, t in f.tensors.items():
            if len(t.shape) == 1 or n.endswith("shortconv.conv.weight"):
                assert t.type == GGMLType.F32, (qtype, n)
        assert any(t.type != GGMLType.F32 for t in f.tensors.values())
        lo = logits_of(out, ref["tokens"])
        assert np.isfinite(lo).all()
        errs[qtype] = rel_l2(lo, ref["logits"])
    report.append(f"{NAME} vs HF: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert errs["F32"] < errs["Q8_0"] < errs["Q4_K_M"] < 1.0
