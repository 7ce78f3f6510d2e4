"""Config variants (issue 43): checkpoints that set a flag no family fixture covers, converted
and run against HF's float32 logits, one row per variant.  A supported flag of the config
audit (docs/config-audit.md) gets its row here, its fixture made by the family's
tools/make_*_fixtures.py.

    fixture               family        flag
    olmohybrid-bias-tiny  OLMo-Hybrid   attention_bias: q/k/v/o_proj biases (blk.i.attn_{q,k,v,output}.bias)
    falconh1-attnbias-tiny  Falcon-H1   attention_bias, with key_multiplier / attention_out_multiplier on k's / o's
    lfm2-convbias-tiny    LFM2          conv_bias: short-conv in_proj / conv / out_proj biases (blk.i.shortconv.*.bias)

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
]


# calibration per variant: the tensors the flag adds, zeroed in a copy of the checkpoint
FLAG_TENSORS = {"attention_bias": r"model\.layers\.\d+\.self_attn\.[qkvo]_proj\.bias",
                "conv_bias": r"model\.layers\.\d+\.conv\.(in_proj|conv|out_proj)\.bias"}


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
