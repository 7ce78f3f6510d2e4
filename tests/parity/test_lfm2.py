"""LFM2 / LFM2-MoE: our converter against llama.cpp 0c1e570's, and our runtime against HF.

References:
- tests/fixtures/llamacpp/{lfm2,lfm2moe}-tiny.f32.gguf: llama.cpp's conversions of the tiny
  fixtures (the reference set, docs/glossary.md), compared with ours tensor by tensor and key by key.  What may
  differ: llama.cpp's model-card ``general.*`` keys (as for the GDN families), and the keys only
  we write: ``{arch}.attention.layer_indices`` and ``tokenizer.huggingface.json``.
- tests/fixtures/llamacpp/NAME.f32.summary.json (tools/make_gdn_fixtures.py --summarize): llama.cpp's
  conversions of the held-back-style fixtures (llama.cpp 0c1e570's convert_hf_to_gguf.py
  --outtype f32, the BPE pre-tokenizer check forced to gpt-2, as for the reference set):
  every tensor's shape, type and sha256 and the non-tokenizer keys.  Ours equal them, plus our
  keys; for lfm2moe-scale-tiny also expert_weights_scale / expert_weights_norm (llama.cpp's
  converter drops routed_scaling_factor and norm_topk_prob).
- tests/fixtures/hf/NAME/reference.npz: HF's float32 logits of 64 tokens and its 16-token greedy
  continuation, for the tiny fixtures and the held-back-style ones of tools/make_lfm2_fixtures.py:
  a 4-tap conv with the original ``full_attn_idxs`` form and an auto-adjusted FFN width
  (lfm2-k4-tiny), a 2-tap conv with a non-zero expert bias and 2 dense lead layers
  (lfm2moe-bias-tiny), routed_scaling_factor 2.5 without renormalisation or expert bias
  (lfm2moe-scale-tiny; llama.cpp's lfm2moe graph ignores both, so only our file runs it right).

Each run: relative L2 of all 64 positions' logits < 1e-5 in one shot and in ubatches of 1 and 7
tokens, greedy continuation identical.  Measured figures are written to the terminal.

The f32 parity, two-sequence and quantize-order checks of the family's fixtures are table rows now
(tests/families.py), run by tests/parity/test_families.py; this module keeps the special ones.
"""
from __future__ import annotations

import hashlib
import json
import pathlib

import gguf
import numpy as np
import pytest

from parity_util import check_against_hf, terminal_report

pytestmark = pytest.mark.native

FIX = pathlib.Path(__file__).parent.parent / "fixtures"

TINY = ["lfm2-tiny", "lfm2moe-tiny"]
HELD = ["lfm2-k4-tiny", "lfm2moe-bias-tiny", "lfm2moe-scale-tiny"]
ARCH = {"lfm2-tiny": "lfm2", "lfm2moe-tiny": "lfm2moe"}
GENERAL_MAY_DIFFER = {"general.name", "general.type", "general.size_label", "general.basename",
                      "general.quantization_version"}


@pytest.fixture(scope="module")
def report(request):
    yield from terminal_report(request, "lfm2 parity")


# ---- convert: the same files as llama.cpp's ------------------------------------------------------

@pytest.mark.parametrize("name", TINY)
def test_same_file_as_llamacpp(fixtures, hf_f32, name):
    ours, ref = gguf.GGUFReader(str(hf_f32(name))), gguf.GGUFReader(str(fixtures / "llamacpp" / f"{name}.f32.gguf"))
    mine = {t.name: t for t in ours.tensors}
    theirs = {t.name: t for t in ref.tensors}
    assert sorted(mine) == sorted(theirs)
    for n, t in theirs.items():
        o = mine[n]
        assert [int(x) for x in o.shape] == [int(x) for x in t.shape], n
        assert o.tensor_type == t.tensor_type == gguf.GGMLQuantizationType.F32, n
        assert o.data.tobytes() == t.data.tobytes(), n
    for key, f in ref.fields.items():
        if key.startswith("GGUF.") or key in GENERAL_MAY_DIFFER:
            continue
        g = ours.fields.get(key)
        assert g is not None, key
        assert [int(x) for x in g.types] == [int(x) for x in f.types], key
        assert g.contents() == f.contents(), key
    arch = ARCH[name]
    extra = {k for k in ours.fields if not k.startswith("GGUF.")} - set(ref.fields)
    assert extra == {f"{arch}.attention.layer_indices", "tokenizer.huggingface.json"}
    hkv = ref.fields[f"{arch}.attention.head_count_kv"].contents()
    assert ours.fields[f"{arch}.attention.layer_indices"].contents() == [i for i, v in enumerate(hkv) if v]


@pytest.mark.parametrize("name", HELD)
def test_same_tensors_and_keys_as_llamacpp_summary(hf_f32, name):
    ref = json.loads((FIX / "llamacpp" / f"{name}.f32.summary.json").read_text())
    ours = gguf.GGUFReader(str(hf_f32(name)))
    got = {t.name: t for t in ours.tensors}
    assert sorted(got) == sorted(ref["tensors"])
    for n, want in ref["tensors"].items():
        t = got[n]
        assert [int(x) for x in t.shape] == want["shape"] and t.tensor_type.name == want["type"], n
        assert hashlib.sha256(t.data.tobytes()).hexdigest() == want["sha256"], n
    for key, want in ref["kv"].items():
        if key in GENERAL_MAY_DIFFER:
            continue
        f = ours.fields.get(key)
        assert f is not None, key
        assert [gguf.GGUFValueType(x).name for x in f.types] == want["type"], key
        v = f.contents()
        assert (list(v) if isinstance(v, list) else v) == want["value"], key
    arch = ref["kv"]["general.architecture"]["value"]
    extra = {k for k in ours.fields if not k.startswith(("GGUF.", "tokenizer."))} - set(ref["kv"])
    routing = {f"{arch}.expert_weights_scale", f"{arch}.expert_weights_norm"} if name == "lfm2moe-scale-tiny" else set()
    assert extra == {f"{arch}.attention.layer_indices"} | routing


def test_routing_keys_only_where_llamacpp_would_run_wrong(hf_f32):
    """expert_weights_scale / expert_weights_norm are written only for a config llama.cpp's
    lfm2moe graph (always renormalised, never scaled) does not run as HF does."""
    def keys(name):
        r = gguf.GGUFReader(str(hf_f32(name)))
        return {k: r.fields[k].contents() for k in ("lfm2moe.expert_weights_scale", "lfm2moe.expert_weights_norm",
                                                    "lfm2moe.leading_dense_block_count") if k in r.fields}
    assert keys("lfm2moe-tiny") == {"lfm2moe.leading_dense_block_count": 1}
    assert keys("lfm2moe-bias-tiny") == {"lfm2moe.leading_dense_block_count": 2}
    assert keys("lfm2moe-scale-tiny") == {"lfm2moe.expert_weights_scale": 2.5, "lfm2moe.expert_weights_norm": False,
                                          "lfm2moe.leading_dense_block_count": 1}
    r = gguf.GGUFReader(str(hf_f32("lfm2moe-scale-tiny")))
    assert not [t.name for t in r.tensors if "exp_probs_b" in t.name]        # use_expert_bias false


def test_held_back_shapes(hf_f32):
    """The held-back fixtures carry what they were made for: the 4-tap kernel, the
    auto-adjusted FFN width, the untied output, the 2-tap kernel."""
    r = gguf.GGUFReader(str(hf_f32("lfm2-k4-tiny")))
    t = {x.name: x for x in r.tensors}
    assert [int(x) for x in t["blk.1.shortconv.conv.weight"].shape] == [4, 64]
    assert r.fields["lfm2.feed_forward_length"].contents() == 160 == int(t["blk.0.ffn_up.weight"].shape[1])
    assert "output.weight" in t and r.fields["lfm2.attention.layer_indices"].contents() == [0, 3]
    r = gguf.GGUFReader(str(hf_f32("lfm2moe-bias-tiny")))
    assert [int(x) for x in {x.name: x for x in r.tensors}["blk.0.shortconv.conv.weight"].shape] == [2, 64]


# ---- run: HF parity ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TINY)
def test_llamacpp_f32_matches_hf(fixtures, report, name):
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    check_against_hf(fixtures / "llamacpp" / f"{name}.f32.gguf", ref, f"{name} (llama.cpp f32)", report)


def test_logits_do_not_depend_on_the_thread_count(fixtures, hf_f32):
    """The conv's channels and the mat-mul rows are split over the threads; each result is
    computed by the same loop whichever thread runs it."""
    from toolkit.runtime import Context, Model
    tok = np.load(fixtures / "hf" / "lfm2moe-bias-tiny" / "reference.npz")["tokens"]
    out = []
    for nt in (1, 3):
        with Model(hf_f32("lfm2moe-bias-tiny"), n_threads=nt) as m, \
                Context(m, n_ctx=128, n_seq_max=2, n_threads=nt) as ctx:
            out.append(ctx.decode_batch([(tok[:40], 0), (tok[10:50], 1)], logits="all"))
    assert all(np.array_equal(a, b) for a, b in zip(*out))
