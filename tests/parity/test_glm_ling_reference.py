"""GLM-5-Next and Ling 3 end to end in float64 numpy (tests/kda_ref_util.py) from llama.cpp's f32
files (which our converter reproduces byte for byte: tests/cli/test_convert_glm5_next.py,
test_convert_bailingmoe3.py) against HF's logits in the fixtures' reference.npz.  It pins down the
layout (k_b / v_b split, ssm_a signs, full-rank gates, head gate, interleaved RoPE, MoE groups,
SwiGLU clamp) and, with ``use_c``, runs this branch's C mHC (tk_mhc_pre_rows / tk_mhc_post_rows
math) and DSA selection (tk_dsa_select) inside the whole GLM model.  The C runtime's own mixers
(KDA, MLA) are not used here."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import kda_ref_util as R

pytestmark = pytest.mark.native
FIX = pathlib.Path(__file__).parent.parent / "fixtures"


def _run(name, **kw):
    z = np.load(FIX / "hf" / name / "reference.npz")
    lo = R.forward(FIX / "llamacpp" / f"{name}.f32.gguf", z["tokens"], **kw)
    ref = z["logits"].astype(np.float64)
    return lo, ref


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("name", ["glm5next-tiny", "bailinghybrid-tiny"])
def test_numpy_forward_matches_hf(name):
    lo, ref = _run(name)
    # measured 1.6e-6 (glm5next-tiny) and 4.6e-6 (bailinghybrid-tiny: HF float32's own floor, docs/specs/kda-family.md §7)
    assert rel(lo, ref) < 1e-5
    assert (lo.argmax(1) == ref.argmax(1)).all()


def test_c_mhc_and_dsa_selection_in_the_model():
    lo, ref = _run("glm5next-tiny", use_c=True)
    assert rel(lo, ref) < 1e-5          # measured 1.64e-6
    assert (lo.argmax(1) == ref.argmax(1)).all()


def test_dense_attention_is_seen_failing_from_position_39():
    """the fixture is sparse from position 39 (B 32 + kp 8 - 1): attending every earlier key
    instead of the selection moves the logits from there on (docs/specs/kda-family.md §2.4)"""
    lo, ref = _run("glm5next-tiny", sel_break=lambda s: np.tril(np.ones_like(s)))
    e = np.linalg.norm(lo - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert e[:39].max() < 1e-5 and e[39:].max() > 1e-2
    assert rel(lo, ref) > 0.1           # measured 0.27
