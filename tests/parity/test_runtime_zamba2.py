"""Parity of zamba2 (our GGUF layout, README "Zamba2 layout") with the HF reference.

tests/fixtures/hf/NAME/reference.npz: 64 tokens of Python source, HF's float32 logits for them
and its 16-token greedy continuation.  zamba2-tiny is the reference set's (one shared block,
hybrid layers 1 and 4); tools/make_zamba2_fixtures.py made the others: two shared blocks over
three hybrid layers with the hub's "mamba"/"hybrid" block types, mamba_ngroups 2 and
mamba_d_conv 3 (zamba2-mem2-tiny); no RoPE, no attention adapters, hybrid layer 0, and a dt
under time_step_min that HF's chunked scan floors (zamba2-dtfloor-tiny).  llama.cpp has no Zamba2: no llama.cpp file.

Checked for each: our f32 conversion's logits over all 64 positions < F32_BOUND relative L2 in
one shot, in ubatches of 1 and of 7 tokens, the greedy continuation identical; two sequences in
one batch give each the logits of its own run.  Measured figures are written to the terminal.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import numpy as np
import pytest
from parity_util import QUANT_BOUNDS, logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native



@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "zamba2 parity")


def test_fixtures_cover_the_layout(hf_f32):
    """What the fixtures are said to cover: shared blocks stored once, block map, dt floor."""
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32("zamba2-mem2-tiny")))
    hp = HParams.from_gguf(f)
    assert hp.n_shared_block == 2 and hp.n_group == 2 and hp.d_conv == 3
    assert [i for i, kd in enumerate(hp.layer_kinds) if kd == LayerKind.ZAMBA2_SHARED] == [1, 2, 4]
    assert f.get("zamba2.shared_block_map") == [-1, 0, 1, -1, 0]
    assert sorted({n.split(".")[1] for n in f.tensors if n.startswith("shared.")}) == ["0", "1"]
    d = HParams.from_gguf(GGUFFile(str(hf_f32("zamba2-dtfloor-tiny"))))
    assert d.layer_kinds[0] == LayerKind.ZAMBA2_SHARED and d.n_rot == 0 and d.ssm_dt_min > 0
    names = GGUFFile(str(hf_f32("zamba2-dtfloor-tiny"))).tensors
    assert "blk.0.ffn_lora_a.weight" in names and not any("attn_q_lora" in n for n in names)


@pytest.mark.parametrize("outtype", ["bf16", "f16", "q8_0"])
def test_converted_lower_precision(fixtures, tmp_path, report, outtype):
    """Matrices (shared blocks, adapters, projections) in bf16 / f16 / q8_0: the error is bounded
    by what the type explains (parity_util.QUANT_BOUNDS, as in test_runtime_parity.py)."""
    from toolkit.convert import convert
    name = "zamba2-tiny"
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    out = tmp_path / f"{name}.{outtype}.gguf"
    convert(str(fixtures / "hf" / name), str(out), outtype)
    lo = logits_of(out, ref["tokens"])
    err, top1 = rel_l2(lo, ref["logits"]), float(np.mean(lo.argmax(1) == ref["logits"].argmax(1)))
    report.append(f"{name} {outtype}: rel L2 {err:.2e} (bound {QUANT_BOUNDS[outtype]:.0e}), top-1 {top1:.0%}")
    assert err < QUANT_BOUNDS[outtype]


def test_logits_do_not_depend_on_the_thread_count(fixtures, hf_f32):
    """Rows, heads and channels of the shared block and the Mamba-2 part are split over the
    threads; every result is computed by the same loop whichever thread runs it."""
    from toolkit.runtime import Context, Model
    tok = np.load(fixtures / "hf" / "zamba2-mem2-tiny" / "reference.npz")["tokens"]
    out = []
    for nt in (1, 3):
        with Model(hf_f32("zamba2-mem2-tiny"), n_threads=nt) as m, \
                Context(m, n_ctx=128, n_seq_max=2, n_threads=nt) as ctx:
            out.append(ctx.decode_batch([(tok[:40], 0), (tok[10:50], 1)], logits="all"))
    assert all(np.array_equal(a, b) for a, b in zip(*out))


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K_M"])
def test_quantize_keeps_shared_blocks_once(fixtures, hf_f32, tmp_path, report, qtype):
    """`toolkit quantize` of a Zamba2 file (llama.cpp has no zamba2 rules, so its name-based
    ones apply): each shared block's matrices appear once, under shared.B.*, and are quantized
    like any attention / FFN matrix; norms, conv and SSM vectors stay F32; the file runs and its
    logits stay near the f32 ones (Q8_0: 10x the q8_0 bound of QUANT_BOUNDS; Q4_K_M: top-1
    agreement only, these 64-wide tensors take the Q5_0 / F16 fallbacks)."""
    from toolkit.gguf_io import GGUFFile, GGMLType
    from toolkit.quantize import Options, quantize_file
    src = hf_f32("zamba2-tiny")
    out = tmp_path / f"zamba2.{qtype}.gguf"
    quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
    f = GGUFFile(str(out))
    shared = [n for n in f.tensors if n.startswith("shared.")]
    assert shared and len(shared) == len(set(shared))
    assert not any(".attn_q.weight" in n for n in f.tensors if n.startswith("blk."))   # q/k/v only in the shared block
    for n in shared:
        t = f.tensors[n]
        want_f32 = n.endswith("norm.weight")
        assert (t.type == GGMLType.F32) == want_f32, (n, t.type)
    tok = np.load(fixtures / "hf" / "zamba2-tiny" / "reference.npz")["tokens"]
    lf, lq = logits_of(src, tok), logits_of(out, tok)
    err, top1 = rel_l2(lq, lf), float(np.mean(lq.argmax(1) == lf.argmax(1)))
    report.append(f"zamba2-tiny {qtype} vs its f32: rel L2 {err:.2e}, top-1 {top1:.0%}")
    assert np.isfinite(lq).all()
    if qtype == "Q8_0":
        assert err < 0.85
    assert top1 >= 0.75
