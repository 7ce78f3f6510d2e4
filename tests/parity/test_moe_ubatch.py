"""MoE prompts run as one GEMM per expert over the ubatch's tokens (ffn_moe.c): a token's logits
must not depend on its ubatch.  The f32 fixtures are checked in the family parity tests; here
the quantized files (where the prompt tiles, not the one-token kernels, run the experts), with
top-3 routing (where the order of accumulation matters), at every kernel level this machine has."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toolkit.quantize import quantize_file

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CHECK = """
import sys, numpy as np
from toolkit.runtime import Context, Model
m = Model(sys.argv[1])
p = np.random.default_rng(0).integers(0, m.n_vocab, 40).astype(np.int32)
outs = []
for ub in (512, 1, 7):
    with Context(m, n_ctx=128, n_seq_max=2, n_ubatch=ub, n_threads=2) as c:
        outs.append(c.decode(p, 0, logits="all"))
with Context(m, n_ctx=128, n_seq_max=2, n_ubatch=512, n_threads=2) as c:
    r = c.decode_batch([(p[:17], 0), (p[5:22], 1)], logits="all")
assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2]), "ubatch"
assert np.array_equal(r[0], outs[0][:17]), "two sequences"
print("ok")
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moeq")
    src = tmp / "lfm2moe-bias-tiny.f32.gguf"
    subprocess.run([sys.executable, "-m", "toolkit", "convert", str(FIX / "hf" / "lfm2moe-bias-tiny"), str(src),
                    "--outtype", "f32"], check=True, capture_output=True)
    out = [src]
    for qt in ("Q8_0", "Q4_K_M"):
        for s in (src, FIX / "llamacpp" / "qwen35moe-tiny.f32.gguf"):
            dst = tmp / f"{s.name.split('.')[0]}.{qt}.gguf"
            quantize_file(str(s), str(dst), qt, n_threads=2)
            out.append(dst)
    return out


@pytest.mark.parametrize("level", ["scalar", "avx2", "avx512"])
def test_moe_logits_do_not_depend_on_the_ubatch(files, level):
    from toolkit.binding import lib
    best = lib.tk_cpu_detected()
    if best == 3 or ["scalar", "avx2", "avx512"].index(level) > best:
        pytest.skip(f"{level} not available here")
    for f in files:
        r = subprocess.run([sys.executable, "-c", CHECK, str(f)], capture_output=True, text=True,
                           env=dict(os.environ, TOOLKIT_CPU=level))
        assert r.returncode == 0 and r.stdout.strip() == "ok", (f.name, level, r.stderr[-2000:])
