"""Parity of zamba, Zamba v1 (our GGUF layout, README "Zamba layout"), with the HF reference.

tests/fixtures/hf/NAME/reference.npz: 64 tokens of Python source, HF's float32 logits and its
16-token greedy continuation with end-of-text (id 0) suppressed (``min_new_tokens``).
zamba-tiny is ../shared/fixtures' (2 Mamba heads, hybrid layers 2 and 4, one tied shared block);
tools/make_zamba_fixtures.py made the others: tie_word_embeddings false, so each of the hybrid
layers 0 and 3 has its own shared block, 3 Mamba heads, GQA, no conv bias, the hub's
"mamba"/"hybrid" block types (zamba-odd-tiny); one Mamba head (2-D x_proj / dt_proj), HF's
default layer pattern, rms_norm_eps 1e-6 (zamba-1head-tiny).  llama.cpp has no Zamba: no llama.cpp file.

Checked: our f32 conversion's logits < F32_BOUND relative L2 one-shot and in ubatches of 1 and 7,
the greedy continuation identical; two sequences in one batch give each its own run's logits;
``toolkit quantize`` Q8_0 / Q4_K_M with error ordered by bits.
"""
from __future__ import annotations

import numpy as np
import pytest
from parity_util import check_against_hf, logits_of, rel_l2, terminal_report, two_sequences_vs_separate

pytestmark = pytest.mark.native

NAMES = ["zamba-tiny", "zamba-odd-tiny", "zamba-1head-tiny"]
F32_BOUND = 1e-5


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "zamba parity")


def _ref(fixtures, name):
    return np.load(fixtures / "hf" / name / "reference.npz")


@pytest.mark.parametrize("name", NAMES)
def test_converted_f32_matches_hf(fixtures, hf_f32, report, name):
    check_against_hf(hf_f32(name), _ref(fixtures, name), f"{name} (toolkit convert f32)", report, F32_BOUND,
                     suppress=(0,))


def test_fixtures_cover_the_layout(hf_f32):
    """Blocks stored once when tied, one per hybrid layer when not; heads; 2-D x_proj with one head."""
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile
    for name, hybrid, blocks, heads in (("zamba-tiny", [2, 4], 1, 2), ("zamba-odd-tiny", [0, 3], 2, 3),
                                        ("zamba-1head-tiny", [2, 3, 5], 1, 1)):
        f = GGUFFile(str(hf_f32(name)))
        hp = HParams.from_gguf(f)
        assert [i for i, kd in enumerate(hp.layer_kinds) if kd == LayerKind.ZAMBA_SHARED] == hybrid
        assert set(hp.layer_kinds) == {LayerKind.MAMBA1, LayerKind.ZAMBA_SHARED}
        assert hp.n_shared_block == blocks and hp.ssm_n_head == heads and hp.n_rot == 0
        assert sorted({n.split(".")[1] for n in f.tensors if n.startswith("shared.")}) == [str(b) for b in range(blocks)]
        assert len(f.tensors["blk.0.ssm_x.weight"].shape) == (3 if heads > 1 else 2)
        assert ("output.weight" in f.tensors) == (name == "zamba-odd-tiny")


def test_first_block_everywhere_is_wrong_for_untied(fixtures, hf_f32, tmp_path, report):
    """zamba-odd-tiny's second block differs: running block 0 on both hybrid layers (the tied
    reading, shared_block_count 1) is far off (docs/specs/more-hybrids.md §7.2: 2e-2 on its fixture)."""
    import gguf
    from gguf_edit_util import rewrite
    src = hf_f32("zamba-odd-tiny")
    bad = tmp_path / "one-block.gguf"
    rewrite(src, bad, kv={"zamba.shared_block_count": (1, gguf.GGUFValueType.UINT32, None),
                          "zamba.shared_block_map": ([0, -1, -1, 0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)})
    ref = _ref(fixtures, "zamba-odd-tiny")
    err = rel_l2(logits_of(bad, ref["tokens"]), ref["logits"])
    report.append(f"zamba-odd-tiny with block 0 on every hybrid layer: rel L2 {err:.2e}")
    assert err > 1e-3


@pytest.mark.parametrize("name", ["zamba-tiny", "zamba-odd-tiny"])
def test_two_sequences_in_one_batch_equal_separate_runs(fixtures, hf_f32, report, name):
    diff = two_sequences_vs_separate(hf_f32(name), _ref(fixtures, name)["tokens"])
    report.append(f"{name}: two sequences in one batch vs separate runs: max |diff| {diff:.1e}")
    assert diff == 0.0


def test_quantize_error_ordered_by_bits(fixtures, hf_f32, tmp_path, report):
    """`toolkit quantize` Q8_0 and Q4_K_M (llama.cpp has no zamba: its name-based rules apply, as
    for zamba2, the closest family): shared blocks stay stored once, norms / conv / SSM vectors F32;
    the error against HF grows as the bits shrink."""
    from toolkit.gguf_io import GGMLType, GGUFFile
    from toolkit.quantize import Options, quantize_file
    name = "zamba-tiny"
    ref, src = _ref(fixtures, name), hf_f32(name)
    errs = {"F32": rel_l2(logits_of(src, ref["tokens"]), ref["logits"])}
    for qtype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{name}.{qtype}.gguf"
        quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
        f = GGUFFile(str(out))
        assert sorted(n for n in f.tensors if n.startswith("shared.")) == \
            sorted(n for n in GGUFFile(str(src)).tensors if n.startswith("shared."))
        for n, t in f.tensors.items():
            if len(t.shape) == 1 or n.endswith(("ssm_conv1d.weight", "ssm_a", "ssm_d")):
                assert t.type == GGMLType.F32, (qtype, n)
        assert any(t.type != GGMLType.F32 for t in f.tensors.values())
        lo = logits_of(out, ref["tokens"])
        assert np.isfinite(lo).all()
        errs[qtype] = rel_l2(lo, ref["logits"])
    report.append(f"{name} vs HF: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert errs["F32"] < errs["Q8_0"] < errs["Q4_K_M"] < 1.0


@pytest.mark.parametrize("kv,needles", [
    ({"zamba.ssm.head_count": (3, "UINT32", None)}, ["zamba.ssm.head_count", "divide inner_size 128"]),
    ({"zamba.shared_block_count": (2, "UINT32", None)}, ["zamba.shared_block_map"]),
])
def test_bad_gguf_keys_are_one_clear_line(monkeypatch, capsys, hf_f32, tmp_path, kv, needles):
    """A zamba file whose head count does not divide the inner size, or whose block map disagrees
    with its block count: `toolkit run` says so in one line (exit 2), no traceback."""
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32("zamba-tiny"), bad, kv={k: (v, gguf.GGUFValueType[t], s) for k, (v, t, s) in kv.items()})
    err = run_error(monkeypatch, capsys, bad)
    for n in needles:
        assert n in err, err
