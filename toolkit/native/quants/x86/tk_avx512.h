/* tk_avx512.h: what the AVX-512 kernel files (qdot_avx512.c, qdot_kquants_avx512.c) include
 * instead of <immintrin.h> directly, and their target attribute.
 *
 * Normal builds: <immintrin.h> (through tk_cpu.h) and TK_AVX512_TARGET = the target
 * attribute of AVX-512 F + BW + VL + DQ + VNNI (+ the AVX2 set), TK_AVX512_INLINE = static
 * inline, always inlined (the helpers and tile bodies); the type table hands these
 * kernels out only at TK_CPU_AVX512 (cpu.c).  Nothing here costs the native build anything:
 * the emulation below is a preprocessor branch that only a test build takes.
 *
 * Test builds with -DTK_EMULATE_AVX512 (tests/unit/test_avx512_emulated.py, on machines
 * without AVX-512): tk_cpu.h includes SIMDe ("SIMD Everywhere", header-only, Debian's
 * libsimde-dev, 0.7.4) with its native aliases in place of <immintrin.h>, so every _mm*
 * intrinsic here is SIMDe's portable C; TK_AVX512_TARGET is empty (with the target attribute
 * gcc may vectorize SIMDe's portable loops into real AVX-512 instructions, which would raise
 * SIGILL on the machine the emulation is for).  SIMDe 0.7.4 lacks a few intrinsics the
 * kernels use; they are defined below from ones it has, with the same results
 * (int32 -> float conversion rounds to nearest even in both; f16 -> f32 is exact).  Its
 * fused multiply-adds are replaced: without an FMA target they round twice.
 */
#ifndef TK_AVX512_H
#define TK_AVX512_H

#include "tk_cpu.h"

#ifdef TK_EMULATE_AVX512
#include <math.h>
#define TK_AVX512_TARGET
/* the tile bodies as real functions: inlining SIMDe's intrinsics into every tile instance
 * would take minutes to compile */
#define TK_AVX512_INLINE static
#ifndef __mmask64
#define __mmask64 simde__mmask64
#endif
/* SIMDe's portable fmadd is a multiply then an add (two roundings) where the compiler
 * targets no FMA; the instruction rounds once.  fmaf (C99, correctly rounded) per lane. */
static inline __m512 tk_emu_fmadd_ps(__m512 a, __m512 b, __m512 c, float sign) {
    float x[16], y[16], z[16];
    _mm512_storeu_ps(x, a);
    _mm512_storeu_ps(y, b);
    _mm512_storeu_ps(z, c);
    for (int i = 0; i < 16; i++) x[i] = fmaf(sign * x[i], y[i], z[i]);
    return _mm512_loadu_ps(x);
}
/* 256 bits: the low half of the 512-bit form (upper lanes zero) */
#define TK_EMU_WIDE(v) _mm512_insertf32x8(_mm512_setzero_ps(), (v), 0)
#define TK_EMU_FMA256(a, b, c, sign) \
    _mm512_castps512_ps256(tk_emu_fmadd_ps(TK_EMU_WIDE(a), TK_EMU_WIDE(b), TK_EMU_WIDE(c), (sign)))
#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
#undef _mm256_fmadd_ps
#undef _mm256_fnmadd_ps
#define _mm512_fmadd_ps(a, b, c) tk_emu_fmadd_ps(a, b, c, 1.0f)
#define _mm512_fnmadd_ps(a, b, c) tk_emu_fmadd_ps(a, b, c, -1.0f)
#define _mm256_fmadd_ps(a, b, c) TK_EMU_FMA256(a, b, c, 1.0f)
#define _mm256_fnmadd_ps(a, b, c) TK_EMU_FMA256(a, b, c, -1.0f)
#ifndef _mm512_cvtepi32_ps
static inline __m512 tk_emu_cvtepi32_ps(__m512i v) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v))),
                              _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1)), 1);
}
#define _mm512_cvtepi32_ps(v) tk_emu_cvtepi32_ps(v)
#endif
#ifndef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps(v, i) _mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), (i)))
#endif
#ifndef _cvtsh_ss
#define _cvtsh_ss(h) _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((int) (h))))
#endif
/* VDPBF16PS as the Intel SDM (vol. 2, VDPBF16PS) defines it, not as SIMDe 0.7.4 computes it
 * (even product + odd product, one float add, no denormal flushing).  Per fp32 lane j of
 * acc, with the bf16 pairs w[2j], w[2j+1] and a[2j], a[2j+1] (bf16 bits << 16 = fp32):
 *   acc[j] = FTZ(RNE(DAZ(acc[j]) + DAZ(w[2j+1]) * DAZ(a[2j+1])))     odd pair first
 *   acc[j] = FTZ(RNE(acc[j]      + DAZ(w[2j])   * DAZ(a[2j])))       then the even pair
 * The product of two bf16 (8-bit significands) is exact in fp32, so each step is one
 * correctly rounded multiply-add: fmaf.  MXCSR is not consulted (round to nearest even,
 * DAZ and FTZ always).  w and a as __m512i (32 bf16 each). */
static inline float tk_emu_daz(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }
static inline float tk_emu_bf16(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t) h << 16};
    return tk_emu_daz(v.f);
}
static inline __m512 tk_emu_dpbf16_ps(__m512 acc, __m512i w, __m512i a) {
    float s[16];
    uint16_t x[32], y[32];
    _mm512_storeu_ps(s, acc);
    _mm512_storeu_si512((void *) x, w);
    _mm512_storeu_si512((void *) y, a);
    for (int j = 0; j < 16; j++) {
        float r = tk_emu_daz(s[j]);
        r = tk_emu_daz(fmaf(tk_emu_bf16(x[2 * j + 1]), tk_emu_bf16(y[2 * j + 1]), r));
        s[j] = tk_emu_daz(fmaf(tk_emu_bf16(x[2 * j]), tk_emu_bf16(y[2 * j]), r));
    }
    return _mm512_loadu_ps(s);
}
#define TK_DPBF16_PS(acc, w, a) tk_emu_dpbf16_ps((acc), (w), (a))
#define TK_AVX512BF16_TARGET
#else
#define TK_AVX512_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define TK_AVX512_INLINE static inline __attribute__((always_inline))
/* the AVX-512 set plus AVX512_BF16 (qdot_bf16_avx512.c; handed out only where cpu.c found it) */
#define TK_AVX512BF16_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
/* acc (16 fp32) += the 16 pair products of w and a (32 bf16 each, as __m512i) */
#define TK_DPBF16_PS(acc, w, a) _mm512_dpbf16_ps((acc), (__m512bh) (w), (__m512bh) (a))
#endif

#endif
