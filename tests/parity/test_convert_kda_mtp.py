"""GLM-5-Next's and Ling 3's MTP / NextN layer in the converter (toolkit/convert/families/
glm5_next.py, bailingmoe3.py):

- glm5next-mtp-tiny / bailinghybrid-mtp-tiny convert to llama.cpp 0c1e570's files tensor for
  tensor (name, shape, type, sha256 of the data) and key for key (the arch's keys: block_count
  L + 1, nextn_predict_layers 1, head_count_kv padded with 1, GLM's clamps per block):
  tests/fixtures/llamacpp/NAME.f32.summary.json, from ``convert_hf_to_gguf.py --outtype f32``
  with the vocab forced (docs/specs/kda-family.md D10: GLM's special tokens; the gpt-2
  pre-tokenizer as for the other fixtures) and, for Ling 3, config.json read as it is (D1:
  AutoConfig made to fail), summarized by ``tools/make_qwen4exp_fixture.py --summarize``;
- ``--no-mtp`` writes what the fixture without a head converts to (the same tensors, no nextn key);
- a config that says num_nextn_predict_layers 1 over a checkpoint without the layer (HF's own
  save) converts with no head; layers after the main ones that the config does not announce are
  one error naming the file.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import gguf
import pytest

from toolkit.convert import convert
from toolkit.errors import InputError

FIX = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
CASES = {"glm5next-mtp-tiny": ("glm5-next", "glm5next-tiny", 5), "bailinghybrid-mtp-tiny": ("bailingmoe3", "bailinghybrid-tiny", 4)}


def _tensors(path) -> dict[str, tuple]:
    r = gguf.GGUFReader(str(path))
    return {t.name: ([int(x) for x in t.shape], t.tensor_type.name, hashlib.sha256(t.data.tobytes()).hexdigest())
            for t in r.tensors}


def _keys(path, arch: str) -> dict:
    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if k.startswith(arch + ".")}


@pytest.mark.parametrize("name", CASES)
def test_same_tensors_and_keys_as_llamacpp(hf_f32, name):
    arch, _, L = CASES[name]
    ref = json.loads((FIX / "llamacpp" / f"{name}.f32.summary.json").read_text())
    ours = hf_f32(name)
    got = _tensors(ours)
    assert sorted(got) == sorted(ref["tensors"])
    for n, want in ref["tensors"].items():
        assert got[n] == (want["shape"], want["type"], want["sha256"]), n
    keys = _keys(ours, arch)
    want = {k: v["value"] for k, v in ref["kv"].items() if k.startswith(arch + ".")}
    assert keys.keys() == want.keys()
    for k, v in want.items():
        g = keys[k]
        if isinstance(v, float) or (isinstance(v, list) and v and isinstance(v[0], float)):
            assert g == pytest.approx(v, rel=1e-7), k
        else:
            assert g == v, k
    assert keys[arch + ".block_count"] == L + 1 and keys[arch + ".nextn_predict_layers"] == 1
    assert any(n.startswith(f"blk.{L}.nextn.") for n in got)


@pytest.mark.parametrize("name", CASES)
def test_no_mtp_is_the_main_model(hf_f32, tmp_path, name):
    arch, main, L = CASES[name]
    out = tmp_path / "no-mtp.gguf"
    convert(str(FIX / "hf" / name), str(out), "f32", no_mtp=True)
    assert _tensors(out) == _tensors(hf_f32(main))
    k = _keys(out, arch)
    assert arch + ".nextn_predict_layers" not in k and k[arch + ".block_count"] == L


def _copy(name: str, dst: pathlib.Path) -> pathlib.Path:
    shutil.copytree(FIX / "hf" / name, dst)     # links followed: a standalone copy
    return dst


def _set(d: pathlib.Path, **kw) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg.get("text_config", cfg).update(kw)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("name", CASES)
def test_a_config_count_without_the_layer_converts_without_a_head(tmp_path, hf_f32, name):
    arch, main, _ = CASES[name]
    d = _copy(main, tmp_path / "saved")
    _set(d, num_nextn_predict_layers=1)      # what HF's save_pretrained writes: the count, no layer
    out = tmp_path / "saved.gguf"
    convert(str(d), str(out), "f32")
    assert _tensors(out) == _tensors(hf_f32(main))
    assert arch + ".nextn_predict_layers" not in _keys(out, arch)


@pytest.mark.parametrize("name", CASES)
def test_an_unannounced_layer_is_one_error(tmp_path, name):
    d = _copy(name, tmp_path / "unannounced")
    _set(d, num_nextn_predict_layers=0)
    with pytest.raises(InputError, match=r"num_nextn_predict_layers = 0") as e:
        convert(str(d), str(tmp_path / "x.gguf"), "f32")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "x.gguf").exists()
