"""Config variants (issue 43): checkpoints that set a flag no family fixture covers, converted
and run against HF's float32 logits, one row per variant.  A supported flag of the config
audit (docs/config-audit.md) gets its row here, its fixture made by the family's
tools/make_*_fixtures.py.

    fixture               family        flag
    olmohybrid-bias-tiny  OLMo-Hybrid   attention_bias: q/k/v/o_proj biases (blk.i.attn_{q,k,v,output}.bias)
    falconh1-attnbias-tiny  Falcon-H1   attention_bias, with key_multiplier / attention_out_multiplier on k's / o's
    lfm2-convbias-tiny    LFM2          conv_bias: short-conv in_proj / conv / out_proj biases (blk.i.shortconv.*.bias)

Made without torch by tools/make_config_variant_fixtures.py, reference.npz from the float64 NumPy
forward of tests/mamba_ref.py (checked against each base fixture's HF logits below):

    bamba-bias-tiny          Bamba         attention_bias, mlp_bias (blk.i.ffn_{gate,up,down}.bias), mamba_proj_bias
                                           (blk.i.ssm_{in,out}.bias, ours), mamba_conv_bias false, tied embeddings
    granitehybrid-bias-tiny  Granite 4.0-H attention_bias (q / k biases in NORM RoPE order), mamba_proj_bias,
                                           mamba_conv_bias false, RoPE, multipliers
    mamba2-bias-tiny         Mamba-2       use_bias (in_proj / out_proj), use_conv_bias false, untied lm_head
    mamba-bias-tiny          Mamba         use_bias (blk.i.ssm_{in,out}.bias, ours), use_conv_bias false, untied lm_head
    falconmamba-bias-tiny    FalconMamba   use_bias, use_conv_bias false
    jamba-bias-tiny          Jamba         mamba_proj_bias (blk.i.ssm_{in,out}.bias, ours), mamba_conv_bias false
    nemotronh-bias-tiny      Nemotron-H    use_bias, use_conv_bias false, mlp_bias (blk.i.ffn_{up,down}.bias)
    laramini-var-tiny        Lara-Mini     attention_bias (before the q / k norms), norm_topk_prob false
                                           (expert_weights_norm = false, llama.cpp's key), untied lm_head
                                           (reference: tests/lara_ref.py)

The f32 parity of the variant fixtures is a table row now (tests/families.py),
run by tests/parity/test_families.py.
"""
from __future__ import annotations

import numpy as np
import pytest


pytestmark = pytest.mark.native

# (fixture, what it flips, bound on the relative L2 error of the logits, ids never chosen greedily)
VARIANTS = [
    ("olmohybrid-bias-tiny", "attention_bias", 1e-5, (0,)),
    ("falconh1-attnbias-tiny", "attention_bias", 1e-5, ()),
    ("lfm2-convbias-tiny", "conv_bias", 1e-5, ()),
    ("bamba-bias-tiny", "biases", 1e-5, (2,)),
    ("granitehybrid-bias-tiny", "biases", 1e-5, (2,)),
    ("mamba2-bias-tiny", "biases", 1e-5, (2,)),
    ("mamba-bias-tiny", "biases", 1e-5, (0,)),
    ("falconmamba-bias-tiny", "biases", 1e-5, (0,)),
    ("laramini-var-tiny", "attention_bias", 1e-5, (0,)),
    ("nemotronh-bias-tiny", "biases", 1e-5, (0,)),
    ("jamba-bias-tiny", "biases", 1e-5, (2,)),
]

# the variants whose reference is tests/mamba_ref.py's, and the HF fixture it is checked against
NUMPY_REFERENCE = {"bamba-bias-tiny": "bamba-tiny", "granitehybrid-bias-tiny": "granitehybrid-moe-tiny",
                   "mamba2-bias-tiny": "mamba2-tiny", "mamba-bias-tiny": "mamba-tiny",
                   "falconmamba-bias-tiny": "falconmamba-tiny", "laramini-var-tiny": "laramini-tiny",
                   "nemotronh-bias-tiny": "nemotronh-dense-tiny", "jamba-bias-tiny": "jamba-tiny"}


@pytest.mark.parametrize("name", sorted(NUMPY_REFERENCE))
def test_numpy_reference_matches_hf(fixtures, name):
    """The variant's reference is only as good as its NumPy forward: on the base fixture it
    gives HF's logits and greedy tokens."""
    import json

    import mamba_ref
    from parity_util import rel_l2
    base = fixtures / "hf" / NUMPY_REFERENCE[name]
    ref = np.load(base / "reference.npz")
    # measured 1.7e-7 .. 5.0e-7 (the Mamba kinds), 1.1e-6 (jamba-tiny), 2.1e-6 (laramini-tiny: HF float32's own floor)
    assert rel_l2(mamba_ref.logits(base, ref["tokens"]), ref["logits"]) < 5e-6
    eos = json.loads((base / "config.json").read_text())["eos_token_id"]
    assert mamba_ref.greedy(base, ref["tokens"], len(ref["greedy"]), (eos,)) == ref["greedy"].tolist()


# calibration per variant: the tensors the flag adds, zeroed in a copy of the checkpoint
FLAG_TENSORS = {"attention_bias": r"model\.layers\.\d+\.self_attn\.[qkvo]_proj\.bias",
                "conv_bias": r"model\.layers\.\d+\.conv\.(in_proj|conv|out_proj)\.bias",
                "biases": r"(model|backbone)\.layers\.\d+\.(self_attn|feed_forward|mamba|mixer)\.\w+_proj\.bias"}


@pytest.mark.parametrize("name,flag,bound,suppress", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_the_flag_matters(fixtures, tmp_path, name, flag, bound, suppress):
    """Calibration: with the flag's tensors zeroed the run is far from HF, so the rows above
    would fail on a runtime that dropped them."""
    import re
    import shutil

    from safetensors.numpy import load_file, save_file

    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    d = tmp_path / name
    shutil.copytree(fixtures / "hf" / name, d)
    zeroed = 0
    for f in sorted(d.glob("*.safetensors")):
        t = load_file(str(f))
        hit = [n for n in t if re.fullmatch(FLAG_TENSORS[flag], n)]
        for n in hit:
            t[n] = np.zeros_like(t[n])
        if hit:
            save_file(t, str(f), metadata={"format": "pt"})
            zeroed += len(hit)
    assert zeroed
    convert(str(d), str(tmp_path / "z.gguf"), "f32")
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "z.gguf", ref["tokens"]), ref["logits"]) > 100 * bound


@pytest.mark.parametrize("name,key,value", [("laramini-var-tiny", "norm_topk_prob", True)])
def test_the_switch_matters(fixtures, tmp_path, name, key, value):
    """Calibration for a switch that adds no tensor: the same checkpoint converted with the switch
    at its default is far from the reference, so the row above would fail on a converter or
    runtime that dropped it (norm_topk_prob false -> expert_weights_norm = false -> moe.renorm 0)."""
    import json
    import shutil

    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    d = tmp_path / name
    shutil.copytree(fixtures / "hf" / name, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg[key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    convert(str(d), str(tmp_path / "s.gguf"), "f32")
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    assert rel_l2(logits_of(tmp_path / "s.gguf", ref["tokens"]), ref["logits"]) > 1e-3


@pytest.mark.parametrize("name", ["qwen3next-tiny", "qwen4exp-tiny"])
def test_norm_topk_prob_false_self_consistency(fixtures, tmp_path, name):
    """norm_topk_prob false on the families with no float reference here (a self-consistency
    check, not parity): the file says expert_weights_norm = false (llama.cpp's key), the loaded
    model routes without renormalising (moe_renorm 0; the C path laramini-var-tiny's row checks
    against its reference), and the logits leave HF's renormalised ones, which the default
    conversion still matches."""
    import json
    import shutil

    import gguf

    from parity_util import logits_of, rel_l2
    from toolkit.convert import convert
    from toolkit.runtime import Model
    d = tmp_path / name
    shutil.copytree(fixtures / "hf" / name, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["norm_topk_prob"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    convert(str(d), str(tmp_path / "n.gguf"), "f32")
    r = gguf.GGUFReader(str(tmp_path / "n.gguf"))
    key = next(k for k in r.fields if k.endswith(".expert_weights_norm"))
    assert not bool(r.fields[key].parts[r.fields[key].data[0]][0])
    with Model(tmp_path / "n.gguf") as m:
        assert m.hparams.moe_renorm is False
    ref = np.load(fixtures / "hf" / name / "reference.npz")
    convert(str(fixtures / "hf" / name), str(tmp_path / "d.gguf"), "f32")
    assert rel_l2(logits_of(tmp_path / "d.gguf", ref["tokens"]), ref["logits"]) < 1e-5
    assert rel_l2(logits_of(tmp_path / "n.gguf", ref["tokens"]), ref["logits"]) > 1e-3
