"""The config audit (issue 43, "never ignore a key"): for each family, the HF configuration
attributes it reads, declares irrelevant or refuses unless at a converted value
(``Family.config_keys``, toolkit/convert/config_keys.py) cover every attribute its HF classes
define in transformers (``tests/fixtures/hf_config_attrs.json``, tools/hf_config_attrs.py).
A new attribute in a future transformers fails here instead of being dropped."""
from __future__ import annotations

import json
import pathlib

import pytest

from toolkit.convert.config_keys import same
from toolkit.convert.families import FAMILIES

ATTRS = json.loads((pathlib.Path(__file__).parent.parent / "fixtures" / "hf_config_attrs.json").read_text())


def test_the_recorded_attributes_are_transformers_5_24():
    assert ATTRS["transformers"] == "5.24.0"
    assert len(ATTRS["classes"]) == 28


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.__name__)
def test_every_attribute_of_the_hf_classes_is_read_irrelevant_or_refused(fam):
    ck = fam.config_keys
    assert ck is not None and fam.hf_configs, f"{fam.__name__} declares no config_keys / hf_configs"
    missing = []
    for cls in fam.hf_configs:
        missing += [f"{cls}.{a}" for a in ATTRS["classes"][cls]["attrs"] if ck.status(a) == "undeclared"]
    missing += [f"PreTrainedConfig.{a}" for a in ATTRS["base"] if ck.status(a) == "undeclared"]
    assert not missing, f"{fam.__name__}: neither read, irrelevant nor refused: {missing}"


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.__name__)
def test_the_declarations_are_disjoint_and_name_real_attributes(fam):
    ck = fam.config_keys
    assert not ck.read & set(ck.refused), sorted(ck.read & set(ck.refused))
    assert not set(ck.irrelevant) & (ck.read | set(ck.refused))
    known = set(ATTRS["base"]) | {a for c in fam.hf_configs for a in ATTRS["classes"][c]["attrs"]}
    from toolkit.convert.config_keys import COMMON_IRRELEVANT
    # (read may name more: keys HF derives in __post_init__ and older spellings the converter takes)
    stale = sorted((set(ck.refused) | set(ck.irrelevant)) - known - set(COMMON_IRRELEVANT))
    assert not stale, f"{fam.__name__} declares keys its HF classes do not have: {stale}"


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.__name__)
def test_a_refused_key_accepts_hf_s_default(fam):
    """An unedited config converts: HF's default is among each refused key's accepted values."""
    for cls in fam.hf_configs:
        for key, ref in fam.config_keys.refused.items():
            a = ATTRS["classes"][cls]["attrs"].get(key)
            if a is not None and a["default"] is not None:
                assert any(same(a["default"], v) for v in ref.accepts), (cls, key, a["default"], ref.accepts)
            assert not any(same(ref.example(), v) for v in ref.accepts), (key, ref.example())


HF_DIR = pathlib.Path(__file__).parent.parent / "fixtures" / "hf"


def _untied_fixtures():
    """(fixture, family) for each fixture whose checkpoint saves lm_head.weight, of a family
    that reads tie_word_embeddings."""
    from toolkit.convert.hfdir import HFDir
    out = []
    for f in sorted(p.name for p in HF_DIR.iterdir() if p.is_dir()):
        hf = HFDir(HF_DIR / f)
        fam = next(fam for fam in FAMILIES if hf.arch_name in fam.hf_archs)
        if "tie_word_embeddings" in fam.config_keys.read and "lm_head.weight" in hf.tensors:
            out.append((f, fam))
    return out


UNTIED_FIXTURES = _untied_fixtures()


@pytest.mark.parametrize("fixture,fam", UNTIED_FIXTURES, ids=[f for f, _ in UNTIED_FIXTURES])
def test_absent_tie_word_embeddings_is_hf_s_default(tmp_path, fixture, fam):
    """config.json without tie_word_embeddings: the output is tied exactly when HF's class
    default ties it (Mamba2Config and GraniteMoeHybridConfig default to false: before, an
    absent key tied them and a saved lm_head was dropped)."""
    from hf_edit_util import config_edited
    from toolkit.convert import make_plan
    d = config_edited(HF_DIR / fixture, tmp_path, lambda c: c.pop("tie_word_embeddings", None), root=True)
    tied = {ATTRS["classes"][c]["attrs"]["tie_word_embeddings"]["default"] for c in fam.hf_configs
            if "tie_word_embeddings" in ATTRS["classes"][c]["attrs"]}
    assert len(tied) == 1
    plan = make_plan(str(d))
    assert ("output.weight" in {t.name for t in plan.tensors}) == (not tied.pop())


# declared read, but looked up only where no fixture goes (the reason each is still honoured)
READ_ELSEWHERE = {
    "Qwen35MoeFamily": {"tie_word_embeddings"},   # looked up only when the checkpoint has no lm_head.weight
    "ZambaFamily": {"attn_layer_offset", "attn_layer_period"},   # only when layers_block_type is absent
    # only when linear_attn_config is absent (it wins, as configuration_glm5_next.py has it)
    "Glm5NextFamily": {"linear_conv_kernel_dim", "linear_head_dim", "linear_lower_bound", "linear_num_heads"},
    "BailingMoe3Family": {"num_mtp_layers"},       # the fixtures spell it num_nextn_predict_layers
}


def test_every_key_declared_read_is_looked_up(monkeypatch):
    """Converting every fixture (the plan: headers only) looks up every key its family declares
    read, so a declaration cannot claim a key the converter ignores (READ_ELSEWHERE aside)."""
    import toolkit.convert.hfdir as hfdir
    from toolkit.convert import make_plan
    from toolkit.convert.hfdir import HFDir

    seen: set[str] = set()

    class Looked(dict):
        def __getitem__(self, k):
            seen.add(k)
            return dict.__getitem__(self, k)

        def get(self, k, default=None):
            seen.add(k)
            return dict.get(self, k, default)

        def __contains__(self, k):
            seen.add(k)
            return dict.__contains__(self, k)

    init = hfdir.Config.__init__
    monkeypatch.setattr(hfdir.Config, "__init__", lambda self, path, d: init(self, path, Looked(d) if isinstance(d, dict) else d))
    by_family: dict[str, set[str]] = {}
    for f in sorted(p.name for p in HF_DIR.iterdir() if p.is_dir()):
        seen.clear()
        make_plan(str(HF_DIR / f))
        arch = HFDir(HF_DIR / f).arch_name
        fam = next(fam for fam in FAMILIES if arch in fam.hf_archs)
        by_family.setdefault(fam.__name__, set()).update(seen)
    unread = {fam.__name__: sorted(fam.config_keys.read - by_family[fam.__name__] - READ_ELSEWHERE.get(fam.__name__, set()))
              for fam in FAMILIES}
    assert not any(unread.values()), {k: v for k, v in unread.items() if v}
