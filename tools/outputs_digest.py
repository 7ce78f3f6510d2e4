"""Digest of everything a refactor must leave bit-identical: logits, state blobs, converted
and quantized files.

    python tools/outputs_digest.py > before.json      # on the old tree
    python tools/outputs_digest.py > after.json       # on the new tree
    python tools/outputs_digest.py --compare before.json after.json

Logits are hashed (sha256 of the float32 bytes) for every fixture model (the llama.cpp f32
files, our conversions of every HF fixture, the packaged demo model, and quantized copies in
each type we write), at every kernel level this machine runs (``TOOLKIT_CPU``) and at 1, 2
and 3 threads, for: a one-shot 80-token prompt (all logits; SSD over two chunks), the same
prompt in ubatches of 5 (the recurrence instead of SSD), a two-sequence batch, and the state
blobs after the prompt.  Converted and quantized files (with and without an imatrix) are
hashed whole.  Run it on the old tree too (``cd OLD && python tools/outputs_digest.py``, with
that tree's compiled library); it imports the tree it sits in.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
QUANT_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",
               "IQ4_NL", "IQ4_XS"]


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


def file_sha(p: Path) -> str:
    return sha(p.read_bytes())


def make_files(tmp: Path) -> tuple[dict, list[Path]]:
    """Convert every HF fixture and quantize bamba-small in every type; return hashes + models."""
    out: dict[str, str] = {}
    models = sorted(p for p in (FIX / "llamacpp").glob("*.gguf"))
    models.append(ROOT / "toolkit" / "data" / "default.gguf")
    tk = [sys.executable, "-m", "toolkit"]
    for hf in sorted((FIX / "hf").iterdir()):
        for ot in ("f32", "bf16", "q8_0"):
            dst = tmp / f"{hf.name}.{ot}.gguf"
            subprocess.run(tk + ["convert", str(hf), str(dst), "--outtype", ot], check=True, capture_output=True, cwd=ROOT)
            out[f"convert/{hf.name}/{ot}"] = file_sha(dst)
            if ot == "f32" and hf.name in ("jamba-tiny", "granitehybrid-moe-tiny"):
                models.append(dst)
    src = FIX / "llamacpp" / "bamba-small.f32.gguf"
    for qt in QUANT_TYPES:
        dst = tmp / f"bamba-small.{qt}.gguf"
        subprocess.run(tk + ["quantize", str(src), str(dst), qt], check=True, capture_output=True, cwd=ROOT)
        out[f"quantize/bamba-small/{qt}"] = file_sha(dst)
        models.append(dst)
    # the imatrix's path is written into the file (quantize.imatrix.file, as llama-quantize
    # does): the same relative path in every tree
    shutil.copy(FIX / "quant" / "bamba-small.imatrix.gguf", tmp / "imatrix.gguf")
    for qt in ("Q4_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"):
        dst = tmp / f"bamba-small.imatrix.{qt}.gguf"
        subprocess.run(tk + ["quantize", str(src), str(dst), qt, "--imatrix", "imatrix.gguf"], check=True,
                       capture_output=True, cwd=tmp, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        out[f"quantize/bamba-small/imatrix/{qt}"] = file_sha(dst)
    for odd in sorted((FIX / "quant").glob("oddwidth-*.f32.gguf")):
        for qt in ("Q4_K_M", "IQ4_XS", "Q5_1"):
            dst = tmp / f"{odd.stem}.{qt}.gguf"
            subprocess.run(tk + ["quantize", str(odd), str(dst), qt], check=True, capture_output=True, cwd=ROOT)
            out[f"quantize/{odd.stem}/{qt}"] = file_sha(dst)
    return out, models


def worker(models: list[str]) -> dict:
    """In a child with TOOLKIT_CPU set: hash logits and state blobs of each model."""
    import numpy as np

    from toolkit.runtime import Context, Model

    res = {}
    for path in models:
        name = Path(path).name
        try:
            m = Model(path)
        except Exception as e:  # a fixture the runtime refuses (e.g. qwen4exp): record that
            res[name] = f"load error: {type(e).__name__}"
            continue
        V = m.n_vocab
        rng = np.random.default_rng(0)
        prompt = rng.integers(0, V, 80).astype(np.int32)   # > 64: the SSD passes state between chunks
        for nt in (1, 2, 3):
            c = Context(m, n_ctx=256, n_seq_max=2, n_ubatch=512, n_threads=nt)
            a = c.decode(prompt, 0, logits="all")
            res[f"{name}/t{nt}/oneshot"] = sha(a.tobytes())
            res[f"{name}/t{nt}/state"] = sha(c.state_bytes())
            res[f"{name}/t{nt}/state_seq0"] = sha(c.state_bytes(0))
            g = c.decode(prompt[:3], 0, logits="all")
            res[f"{name}/t{nt}/continue"] = sha(g.tobytes())
            c.close()
            c = Context(m, n_ctx=256, n_seq_max=2, n_ubatch=5, n_threads=nt)
            b = c.decode(prompt, 0, logits="all")
            res[f"{name}/t{nt}/ubatch5"] = sha(b.tobytes())
            c.close()
            c = Context(m, n_ctx=256, n_seq_max=2, n_ubatch=512, n_threads=nt)
            r = c.decode_batch([(prompt[:17], 0), (prompt[5:22], 1)], logits="all")
            res[f"{name}/t{nt}/twoseq"] = sha(b"".join(x.tobytes() for x in r))
            c.close()
        m.close()
    return res


def levels() -> list[str]:
    """Every kernel level this machine runs: scalar and each x86 level up to the detected one
    (or NEON on aarch64).  Reads the binding of the tree it runs in (old trees: runtime._lib)."""
    code = ("try:\n from toolkit.binding import lib\nexcept ImportError:\n from toolkit.runtime._lib import lib\n"
            "print(lib.tk_cpu_detected())")
    best = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout)
    if best == 3:
        return ["scalar", "neon"]
    return ["scalar", "avx2", "avx512"][:best + 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--worker", nargs="*")
    a = ap.parse_args()
    if a.worker is not None:
        json.dump(worker(a.worker), sys.stdout)
        return 0
    if a.compare:
        x, y = (json.loads(Path(p).read_text()) for p in a.compare)
        bad = [k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
        for k in bad:
            print(f"DIFF {k}: {x.get(k)} -> {y.get(k)}")
        print(f"{len(x)} before, {len(y)} after, {len(bad)} differ")
        return 1 if bad else 0
    with tempfile.TemporaryDirectory() as td:
        out, models = make_files(Path(td))
        for lv in levels():
            env = dict(os.environ, TOOLKIT_CPU=lv, PYTHONPATH=str(ROOT))
            r = subprocess.run([sys.executable, __file__, "--worker", *map(str, models)], env=env, check=True,
                               capture_output=True, text=True)
            for k, v in json.loads(r.stdout).items():
                out[f"logits/{lv}/{k}"] = v
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
