"""Every refused row of the config audit (docs/config-audit.md, from each family's
``config_keys``) gives the one-line error: a copy of the family's fixture whose config.json
sets the refused key to a value HF accepts and this version does not convert, or a RoPE type
it does not convert, exits 3 with one line naming config.json and the key; nothing is written.

The cases are generated from the declarations, so a refusal declared later is tested here
without a new test."""
from __future__ import annotations

import pytest

from cli_runner import cli as run_cli
from convert_error_util import HF
from toolkit.convert.families import FAMILIES

from families import main_fixture
from hf_edit_util import config_edited

# one shared fixture per family (tests/fixtures/hf), the one refusal cases are made from
FIXTURE = main_fixture()
# what a refused RoPE type is set to: the first of these a family does not convert, with the
# parameters HF needs for it (HF's yarn; dynamic NTK where yarn converts)
REFUSED_ROPE = {"yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
                "dynamic": {"rope_type": "dynamic", "factor": 2.0}}


def refusal_cases() -> list[tuple[str, str, object]]:
    """(family class name, key, value) for every refused key and, for a family with RoPE, a
    RoPE type it does not convert (key ``rope_parameters.rope_type``)."""
    cases = []
    for fam in FAMILIES:
        ck = fam.config_keys
        cases += [(fam.__name__, key, ref.example()) for key, ref in ck.refused.items()]
        if ck.rope_types:
            t = next(t for t in REFUSED_ROPE if t not in ck.rope_types)
            cases.append((fam.__name__, "rope_parameters.rope_type", t))
    return cases


def case_id(fam: str, key: str) -> str:
    return f"{fam}-{key}"


def test_every_family_has_a_fixture():
    assert set(FIXTURE) == {f.__name__ for f in FAMILIES}


def _edited(tmp_path, fixture: str, key: str, value) -> str:
    """tmp copy of ``fixture`` (hf_edit_util.config_edited: the other files linked) with ``key``
    set to ``value`` (into ``text_config`` where the fixture has one); a refused RoPE type is
    REFUSED_ROPE's parameters merged into ``rope_parameters``."""
    def refuse(c: dict) -> None:
        if key == "rope_parameters.rope_type":
            rp = c.get("rope_parameters") or {}
            if any(isinstance(v, dict) for v in rp.values()):    # one per layer type (LFM3): scale the full layers
                rp = {**rp, "full_attention": {**rp["full_attention"], **REFUSED_ROPE[value]}}
            else:
                rp = {**rp, **REFUSED_ROPE[value]}
            c["rope_parameters"] = rp
        else:
            c[key] = value
    return str(config_edited(HF / fixture, tmp_path, refuse))


@pytest.mark.parametrize("fam,key,value", refusal_cases(), ids=[case_id(f, k) for f, k, _ in refusal_cases()])
def test_refused(monkeypatch, capsys, tmp_path, fam, key, value):
    d = _edited(tmp_path, FIXTURE[fam], key, value)
    out = tmp_path / "out.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", d, str(out))
    line = " ".join(err.split())          # rich may wrap the one line on a narrow terminal
    assert rc == 3, err
    assert line.startswith("error:") and "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    shown = key if key != "rope_parameters.rope_type" or fam != "LFM3Family" else "rope_parameters.full_attention.rope_type"
    assert "config.json" in line and f"key '{shown}' = " in line and "is not supported" in line, line
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


# RoPE-scaling settings refused where the type itself converts (toolkit/convert/rope_scaling.py),
# and a type refused because the family's HF code raises for it: (fixture, rope_parameters
# edit, what the one line names)
ROPE_REFUSED = [
    ("falconh1-yarn-tiny", {"truncate": False}, "key 'rope_parameters.truncate' = false is not supported"),
    ("lfm2-yarn-tiny", {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0},
     "key 'rope_parameters.rope_type' = \"llama3\" is not supported"),
    ("olmohybrid-linear-tiny", {"rope_type": "longrope", "long_factor": [1.0] * 8, "short_factor": [1.0] * 8,
                                "original_max_position_embeddings": 16}, "= \"longrope\" is not supported"),
    ("recurrentgemma-tiny", {"rope_type": "linear", "factor": 2.0}, "RecurrentGemmaRotaryEmbedding raises"),
]


@pytest.mark.parametrize("fixture,edit,needle", ROPE_REFUSED, ids=[f"{r[0]}-{next(iter(r[1]))}" for r in ROPE_REFUSED])
def test_rope_scaling_refused(monkeypatch, capsys, tmp_path, fixture, edit, needle):
    d = config_edited(HF / fixture, tmp_path, lambda c: c.update(rope_parameters={**(c.get("rope_parameters") or {}), **edit}))
    out = tmp_path / "out.gguf"
    rc, _, err = run_cli(monkeypatch, capsys, "convert", str(d), str(out))
    line = " ".join(err.split())
    assert rc == 3 and line.startswith("error:") and "Traceback" not in err, err
    assert "config.json" in line and needle in line, line
    assert not out.exists()
