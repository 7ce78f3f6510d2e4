"""tests/families.py against the fixtures it lists: every fixture has one row and every row a
fixture, the llama.cpp and llama-quantize artefacts a row names exist (and no other), the
tokenizer files equal to tests/fixtures/tokenizer's are links to them, and what a row says of
the model (family, GGUF architecture, layer and FFN kinds, sliding window, MLA, MoE, MTP, the
tensors ``keep_f32`` names) is what converting the checkpoint gives."""
from __future__ import annotations

import fnmatch
import json

import pytest

from families import BY_NAME, CHECK_CAPS, FIX, FIXTURES, MODEL_CAPS

pytestmark = pytest.mark.native


def test_one_row_per_fixture_directory():
    assert sorted(p.name for p in (FIX / "hf").iterdir() if p.is_dir()) == sorted(BY_NAME)
    assert len(BY_NAME) == len(FIXTURES)
    for f in FIXTURES:
        assert f.caps <= MODEL_CAPS | CHECK_CAPS, (f.name, f.caps - MODEL_CAPS - CHECK_CAPS)
        assert (f.hf / "reference.npz").is_file() or not f.caps & {"parity", "two_seq", "quant"}, f.name


def test_identical_tokenizer_files_are_the_shared_ones():
    """tests/fixtures/tokenizer/README.md: a fixture's tokenizer file equal to the shared one is a
    link to it, not a copy."""
    for f in FIXTURES:
        for n in ("tokenizer.json", "tokenizer_config.json"):
            p, shared = f.hf / n, FIX / "tokenizer" / n
            if p.read_bytes() == shared.read_bytes():
                assert p.is_symlink() and p.resolve() == shared.resolve(), f"{p}: link it to {shared}"


def test_llamacpp_artefacts_are_the_rows():
    named = {f"{f.name}.{s}" for f in FIXTURES for s in f.llamacpp}
    assert sorted(p.name for p in (FIX / "llamacpp").iterdir()) == sorted(named)


def test_quant_references_are_the_rows():
    files = {p.name for p in (FIX / "quant").glob("*.json") if ".imatrix." not in p.name}
    for f in FIXTURES:
        assert {n[len(f.name) + 1:-len(".json")] for n in files if n.startswith(f.name + ".")} == set(f.quant_refs), f.name


def test_family_is_the_registry_choice():
    from toolkit.convert.families import REGISTRY
    for f in FIXTURES:
        arch = json.loads((f.hf / "config.json").read_text())["architectures"][0]
        assert REGISTRY[arch].__name__ == f.family, f.name


def test_model_columns_are_the_converted_file(hf_f32):
    from toolkit.arch import HParams
    from toolkit.gguf_io import GGUFFile
    for f in FIXTURES:
        g = GGUFFile(str(hf_f32(f.name)))
        hp = HParams.from_gguf(g)
        assert g.arch == f.arch, f.name
        assert {k.name for k in hp.layer_kinds} == f.layers, f.name
        assert {k.name for k in hp.ffn_kinds} == f.ffn, f.name
        have = {"swa": bool(hp.n_swa), "mla": "MLA" in f.layers, "moe": "MOE" in f.ffn,
                "mtp": bool(g.get(f"{g.arch}.nextn_predict_layers"))}
        assert {c for c, v in have.items() if v} == f.caps & MODEL_CAPS, f.name
        for k in f.keep_f32:      # a pattern that names no tensor would check nothing
            assert any(fnmatch.fnmatchcase(n, k) for n in g.tensors), (f.name, k)
