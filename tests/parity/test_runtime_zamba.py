"""Parity of zamba, Zamba v1 (our GGUF layout, README "Zamba layout"), with the HF reference.

tests/fixtures/hf/NAME/reference.npz: 64 tokens of Python source, HF's float32 logits and its
16-token greedy continuation with end-of-text (id 0) suppressed (``min_new_tokens``).
zamba-tiny is the reference set's (2 Mamba heads, hybrid layers 2 and 4, one tied shared block);
tools/make_zamba_fixtures.py made the others: tie_word_embeddings false, so each of the hybrid
layers 0 and 3 has its own shared block, 3 Mamba heads, GQA, no conv bias, the hub's
"mamba"/"hybrid" block types (zamba-odd-tiny); one Mamba head (2-D x_proj / dt_proj), HF's
default layer pattern, rms_norm_eps 1e-6 (zamba-1head-tiny).  llama.cpp has no Zamba: no llama.cpp file.

Checked: our f32 conversion's logits < F32_BOUND relative L2 one-shot and in ubatches of 1 and 7,
the greedy continuation identical; two sequences in one batch give each its own run's logits;
``toolkit quantize`` Q8_0 / Q4_K_M with error ordered by bits.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import numpy as np
import pytest
from parity_util import logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native



@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "zamba parity")


def _ref(fixtures, name):
    return np.load(fixtures / "hf" / name / "reference.npz")


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
                          "zamba.shared_block_map": ([0, -1, -1, 0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)},
            drop_tensors="shared.1.")   # kept, block 1 is a tensor set the runtime refuses to leave unread
    ref = _ref(fixtures, "zamba-odd-tiny")
    err = rel_l2(logits_of(bad, ref["tokens"]), ref["logits"])
    report.append(f"zamba-odd-tiny with block 0 on every hybrid layer: rel L2 {err:.2e}")
    assert err > 1e-3


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
