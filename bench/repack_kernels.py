#!/usr/bin/env python3
"""The repacked GEMM kernels alone (quants/repack.h): one mat-mul of M x K weights by N tokens on
one thread, through tk_mat_mul_repacked (the re-laying, timed with 0 tokens, subtracted), the
best of R; GMAC/s and, against the peak of the instruction each kernel is built on (measured
here by a register-bound loop of independent instructions, x86/peak_loops below), its share.

    python bench/repack_kernels.py [--types Q8_0,Q4_K,Q6_K,BF16] [-K 1024] [-M 3584] [-N 512] [-r 5]

Variants run where the machine has them: avx512 (BF16 both as FMA and as VDPBF16PS), avx2 with
AVX-VNNI, plain avx2.  The peaks are per core at whatever clock the loop runs, so the share is
free of the clock; a core shared with other jobs lowers both.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

PEAK_C = r"""
#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define N 100000000L
#define LOOP(T, INIT, OP, TGT, NAME, MACS)                                                   \
  TGT static double NAME(void) {                                                         \
    T a[12]; for (int i = 0; i < 12; i++) a[i] = INIT;                                   \
    T b = INIT, c = INIT;                                                                \
    double t0 = now();                                                                   \
    for (long n = 0; n < N / 12; n++) {                                                  \
      _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) a[i] = OP;                   \
      __asm__ volatile("" : "+v"(b), "+v"(c));                                           \
    }                                                                                    \
    double t = now() - t0;                                                               \
    for (int i = 0; i < 12; i++) __asm__ volatile("" : : "v"(a[i]));                     \
    return (double) (N / 12 * 12) * MACS / t / 1e9;                                      \
  }
LOOP(__m512, _mm512_set1_ps(1e-3f), _mm512_fmadd_ps(a[i], b, c), __attribute__((target("avx512f"))), fma512, 16)
LOOP(__m512, _mm512_set1_ps(1e-3f), _mm512_dpbf16_ps(a[i], (__m512bh) b, (__m512bh) c), __attribute__((target("avx512f,avx512bf16"))), dpbf16, 32)
LOOP(__m512i, _mm512_set1_epi8(1), _mm512_dpbusd_epi32(a[i], b, c), __attribute__((target("avx512f,avx512vnni"))), dpbusd512, 64)
LOOP(__m256i, _mm256_set1_epi8(1), _mm256_dpbusd_avx_epi32(a[i], b, c), __attribute__((target("avx2,avxvnni"))), dpbusd256, 32)
LOOP(__m256i, _mm256_set1_epi8(1), _mm256_add_epi16(a[i], _mm256_maddubs_epi16(a[i], c)), __attribute__((target("avx2"))), maddubs256, 32)
LOOP(__m256, _mm256_set1_ps(1e-3f), _mm256_fmadd_ps(a[i], b, c), __attribute__((target("avx2,fma"))), fma256, 8)
int main(int argc, char ** argv) {
  const char * w = argc > 1 ? argv[1] : "";
  double g = 0;
  if (!strcmp(w, "F512")) g = fma512();
  else if (!strcmp(w, "B")) g = dpbf16();
  else if (!strcmp(w, "V5")) g = dpbusd512();
  else if (!strcmp(w, "V2")) g = dpbusd256();
  else if (!strcmp(w, "M")) g = maddubs256();
  else if (!strcmp(w, "F256")) g = fma256();
  else return 2;
  printf("%.3f\n", g);
  return 0;
}
"""


def peaks() -> dict[str, float]:
    """GMAC/s of one core on each instruction (0 where it cannot be built or run)."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "p.c"), os.path.join(d, "p")
        with open(src, "w") as fh:
            fh.write(PEAK_C)
        if subprocess.run(["gcc", "-O2", "-o", exe, src], capture_output=True).returncode != 0:
            return out
        for key in ("F512", "B", "V5", "V2", "M", "F256"):
            r = subprocess.run([exe, key], capture_output=True, text=True)
            out[key] = float(r.stdout) if r.returncode == 0 else 0.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="Q8_0,Q4_K,Q6_K,BF16")
    ap.add_argument("-K", type=int, default=1024)
    ap.add_argument("-M", type=int, default=3584)
    ap.add_argument("-N", type=int, default=512)
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()

    import gguf

    import qref
    from toolkit.binding import ffi, lib
    T = gguf.GGMLQuantizationType
    pk = peaks()
    rng = np.random.default_rng(0)
    best = lib.tk_cpu_detected()
    variants = []   # (name, level, avxvnni, bf16dot)
    if best >= lib.TK_CPU_AVX512:
        variants.append(("avx512", lib.TK_CPU_AVX512, 0, 0))
        if lib.tk_cpu_has_avx512bf16():
            variants.append(("avx512 VDPBF16PS", lib.TK_CPU_AVX512, 0, 1))
    if best >= lib.TK_CPU_AVX2:
        if lib.tk_cpu_has_avxvnni():
            variants.append(("avx2 + AVX-VNNI", lib.TK_CPU_AVX2, 1, 0))
        variants.append(("avx2", lib.TK_CPU_AVX2, 0, 0))
    print(f"one thread, {a.M} x {a.K} weights x {a.N} tokens, best of {a.r}; peaks (GMAC/s per core): "
          + ", ".join(f"{k} {v:.1f}" for k, v in pk.items()))
    print(f"{'kernel':<20} {'type':<6} {'GMAC/s':>8} {'peak':>8} {'share':>6}  instruction")
    for qn in a.types.split(","):
        qt = getattr(T, qn)
        raw = qref.quantize_rows(qt, rng.standard_normal((a.M, a.K)).astype(np.float32))
        x = rng.standard_normal((a.N, a.K)).astype(np.float32)
        y = np.empty((a.N, a.M), np.float32)
        for name, level, vnni, dot in variants:
            if "VDPBF16PS" in name and qt != T.BF16:
                continue
            lib.tk_cpu_set_level(level)
            lib.tk_cpu_set_avxvnni(vnni)
            lib.tk_cpu_set_bf16dot(dot)
            if not lib.tk_repack_fast(int(qt), level):
                print(f"{name:<20} {qn:<6} {'(not re-laid at this level)':>24}")
                continue

            def run(n):
                t = time.perf_counter()
                lib.tk_mat_mul_repacked(int(qt), ffi.from_buffer(raw), a.K, a.M, ffi.cast("float *", ffi.from_buffer(x)), n,
                                        ffi.cast("float *", ffi.from_buffer(y)))
                return time.perf_counter() - t
            t0 = min(run(0) for _ in range(3))
            t = min(run(a.N) for _ in range(a.r)) - t0
            g = a.K * a.M * a.N / t / 1e9
            if qt == T.BF16:
                key, ins = ("B", "vdpbf16ps zmm") if dot else (("F512", "vfmadd zmm") if level == lib.TK_CPU_AVX512 else ("F256", "vfmadd ymm"))
            else:
                key, ins = ("V5", "vpdpbusd zmm") if level == lib.TK_CPU_AVX512 else (("V2", "vpdpbusd ymm") if vnni else ("M", "vpmaddubsw+vpaddw ymm"))
            p = pk.get(key, 0.0)
            print(f"{name:<20} {qn:<6} {g:8.1f} {p:8.1f} {g / p if p else float('nan'):6.0%}  {ins}")
    lib.tk_cpu_set_level(best)
    lib.tk_cpu_set_avxvnni(1)


if __name__ == "__main__":
    main()
