"""FalconMamba (``FalconMambaForCausalLM`` -> GGUF ``mamba`` with ``ssm.dt_b_c_rms``) against HF.

tests/fixtures/hf/falconmamba-*/reference.npz (tools/make_falconmamba_fixtures.py, transformers
5.24): 64 tokens of Python source, HF's float32 logits, the 16-token greedy continuation with
end-of-text suppressed.  falconmamba-tiny has HF's default epsilons (layer norms 1e-5, the
weightless dt/B/C norms ``mixer_rms_eps`` 1e-6), tied embeddings; falconmamba-odd-tiny other
widths (hidden 48, d_state 8, expand 3, conv 3, dt_rank 6), both epsilons 1e-6, an untied head.

Checked: f32 conversion within F32_BOUND relative L2 one-shot and in ubatches of 1 and 7, greedy
identical; the file is the one llama.cpp's mamba loader reads (its keys, tensor names, shapes;
our ``mamba.ssm.dt_b_c_rms_epsilon`` written only where HF's epsilon differs from
``layer_norm_rms_epsilon``), and dropping that key gives llama.cpp's arithmetic, off by 3e-4
(docs/specs/more-hybrids.md F1); ``toolkit quantize`` Q8_0 / Q4_K_M with error ordered by bits.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import numpy as np
import pytest
from parity_util import logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

NAMES = ["falconmamba-tiny", "falconmamba-odd-tiny"]
EPS_KEY = "mamba.ssm.dt_b_c_rms_epsilon"


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "falconmamba parity")


def _ref(fixtures, name):
    return np.load(fixtures / "hf" / name / "reference.npz")


# llama.cpp 0c1e570's mamba loader (src/models/mamba.cpp, llama_model_mamba: load_arch_hparams
# lines 3-10 read ssm.conv_kernel K, ssm.inner_size DI, ssm.state_size N, ssm.time_step_rank R,
# ssm.dt_b_c_rms (optional), layer_norm_rms_epsilon; lines 47-79 create these tensors, ggml ne
# order, all required but output (absent: token_embd, tied)
def _llamacpp_mamba_shapes(D, V, DI, N, K, R, n_layer):
    s = {"token_embd.weight": (D, V), "output_norm.weight": (D,), "output.weight": (D, V)}
    for i in range(n_layer):
        s |= {f"blk.{i}.{k}": v for k, v in {
            "attn_norm.weight": (D,), "ssm_in.weight": (D, 2 * DI), "ssm_conv1d.weight": (K, DI),
            "ssm_conv1d.bias": (DI,), "ssm_x.weight": (DI, R + 2 * N), "ssm_dt.weight": (R, DI),
            "ssm_dt.bias": (DI,), "ssm_a": (N, DI), "ssm_d": (DI,), "ssm_out.weight": (DI, D)}.items()}
    return s


@pytest.mark.parametrize("name", NAMES)
def test_file_is_what_llamacpp_mamba_loader_reads(fixtures, hf_f32, name):
    """Keys: llama.cpp's own mamba file (tests/fixtures/llamacpp/mamba-tiny.f32.gguf) has the same
    model keys, ours adds only the epsilon key where HF's differs; tensors: llama.cpp's names and
    shapes, nothing else (llama.cpp refuses a file with tensors it did not create)."""
    import json
    from toolkit.gguf_io import GGUFFile
    ours, theirs = GGUFFile(str(hf_f32(name))), GGUFFile(str(fixtures / "llamacpp" / "mamba-tiny.f32.gguf"))
    model_keys = lambda f: {kv.key for kv in f.kv if kv.key.startswith("mamba.")}   # noqa: E731
    cfg = json.loads((fixtures / "hf" / name / "config.json").read_text())
    differs = np.float32(cfg["mixer_rms_eps"]) != np.float32(cfg["layer_norm_epsilon"])
    assert model_keys(ours) == model_keys(theirs) | ({EPS_KEY} if differs else set())
    assert ours.get("general.architecture") == "mamba" and ours.get("mamba.ssm.dt_b_c_rms") is True
    assert ours.get("mamba.attention.layer_norm_rms_epsilon") == pytest.approx(cfg["layer_norm_epsilon"], rel=1e-6)
    if differs:
        assert ours.get(EPS_KEY) == pytest.approx(cfg["mixer_rms_eps"], rel=1e-6)
    g = lambda k: int(ours.get("mamba." + k))   # noqa: E731
    want = _llamacpp_mamba_shapes(g("embedding_length"), cfg["vocab_size"], g("ssm.inner_size"), g("ssm.state_size"),
                                  g("ssm.conv_kernel"), g("ssm.time_step_rank"), g("block_count"))
    if cfg.get("tie_word_embeddings", True):
        want.pop("output.weight")
    got = {n: tuple(int(x) for x in t.shape) for n, t in ours.tensors.items()}
    assert got == want


def test_without_hf_epsilon_is_llamacpp_arithmetic(fixtures, hf_f32, tmp_path, report):
    """The same file without our key runs the dt/B/C norms at layer_norm_rms_epsilon, as llama.cpp
    does: 1e-5 instead of HF's 1e-6 moves the logits by ~3e-4, far above F32_BOUND (docs/specs/more-hybrids.md F1).  The
    key is what brings the file to HF's figures."""
    from gguf_edit_util import rewrite
    from toolkit.gguf_io import GGUFFile
    name = "falconmamba-tiny"
    ref = _ref(fixtures, name)
    src = hf_f32(name)
    assert GGUFFile(str(src)).get(EPS_KEY) is not None
    stripped = tmp_path / "no-eps.gguf"
    rewrite(src, stripped, drop_kv=(EPS_KEY,))
    err = rel_l2(logits_of(stripped, ref["tokens"]), ref["logits"])
    report.append(f"{name} without {EPS_KEY} (llama.cpp's epsilon): rel L2 {err:.2e}")
    assert err > 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_quantize_error_ordered_by_bits(fixtures, hf_f32, tmp_path, report, name):
    """`toolkit quantize` Q8_0 and Q4_K_M with llama.cpp's mamba rules (it has the architecture):
    1-D tensors and ssm_conv1d stay F32, the matrices are quantized; both run, and the error
    against HF grows as the bits shrink: f32 < Q8_0 < Q4_K_M.  falconmamba-odd-tiny's rows (48,
    144, 6 wide) fit neither a Q8_0 nor a k-quant block, so both mixtures fall back to F16 on
    every matrix (llama.cpp's fallback) and give the same error there."""
    from toolkit.gguf_io import GGMLType, GGUFFile
    from toolkit.quantize import Options, quantize_file
    ref = _ref(fixtures, name)
    src = hf_f32(name)
    errs = {"F32": rel_l2(logits_of(src, ref["tokens"]), ref["logits"])}
    for qtype in ("Q8_0", "Q4_K_M"):
        out = tmp_path / f"{name}.{qtype}.gguf"
        quantize_file(str(src), str(out), qtype, Options(), n_threads=2)
        f = GGUFFile(str(out))
        for n, t in f.tensors.items():
            stays = len(t.shape) == 1 or n.endswith("ssm_conv1d.weight") or n in ("ssm_a", "ssm_d") or \
                n.endswith((".ssm_a", ".ssm_d"))
            assert (t.type == GGMLType.F32) == stays, (qtype, n, t.type)
        lo = logits_of(out, ref["tokens"])
        assert np.isfinite(lo).all()
        errs[qtype] = rel_l2(lo, ref["logits"])
    report.append(f"{name} vs HF: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert errs["F32"] < errs["Q8_0"] < 1.0 and errs["Q4_K_M"] < 1.0
    if name == "falconmamba-odd-tiny":
        assert errs["Q8_0"] == errs["Q4_K_M"]
    else:
        assert errs["Q8_0"] < errs["Q4_K_M"]


@pytest.mark.parametrize("value", [-1e-6, float("nan")])
def test_bad_epsilon_key_is_one_clear_line(monkeypatch, capsys, hf_f32, tmp_path, value):
    import gguf
    from gguf_edit_util import rewrite, run_error
    bad = tmp_path / "bad-eps.gguf"
    rewrite(hf_f32("falconmamba-tiny"), bad, kv={EPS_KEY: (value, gguf.GGUFValueType.FLOAT32, None)})
    err = run_error(monkeypatch, capsys, bad)
    assert EPS_KEY in err and "epsilon" in err
