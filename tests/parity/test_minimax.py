"""MiniMax-Text-01 (MiniMaxForCausalLM -> minimax-01): our conversion against HF's logits,
llama.cpp's own file, and the layout.

minimax-tiny is the reference set's (transformers 5.24): 4 layers linear, linear, full, linear
(lightning attention on the linear ones); 4 heads / 2 KV heads of 16, NeoX RoPE θ 1e6 on all 16
channels; MoE on every layer (4 experts, top-2, renormalised); residual factors α 1.7, β 1 on
every branch; block_size 16 (HF's prompt chunking).  Held back (tools/make_minimax_fixtures.py):
minimax-ab-tiny (5 layers, attention at 0 and 3, MQA, every α and β distinct and β != 1,
block_size 24) and minimax-wide-tiny (5 layers, attention at 4 only, 2 heads of 40,
top-1 of 3 experts, block_size 40, ε 1e-6, θ 1e4) and minimax-linear-tiny (2 lightning layers, no
attention layer: the heads come from attention.head_count alone).  Each is checked with the prompt through
the block form (threshold 1: every run, the 1- and 7-token ubatches too) and through the
recurrence (threshold 0), and the two forms against each other.

Checked: f32 logits < 1e-5 relative L2 in one shot and in ubatches of 1 and 7 (64 tokens: four
of HF's blocks), greedy continuation identical (end-of-text, id 0, suppressed as HF's reference
did); the file equals llama.cpp's converter's (keys but its name / chat template, every tensor);
llama.cpp's own file runs here at its own ε / slope (2.4e-5 from HF, docs/specs/more-hybrids.md §5.6); two sequences
in one batch give each its own run's logits; Q8_0 / Q4_K_M ordered by bits.

The two-sequence and quantize-order checks of minimax-tiny are a table row now (tests/families.py),
run by tests/parity/test_families.py.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from parity_util import MODES, check_against_hf, greedy_of, logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

NAME = "minimax-tiny"
F32_BOUND = 1e-5
EOT = (0,)
LLAMACPP = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "minimax-tiny.f32.gguf"   # copied from shared/


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "minimax-01 parity")


@pytest.fixture(scope="module")
def ref():
    return np.load(pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / NAME / "reference.npz")


def test_layout(hf_f32):
    from toolkit.arch import HParams, arch_spec
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32(NAME)))
    hp = HParams.from_gguf(f)
    assert hp.arch == "minimax-01" and hp.attention_layers == [2] and hp.recurrent_layers == [0, 1, 3]
    assert hp.n_rot == 16 and hp.rope_freq_base == 1e6 and hp.n_expert == 4 and hp.n_expert_used == 2
    assert arch_spec(hp.arch).residual.c_id == 1 and abs(hp.res_alpha_lin - 1.7) < 1e-6 and hp.res_beta_mlp == 1.0
    md = f.metadata()
    assert md["minimax-01.attention.recurrent_layers"] == [True, True, False, True]
    assert "minimax-01.residual_alpha" not in md          # one α, every β 1: llama.cpp's key says it all
    t = f.tensors
    assert tuple(t["blk.0.attn_qkv.weight"].shape) == (64, 192) and tuple(t["blk.0.attn_norm_2.weight"].shape) == (64,)
    assert tuple(t["blk.0.ffn_gate_exps.weight"].shape) == (64, 32, 4)
    assert not any("decay" in n or "slope" in n for n in t)


@pytest.mark.parametrize("name,pattern,alpha,beta", [
    ("minimax-ab-tiny", [False, True, True, False, True], [1.3, 0.6, 1.1], [0.8, 1.25, 0.7]),
    ("minimax-wide-tiny", [True, True, True, True, False], [0.9, 1.0, 0.5], [1.6, 1.0, 1.5]),
    ("minimax-linear-tiny", [True, True], [1.2, 1.2, 1.2], [0.9, 0.9, 0.9])])
def test_layout_held_back(hf_f32, name, pattern, alpha, beta):
    """The pattern written explicitly; our residual keys [linear, full, mlp] where a factor differs."""
    from toolkit.gguf_io import GGUFFile
    f = GGUFFile(str(hf_f32(name)))
    md = f.metadata()
    assert md["minimax-01.attention.recurrent_layers"] == pattern
    assert md["minimax-01.residual_alpha"] == pytest.approx(alpha) and md["minimax-01.residual_beta"] == pytest.approx(beta)
    assert md["minimax-01.attention.key_length"] == (40 if "wide" in name else 16)


def test_file_equals_llama_cpp_converters(hf_f32):
    from toolkit.gguf_io import GGUFFile
    a, b = GGUFFile(str(hf_f32(NAME))), GGUFFile(str(LLAMACPP))
    ma, mb = a.metadata(), b.metadata()
    for key in mb:
        if key.startswith("minimax-01."):
            assert ma.get(key) == pytest.approx(mb[key]) if isinstance(mb[key], float) else ma.get(key) == mb[key], key
    assert set(a.tensors) == set(b.tensors)
    for n in a.tensors:
        np.testing.assert_array_equal(np.asarray(a.array(n)), np.asarray(b.array(n)), err_msg=n)


HELD_BACK = ["minimax-ab-tiny", "minimax-wide-tiny", "minimax-linear-tiny"]
FORMS = {"block": 1, "recurrent": 0}      # tk_lightning_threshold: 1 = every run by blocks, 0 = never


@pytest.fixture
def lightning_threshold():
    """Set tk_lightning_threshold for one test, the default (or TOOLKIT_LIGHTNING_MIN) restored after."""
    from toolkit.binding import lib
    yield lib.tk_lightning_set_threshold
    lib.tk_lightning_set_threshold(-1)


def _ref(name):
    return np.load(pathlib.Path(__file__).parent.parent / "fixtures" / "hf" / name / "reference.npz")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", [NAME] + HELD_BACK)
def test_converted_f32_matches_hf(hf_f32, report, lightning_threshold, name, form):
    lightning_threshold(FORMS[form])
    check_against_hf(hf_f32(name), _ref(name), f"{name} ({form})", report, F32_BOUND, suppress=EOT)


@pytest.mark.parametrize("name", [NAME] + HELD_BACK)
def test_block_and_recurrent_prefill_agree(hf_f32, report, lightning_threshold, name):
    """The block form (forced for every run) and the recurrence: the same logits to 1e-5 (relative
    L2) and the same greedy continuation; they differ in float rounding only.  With a threshold
    of 32 (the 64-token prompt in one shot by blocks, ubatches of 7 and 1 by the recurrence) the
    logits do not depend on the ubatch split by more than that."""
    path, tok = hf_f32(name), _ref(name)["tokens"]
    res = {}
    for form, th in FORMS.items():
        lightning_threshold(th)
        res[form] = (logits_of(path, tok), greedy_of(path, tok, 16, EOT))
    err = rel_l2(res["block"][0], res["recurrent"][0])
    lightning_threshold(32)
    split = {mode: logits_of(path, tok, **kw) for mode, kw in MODES}
    serr = max(rel_l2(split[m], split["one-shot"]) for m in split)
    report.append(f"{name}: block vs recurrent prefill rel L2 {err:.2e}, greedy "
                  f"{'identical' if res['block'][1] == res['recurrent'][1] else 'DIFFERS'}; threshold 32: "
                  f"ubatch splits vs one-shot {serr:.2e}")
    assert 0 < err < F32_BOUND, f"block vs recurrent: {err:.3e} (0 would mean the block form did not run)"
    assert res["block"][1] == res["recurrent"][1]
    assert 0 < serr < F32_BOUND


def test_llama_cpp_file_runs(ref, report):
    """llama.cpp's file runs here with HF's ε and slope (ours), so within our bound of HF; llama.cpp
    itself, with its own ε / slope, is 2.4e-5 from HF (docs/specs/more-hybrids.md §5.6)."""
    err = rel_l2(logits_of(LLAMACPP, ref["tokens"]), ref["logits"])
    report.append(f"{NAME}: llama.cpp's file run here vs HF {err:.2e}")
    assert err < F32_BOUND


def test_run_refuses_residual_factors_not_three(monkeypatch, capsys, tmp_path, hf_f32):
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad.gguf"
    rewrite(hf_f32(NAME), bad, kv={"minimax-01.residual_alpha": ([1.7, 1.7], gguf.GGUFValueType.ARRAY,
                                                                  gguf.GGUFValueType.FLOAT32)})
    err = run_error(monkeypatch, capsys, bad)
    assert "residual_alpha" in err and "3 finite numbers" in err, err


def test_our_residual_keys_are_read(tmp_path, hf_f32, ref):
    """residual_alpha / residual_beta equal to what residual_scale says give the same logits, bit
    for bit; a β of 0.5 on the FFN changes them."""
    import gguf
    from gguf_edit_util import rewrite
    F = gguf.GGUFValueType.FLOAT32
    A = gguf.GGUFValueType.ARRAY
    same, other = tmp_path / "same.gguf", tmp_path / "other.gguf"
    a = float(np.float32(1.7))
    rewrite(hf_f32(NAME), same, kv={"minimax-01.residual_alpha": ([a, a, a], A, F),
                                    "minimax-01.residual_beta": ([1.0, 1.0, 1.0], A, F)})
    rewrite(hf_f32(NAME), other, kv={"minimax-01.residual_alpha": ([a, a, a], A, F),
                                     "minimax-01.residual_beta": ([1.0, 1.0, 0.5], A, F)})
    toks = ref["tokens"][:16]
    base = logits_of(hf_f32(NAME), toks)
    assert np.array_equal(logits_of(same, toks), base)
    assert rel_l2(logits_of(other, toks), base) > 1e-2
