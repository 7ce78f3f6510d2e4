/* tk_cpu.h: the SIMD kernel entry points (kernels/x86/ops_avx2.c, x86/act_avx2.c, arm/ops_neon.c), called
 * by the dispatchers at the level tk_cpu_level() gives.  Internal: not part of the cffi
 * module.  The levels and the dispatch hooks (cpu.c) are in tk_testing.h, included here. */
#ifndef TK_CPU_H
#define TK_CPU_H

#include <stdint.h>

#include "tk_testing.h"

/* ---- internal: the scalar float mat-mul (ops.c), the type table's scalar slot of F32 /
 * F16 / BF16: y[t*M + r] for r in [r0, r1), t < n_tok (contract: ops.c matmul) ---- */
void tk_matmul_rows_scalar(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                           const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1);

/* ---- internal: AVX2 kernels (ops_avx2.c, act_avx2.c), called only when
 * tk_cpu_level() >= AVX2 ---- */
#if defined(__x86_64__) || defined(_M_X64)
#define TK_HAVE_X86 1
#ifdef TK_EMULATE_AVX512
/* test builds of the AVX-512 kernel files only (tk_avx512.h): SIMDe's portable intrinsics */
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#define TK_HSUM8_TARGET
#else
#include <immintrin.h>
#define TK_HSUM8_TARGET __attribute__((target("avx2,fma")))
#endif
/* The 8 lanes of v summed in one fixed tree, ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): every
 * AVX2 kernel ends its outputs with it, so their order of operations is the same. */
TK_HSUM8_TARGET __attribute__((always_inline)) static inline float tk_hsum8_avx2(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 0x55));
    return _mm_cvtss_f32(lo);
}
/* y[t*ldy + r] for r in [r0, r1), t < n_tok; W rows `row_bytes` apart from `base`, type
 * F32, F16 or BF16; scratch: K floats (one expanded row).  Same contract as ops.c's
 * matmul_rows. */
void tk_matmul_rows_avx2(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                         const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1);
/* act_avx2.c: y = silu(y);  y = silu(y) * a;  y = y * silu(z)  (n floats) */
void tk_silu_row_avx2(float * y, int64_t n);
void tk_rms_norm_avx2(const float * x, const float * w, float eps, int64_t n, float * y);
void tk_silu_mul_row_avx2(float * y, const float * a, int64_t n);
void tk_mul_silu_row_avx2(float * y, const float * z, int64_t n);
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#define TK_HAVE_NEON 1
/* kernels/arm/ops_neon.c, called only when tk_cpu_level() == TK_CPU_NEON: the float mat-mul (same
 * contract as tk_matmul_rows_avx2) */
void tk_matmul_rows_neon(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                         const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1);
#endif

#endif
