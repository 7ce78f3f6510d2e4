"""The C runtime cross-compiled for aarch64 and run under qemu-user (tests/native/
aarch64_smoke.c): the NEON level is detected; mat-mul of F32/F16/BF16/Q8_0/Q4_K/Q6_K at the
scalar and NEON levels against a double reference and against each other (NEON kernels:
the float types and Q8_0), a token alone giving the bits it gets in a batch; Mamba-2 SSD
against the recurrence.  Skipped where Debian's gcc-aarch64-linux-gnu / qemu-user are not
installed."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

# not `native`: it builds and runs its own (aarch64) library, never toolkit._native, so the
# sanitizer phase of .ci/run would only repeat it

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
NATIVE = os.path.join(os.path.dirname(HERE), "toolkit", "native")


@pytest.mark.skipif(not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")),
                    reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")
def test_aarch64_build_and_smoke(tmp_path):
    objs = []
    for src in sorted(glob.glob(os.path.join(NATIVE, "**", "*.c"), recursive=True)):   # as _build.py
        obj = tmp_path / (os.path.basename(src)[:-2] + ".o")
        subprocess.run(["aarch64-linux-gnu-gcc", "-std=gnu11", "-O2", "-fno-strict-aliasing", "-I", NATIVE, "-c", src,
                        "-o", str(obj)], check=True, capture_output=True)
        objs.append(str(obj))
    exe = tmp_path / "smoke"
    subprocess.run(["aarch64-linux-gnu-gcc", "-std=gnu11", "-O2", "-I", NATIVE, os.path.join(HERE, "native", "aarch64_smoke.c"),
                    *objs, "-o", str(exe), "-static", "-lm", "-lpthread"], check=True, capture_output=True)
    r = subprocess.run(["qemu-aarch64", str(exe)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout + r.stderr
