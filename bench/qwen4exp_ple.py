"""Peak RSS of qwen4exp with a >= 2 GiB PLE n-gram table: convert, a 512-token prompt, quantize.

    python bench/qwen4exp_ple.py [--shards 8] [--rows 2097152] [--row-dim 32] [--keep DIR]

Builds (tools/make_qwen4exp_fixture.py --synthetic-ple --spread) a copy of
tests/fixtures/hf/qwen4exp-tiny whose table is ``shards`` x ``rows`` float32 rows of ``row-dim``
(default 8 x 2^21 x 32 = 2 GiB), the n-gram heads spread over all of it so a prompt's rows land
everywhere; then, each as its own process under /usr/bin/time -v:
  1. toolkit convert (f32),
  2. toolkit run, 512 random tokens + 16 generated,
  3. toolkit quantize Q8_0 --tensor-type per_layer_token_embd=Q4_1 (row bands),
  4. toolkit run on the Q4_1 file.
Before each run the GGUF's page cache is dropped (posix_fadvise DONTNEED on our own file): a
table far larger than RAM is never cached whole, and on a warm cache this kernel maps the cached
neighbours of every faulting page (fault-around, whole large folios) into the process, which
counts in its RSS without reading anything.  Prints wall time and peak RSS of each step.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(args: list[str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout+stderr) of ``python -m toolkit ARGS`` under time -v."""
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "toolkit", *args], capture_output=True, text=True,
                       cwd=REPO)
    if p.returncode:
        sys.exit(f"toolkit {' '.join(args[:2])} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) * 1024
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    wall = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    return wall, rss, p.stdout + p.stderr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rows", type=int, default=1 << 21)
    ap.add_argument("--row-dim", type=int, default=32)
    ap.add_argument("--n-prompt", type=int, default=512)
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one, removed)")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="q4x-ple-")
    os.makedirs(work, exist_ok=True)
    try:
        src = os.path.join(work, "hf")
        subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_qwen4exp_fixture.py"), "--synthetic-ple",
                        os.path.join(REPO, "tests", "fixtures", "hf", "qwen4exp-tiny"), src, str(a.shards), str(a.rows),
                        "--spread", f"--row-dim={a.row_dim}"], check=True)
        table = a.shards * a.rows * a.row_dim * 4
        print(f"PLE table: {table / 2**30:.2f} GiB ({a.shards} shards x {a.rows} rows x {a.row_dim} float32)")
        f32, q = os.path.join(work, "big.f32.gguf"), os.path.join(work, "big.q4_1.gguf")
        ids = ",".join(str(x) for x in np.random.default_rng(5).integers(3, 512, a.n_prompt))
        wall, rss, _ = timed(["convert", src, f32, "--outtype", "f32"])
        print(f"convert f32:            {wall:6.1f} s, peak RSS {rss / 2**20:7.1f} MiB")
        for label, path in (("run f32", f32), ("quantize", None), ("run Q4_1 table", q)):
            if path is None:
                evict(f32)
                wall, rss, out = timed(["quantize", f32, q, "Q8_0", "--tensor-type", "per_layer_token_embd=Q4_1"])
                assert "per_layer_token_embd.weight: row width" not in out, out   # the table took Q4_1
                print(f"quantize (table Q4_1):  {wall:6.1f} s, peak RSS {rss / 2**20:7.1f} MiB, "
                      f"file {os.path.getsize(q) / 2**30:.2f} GiB")
                continue
            evict(path)
            wall, rss, out = timed(["run", "-m", path, "--tokens", ids, "-n", "16", "-c", "1024", "--temp", "0"])
            prompt = re.search(r"prompt: .*?\|", out)
            print(f"{label + ':':23s} {wall:6.1f} s, peak RSS {rss / 2**20:7.1f} MiB  ({prompt.group(0) if prompt else ''})")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
