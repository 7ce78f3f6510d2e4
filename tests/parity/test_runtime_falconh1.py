"""Falcon-H1 (falcon-h1): our f32 conversion run against the HF reference, and our file against
llama.cpp's converter.

tests/fixtures/hf/NAME/reference.npz: 64 tokens of Python source, HF's float32 logits for them
and its 16-token greedy continuation.  falconh1-tiny is the reference set's (every muP
multiplier non-default, mamba_rms_norm with the norm before the gate); the held-back ones come
from tools/make_falconh1_fixtures.py (gate before norm, 2 groups, explicit head_dim, d_ssm from
expand; no gated norm, tied embeddings with lm_head_multiplier != embedding_multiplier, no conv
bias).

Checked for each: relative L2 error of all 64 positions' logits < 1e-5 in one shot, in ubatches
of 1 and of 7 tokens, and the greedy continuation identical; two sequences in one batch give
each the logits of its own run.  tests/fixtures/llamacpp/falconh1-*.f32.summary.json: what
llama.cpp 0c1e570's converter writes for the same checkpoints (its config read needs a
``head_dim`` key and a non-null ``mamba_d_ssm``, which were added for it; see the summary
files' ``source``): our tensors equal its names, shapes and bytes (``ssm_a`` within 1 ulp), our
keys hold its values.  Measured figures are written to the terminal.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from parity_util import logits_of, rel_l2, two_sequences_pairs

pytestmark = pytest.mark.native

NAMES = ["falconh1-tiny", "falconh1-gates-tiny", "falconh1-nonorm-tiny"]


def test_every_layer_is_parallel(hf_f32):
    from toolkit.arch import HParams, LayerKind
    from toolkit.gguf_io import GGUFFile
    for name in NAMES:
        hp = HParams.from_gguf(GGUFFile(str(hf_f32(name))))
        assert hp.layer_kinds == [LayerKind.PARALLEL] * hp.n_layer
        assert hp.attention_layers == hp.recurrent_layers == list(range(hp.n_layer))
        assert hp.ssm_norm_before_gate == (name == "falconh1-tiny")


def test_two_sequences_in_one_batch_equal_separate_runs(fixtures, hf_f32):
    tok = np.load(fixtures / "hf" / "falconh1-tiny" / "reference.npz")["tokens"]
    for got, want in two_sequences_pairs(hf_f32("falconh1-tiny"), tok):
        assert rel_l2(got, want) < 1e-6


# ---- our file against llama.cpp's converter ---------------------------------------------------

def _summary(path) -> dict:
    """Tensors (shape, type, float32 data) and non-tokenizer keys of a GGUF file."""
    import gguf
    r = gguf.GGUFReader(str(path))
    tensors = {t.name: ([int(x) for x in t.shape], t.tensor_type.name, np.array(t.data)) for t in r.tensors}
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith(("GGUF.", "tokenizer.", "general."))}
    return {"tensors": tensors, "kv": kv}


@pytest.mark.parametrize("name", NAMES)
def test_tensors_and_keys_equal_llamacpp(fixtures, hf_f32, name):
    import hashlib
    ref = json.loads((fixtures / "llamacpp" / f"{name}.f32.summary.json").read_text())
    ours = _summary(hf_f32(name))
    # tied embeddings: llama.cpp leaves output.weight out and reuses token_embd, which carries
    # embedding_multiplier; we write embed_tokens x lm_head_multiplier (what HF computes)
    tied = {"output.weight"} if name == "falconh1-nonorm-tiny" else set()
    assert set(ours["tensors"]) == set(ref["tensors"]) | tied and not tied & set(ref["tensors"])
    for n, want in ref["tensors"].items():
        shape, typ, data = ours["tensors"][n]
        assert (shape, typ) == (want["shape"], want["type"]), n
        if n.endswith(".ssm_a"):     # -exp rounded from float64 here, float32 torch there
            a, b = data.reshape(-1), np.asarray(want["values"], dtype=np.float32)
            assert np.all(np.abs(a.view(np.int32) - b.view(np.int32)) <= 1), n
        else:
            assert hashlib.sha256(data.tobytes()).hexdigest() == want["sha256"], n
    # ours: the attention layer list, the Mamba-2 head dim, the gate order where llama.cpp has none
    extra = {"falcon-h1.attention.layer_indices", "falcon-h1.ssm.head_dim", "falcon-h1.ssm.norm_before_gate"}
    want_kv = {k: v for k, v in ref["kv"].items() if not k.startswith("general.")}
    assert set(want_kv) <= set(ours["kv"]) and set(ours["kv"]) - set(want_kv) <= extra
    for k, v in want_kv.items():
        got = ours["kv"][k]
        assert (np.float32(got) == np.float32(v["value"])) if isinstance(got, float) else got == v["value"], k


def test_llamacpp_file_runs_as_llamacpp_runs_it(fixtures):
    """llama.cpp's own f32 file of falconh1-tiny (tests/fixtures/llamacpp; its converter given a
    head_dim key) runs here as in llama.cpp (its logits: falconh1-tiny.logits.npy, harness on
    libllama 0c1e570): within 1e-4 (its f16 KV cache), same top-1.  Both are far from HF: the file
    has no ssm.norm_before_gate, so the gated norm gates first, as llama.cpp always does, while
    this checkpoint's mamba_norm_before_gate is true."""
    ref = np.load(fixtures / "hf" / "falconh1-tiny" / "reference.npz")
    lc = np.load(fixtures / "llamacpp" / "falconh1-tiny.logits.npy")
    got = logits_of(fixtures / "llamacpp" / "falconh1-tiny.f32.gguf", ref["tokens"])
    assert rel_l2(got, lc) < 1e-4 and (got.argmax(-1) == lc.argmax(-1)).all()
    assert rel_l2(got, ref["logits"]) > 0.5


@pytest.mark.parametrize("outtype", ["bf16", "q8_0"])
def test_other_outtypes_equal_llamacpp(fixtures, tmp_path, outtype):
    """--outtype bf16 / q8_0: the folded multipliers are float32 products before the encoding,
    as in llama.cpp's converter (its outputs: falconh1-tiny.OUTTYPE.summary.json): every tensor's
    type and bytes equal (ssm_a stays F32, within 1 ulp)."""
    import hashlib
    from toolkit.convert import convert
    ref = json.loads((fixtures / "llamacpp" / f"falconh1-tiny.{outtype}.summary.json").read_text())
    out = tmp_path / f"fh1.{outtype}.gguf"
    convert(str(fixtures / "hf" / "falconh1-tiny"), str(out), outtype)
    ours = _summary(out)["tensors"]
    assert set(ours) == set(ref["tensors"])
    for n, want in ref["tensors"].items():
        shape, typ, data = ours[n]
        assert (shape, typ) == (want["shape"], want["type"]), n
        if not n.endswith(".ssm_a"):
            assert hashlib.sha256(data.tobytes()).hexdigest() == want["sha256"], n
