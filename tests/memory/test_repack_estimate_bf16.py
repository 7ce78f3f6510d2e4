"""`toolkit info --memory`'s repacked bytes (runtime/memory.py repack_estimate) against what
--repack re-lays at load (model.c repack_weights, Model.repack_info) on BF16 files, on
Zamba's shared blocks, and on files with tensors the runtime does not bind.

BF16 is re-laid from K even up (repack.c tk_repack_matrix_bytes), so small matrices that a
layer reads as a dequantized fp32 copy (model.c tk_bind_vec: RG-LRU's per-head gate blocks
rglru_gate_{i,a}, Qwen4-exp's ple_conv1d) became candidates by shape; they are never re-laid.
Measured before the fix: recurrentgemma-tiny estimate 32 tensors / 319488 bytes against 26 /
307200 re-laid; qwen4exp-ple2-tiny 76 / 277504 against 74 / 275456."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.convert import convert

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
CHECK = """
import sys, json
from toolkit.runtime import Model, RuntimeOptions
from toolkit.runtime.memory import repack_estimate
o = RuntimeOptions.from_env()   # TOOLKIT_REPACK, as the CLI reads it
m = Model(sys.argv[1], options=o)
e = repack_estimate(m, mode=o.repack)
print(json.dumps({"info": [m.repack_info["n_tensors"], m.repack_info["bytes"]], "estimate": [e["n_tensors"], e["bytes"]]}))
"""


CASES = [(n, "bf16") for n in ("recurrentgemma-tiny", "recurrentgemma-odd-tiny", "qwen4exp-ple2-tiny", "qwen4exp-tiny")]
# Zamba's shared blocks are bound once per layer that runs them: re-laid once (model.c
# repack_twin); before, each binding was re-laid again (zamba-tiny Q8_0: 32 tensors re-laid
# against the 25 the file has).
CASES += [("zamba-tiny", "q8_0"), ("zamba2-tiny", "q8_0")]
# The estimate is the load's own rule (toolkit.h tk_model_repack_plan), not a restatement over
# the file's tensor names: the file's MTP block (qwen35-mtp, qwen3next-mtp: not loaded without
# --mtp) and layers the runtime does not bind (qwen35moe-vl's) are not re-laid.  The name rule of
# runtime/memory.py counted them: qwen35-mtp-tiny Q8_0 estimate 40 tensors / 311040 bytes against
# 32 / 241920 re-laid, qwen35moe-vl-tiny 49 / 269568 against 39 / 216576.  With --mtp the block's
# model re-lays its own (MTP_CHECK).
CASES += [("qwen35-mtp-tiny", "q8_0"), ("qwen3next-mtp-tiny", "q8_0"), ("qwen35moe-vl-tiny", "q8_0"),
          ("qwen35-mtp-tiny", "bf16")]
MTP_CHECK = """
import sys, json
from toolkit.runtime import Model, RuntimeOptions
from toolkit.runtime.memory import repack_estimate
from toolkit.runtime.mtp import MtpModel
o = RuntimeOptions.from_env()
m = Model(sys.argv[1], options=o)
mm = MtpModel(m)
e = repack_estimate(mm, mode=o.repack)
print(json.dumps({"info": [mm.repack_info["n_tensors"], mm.repack_info["bytes"]], "estimate": [e["n_tensors"], e["bytes"]]}))
"""


@pytest.mark.parametrize("name,outtype", CASES)
def test_repack_estimate_matches_load(name, outtype, tmp_path):
    from toolkit.binding import lib
    if lib.tk_cpu_detected() not in (1, 2):
        pytest.skip("repacking at load needs the avx2 or avx512 level")
    out = tmp_path / f"{name}.{outtype}.gguf"
    convert(str(HF / name), str(out), outtype=outtype)
    r = subprocess.run([sys.executable, "-c", CHECK, str(out)], capture_output=True, text=True,
                       env=dict(os.environ, TOOLKIT_CPU="avx2", TOOLKIT_REPACK="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["info"][0] > 0
    assert d["estimate"] == d["info"], d
    if "mtp" in name:          # --mtp: the block's model
        r = subprocess.run([sys.executable, "-c", MTP_CHECK, str(out)], capture_output=True, text=True,
                           env=dict(os.environ, TOOLKIT_CPU="avx2", TOOLKIT_REPACK="1"))
        assert r.returncode == 0, r.stderr[-2000:]
        d = json.loads(r.stdout.strip().splitlines()[-1])
        assert d["info"][0] > 0 and d["estimate"] == d["info"], d
