"""Nemotron-H (nemotron_h, nemotron_h_moe): our f32 conversion run against the HF reference, and
our file against llama.cpp 0c1e570's.

Fixtures (tests/fixtures/hf/NAME/reference.npz: 64 tokens, HF's float32 logits, a 16-token greedy
continuation):
- nemotronh-tiny (the reference set, docs/glossary.md): layers_block_type Mamba-2 / MLP / attention / Mamba-2 /
  MoE, one expert group.  Its ``greedy`` was made with the end-of-text token (id 0) banned: HF's
  own logits put id 0 first after the 64 tokens (HF ``generate`` today stops there at once), and
  ``greedy`` is the argmax over the other ids.  Both are checked: our plain greedy run stops at
  id 0 at the same step, and with id 0 banned it gives ``greedy``.
- nemotronh-pattern-tiny, nemotronh-dense-tiny (tools/make_nemotronh_fixtures.py): the original
  ``hybrid_override_pattern`` config form with 8 experts in 4 groups (2 kept), bias-corrected
  choice, norm_topk_prob false, routed_scaling_factor 2.5, head_dim != hidden / heads; and a
  model without MoE (GGUF nemotron_h) with tied-embedding config but a saved lm_head.

Checked for each: relative L2 error of all 64 positions' logits < 1e-5 in one shot and in
ubatches of 1 and of 7 tokens; greedy identical.  Measured figures go to the terminal.

The two-sequence check of nemotronh-tiny is a table row now (tests/families.py),
run by tests/parity/test_families.py.
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import gguf
import numpy as np
import pytest

from parity_util import logits_of, rel_l2, terminal_report

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).parent.parent / "fixtures"
NAMES = ["nemotronh-tiny", "nemotronh-pattern-tiny", "nemotronh-dense-tiny"]
ARCH = {"nemotronh-tiny": "nemotron_h_moe", "nemotronh-pattern-tiny": "nemotron_h_moe",
        "nemotronh-dense-tiny": "nemotron_h"}
EOS = 0
F32_BOUND = 1e-5


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "nemotron-h parity")


def greedy_of(path, tokens, n: int, ban: tuple[int, ...] = ()) -> list[int]:
    """Greedy continuation (``ban``: ids never chosen); stops after the end-of-text id."""
    from toolkit.runtime import Context, Model
    with Model(path) as m, Context(m, n_ctx=128) as ctx:
        lg = ctx.decode(tokens)
        out: list[int] = []
        while len(out) < n and (not out or out[-1] != EOS):
            row = lg[-1].copy()
            row[list(ban)] = -np.inf
            out.append(int(np.argmax(row)))
            lg = ctx.decode([out[-1]])
        return out


@pytest.mark.parametrize("name", NAMES)
def test_converted_f32_matches_hf(hf_f32, report, name):
    ref = np.load(FIX / "hf" / name / "reference.npz")
    path = hf_f32(name)
    assert gguf.GGUFReader(str(path)).fields["general.architecture"].contents() == ARCH[name]
    errs = {}
    for mode, kw in (("one-shot", {}), ("ubatch 1", {"n_ubatch": 1}), ("ubatch 7", {"n_ubatch": 7})):
        errs[mode] = rel_l2(logits_of(path, ref["tokens"], **kw), ref["logits"])
    want = ref["greedy"].tolist()
    greedy = greedy_of(path, ref["tokens"], len(want))
    hf_first = int(np.argmax(ref["logits"][-1]))
    if hf_first == EOS:     # HF stops at once (module docstring); the reference banned id 0
        assert greedy == [EOS]
        greedy = greedy_of(path, ref["tokens"], len(want), ban=(EOS,))
    report.append(f"{name}: rel L2 " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) +
                  f" (bound {F32_BOUND:.0e}); greedy {'identical' if greedy == want else 'DIFFERS'}"
                  f"{' (end-of-text banned, as the reference)' if hf_first == EOS else ''}")
    for mode, e in errs.items():
        assert e < F32_BOUND, f"{name} {mode}: relative L2 error {e:.3e} >= {F32_BOUND}"
    assert greedy == want


def test_logits_do_not_depend_on_the_thread_count(hf_f32):
    """ReLU² rows, experts and Mamba-2 channels are split over the threads; every result is
    computed by the same loop whichever thread runs it."""
    from toolkit.runtime import Context, Model
    tok = np.load(FIX / "hf" / "nemotronh-pattern-tiny" / "reference.npz")["tokens"]
    out = []
    for nt in (1, 3):
        with Model(hf_f32("nemotronh-pattern-tiny"), n_threads=nt) as m, \
                Context(m, n_ctx=128, n_seq_max=2, n_threads=nt) as ctx:
            out.append(ctx.decode_batch([(tok[:40], 0), (tok[10:50], 1)], logits="all"))
    assert all(np.array_equal(a, b) for a, b in zip(*out))


# ---- our file against llama.cpp's ------------------------------------------------------------

# keys that differ on purpose (nemotronh.py's docstring): llama.cpp writes 0 as the MLP layer's
# feed_forward_length (its file does not load, in llama.cpp either) and 2**20 as context_length
# (ours: max_position_embeddings); the layer list, the Mamba-2 head dim and the RMS epsilon under
# its own key are ours; general.* model-card keys are llama.cpp's alone.
DIFFERENT = {"feed_forward_length", "context_length"}
# ssm.dt_min: HF's dt floor (NemotronHMamba2Mixer dt_limit = (time_step_min, inf)); llama.cpp's scan has none
OURS_ONLY = {"attention.layer_indices", "ssm.head_dim", "attention.layer_norm_rms_epsilon", "ssm.dt_min"}
GENERAL_MAY_DIFFER = {"general.name", "general.type", "general.size_label", "general.basename",
                      "general.quantization_version"}


def test_same_tensors_and_keys_as_llamacpp(hf_f32):
    """tests/fixtures/llamacpp/nemotronh-tiny.f32.summary.json: llama.cpp 0c1e570's f32 file of
    nemotronh-tiny (tools/make_gdn_fixtures.py --summarize): every tensor the same shape, type
    and bytes (q/k rows in its LlamaModel.permute order, the experts stacked, A = -exp(A_log));
    every key the same value but the documented ones."""
    ref = json.loads((FIX / "llamacpp" / "nemotronh-tiny.f32.summary.json").read_text())
    r = gguf.GGUFReader(str(hf_f32("nemotronh-tiny")))
    ours = {t.name: t for t in r.tensors}
    assert set(ours) == set(ref["tensors"])
    for name, want in ref["tensors"].items():
        t = ours[name]
        assert [int(x) for x in t.shape] == want["shape"] and t.tensor_type.name == want["type"], name
        assert hashlib.sha256(t.data.tobytes()).hexdigest() == want["sha256"], name
    arch = "nemotron_h_moe"
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith(("GGUF.", "tokenizer."))}
    for k, want in ref["kv"].items():
        if k in GENERAL_MAY_DIFFER or k[len(arch) + 1:] in DIFFERENT:
            continue
        assert keys.get(k) == want["value"], k
    assert keys[f"{arch}.feed_forward_length"] == [0, 128, 0, 0, 32]
    assert ref["kv"][f"{arch}.feed_forward_length"]["value"] == [0, 0, 0, 0, 32]
    extra = {k[len(arch) + 1:] for k in set(keys) - set(ref["kv"])}
    assert extra == OURS_ONLY, extra


# ---- quantize: llama.cpp's rules ---------------------------------------------------------------

QUANT_REF = FIX / "llamacpp" / "nemotronh-tiny.quant.json"


@pytest.mark.parametrize("qtype", sorted(json.loads(QUANT_REF.read_text())["types"]))
def test_quantize_matches_llama_quantize(hf_f32, tmp_path, qtype):
    """toolkit quantize of our f32 conversion gives every tensor the ggml type and bytes that
    llama-quantize gives llama.cpp's own f32 file (the tensors are equal, see above).  Rows of 64
    are not k-quant blocks, so the k-quant types take llama.cpp's fallbacks here."""
    from toolkit.quantize import quantize_file
    want = json.loads(QUANT_REF.read_text())["types"][qtype]
    out = tmp_path / f"q.{qtype}.gguf"
    quantize_file(str(hf_f32("nemotronh-tiny")), str(out), qtype, n_threads=2)
    got = {t.name: [t.tensor_type.name, hashlib.sha256(np.asarray(t.data).view(np.uint8).tobytes()).hexdigest()[:32]]
           for t in gguf.GGUFReader(str(out)).tensors}
    wrong = {n: (got.get(n, ["missing"])[0], w[0]) for n, w in want.items() if got.get(n) != w}
    assert not wrong and set(got) == set(want), f"{qtype}: (ours, llama-quantize's) {wrong}"
