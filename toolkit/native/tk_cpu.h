/* tk_cpu.h: run-time CPU dispatch (cpu.c) and the SIMD kernel entry points (ops_avx2.c).
 *
 * The part between the CDEF markers is also exposed to Python through cffi (_build.py
 * reads it after toolkit.h's). */
#ifndef TK_CPU_H
#define TK_CPU_H

#include <stdint.h>

#include "toolkit.h"

/* CDEF-BEGIN */
/* ==== run-time CPU dispatch (cpu.c) ================================================== */
/* Kernel levels.  On x86-64, lowest first: a level is used only if the CPU advertises its
 * instructions (cpuid) AND the OS saves the register state they need (xgetbv: XMM|YMM for
 * AVX2, plus opmask|ZMM for AVX-512).  AMX is never used.  On aarch64 the levels are
 * scalar and NEON (Advanced SIMD, part of every AArch64 CPU; checked in the auxiliary
 * vector's HWCAP_ASIMD).                                                                */
typedef enum {
    TK_CPU_SCALAR = 0,         /* plain C, every machine */
    TK_CPU_AVX2 = 1,           /* x86-64 AVX2 + FMA + F16C */
    TK_CPU_AVX512 = 2,         /* x86-64 AVX-512 F + BW + VL (kernels: the AVX2 ones for now) */
    TK_CPU_NEON = 3            /* aarch64 Advanced SIMD (kernels_neon.c) */
} tk_cpu_level_t;

/* The level kernels run at now: the highest the machine supports, capped by the
 * environment variable TOOLKIT_CPU=scalar|avx2|avx512|neon (read once; an unknown value,
 * or another architecture's level, means scalar) and by tk_cpu_set_level. */
int tk_cpu_level(void);
/* Highest level this machine supports (ignores TOOLKIT_CPU). */
int tk_cpu_detected(void);
/* Cap the level (tests, benchmarks): returns the level now in force: on x86-64
 * min(level, detected) for an x86-64 level; on aarch64 NEON if asked for and detected;
 * scalar for any other level.
 * Not to be called while another thread is decoding. */
int tk_cpu_set_level(int level);
/* "scalar", "avx2", "avx512", "neon"; "?" for anything else. */
const char * tk_cpu_level_name(int level);
/* Space-separated features found, e.g. "avx2 fma f16c avx512f avx512bw avx512vnni";
 * "os-ymm"/"os-zmm" when the OS saves those registers. */
const char * tk_cpu_features(void);

/* ==== Mamba-2 chunked scan (ssd.c) =================================================== */
/* Runs of at least this many tokens of one sequence in a ubatch take the chunked SSD form
 * (chunks of 64 tokens) instead of the token-by-token recurrence; 0 = never.  Default: the
 * measured crossover (ssd.c TK_SSD_MIN_DEFAULT), or the environment variable
 * TOOLKIT_SSD_MIN (read once).  tk_ssd_set_threshold(n >= 0) overrides it; n < 0 re-reads
 * the default.  Returns the threshold in force.
 * The path changes float rounding: results are bit-identical across ubatch splits when
 * every split takes the same path (and, for SSD, splits at multiples of 64 tokens). */
int tk_ssd_threshold(void);
int tk_ssd_set_threshold(int n);
/* n_tok tokens of one sequence through the Mamba-2 scan (contract in ssm.c,
 * tk_ssm_mamba2_run), on n_threads threads (heads split between them); the SSD workspace
 * is allocated for the call. */
tk_status tk_ssm_mamba2_seq(float * s, const float * xBC, int64_t xbc_stride, const float * dt, int64_t dt_stride,
                            const float * A, const float * D, int32_t n_tok, int32_t n_head, int32_t head_dim,
                            int32_t d_state, int32_t n_group, float * y, int64_t y_stride, int n_threads);
/* CDEF-END */

/* ---- internal: AVX2 kernels (ops_avx2.c, act_avx2.c), called only when
 * tk_cpu_level() >= AVX2 ---- */
#if defined(__x86_64__) || defined(_M_X64)
#define TK_HAVE_X86 1
#include <immintrin.h>
/* The 8 lanes of v summed in one fixed tree, ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)): every
 * AVX2 kernel ends its outputs with it, so their order of operations is the same. */
__attribute__((target("avx2,fma"), always_inline)) static inline float tk_hsum8_avx2(__m256 v) {
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
/* kernels_neon.c, called only when tk_cpu_level() == TK_CPU_NEON: the float mat-mul (same
 * contract as tk_matmul_rows_avx2) */
void tk_matmul_rows_neon(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                         const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1);
#endif

#endif
