/* kernels/kernels.h: what the kernel files share (internal, not in the cffi module): the
 * panel GEMM of the chunked and block forms (gemm.c, x86/gemm_avx2.c, x86/gemm_avx512.c),
 * the blocked transpose, the run-length thresholds' reader (threshold.c), and the SIMD
 * recurrences of x86/ (gdn_avx2.c, gdn_avx512.c, lightning_avx2.c, lightning_avx512.c),
 * which the dispatchers (gdn.c, gdn_chunked.c, lightning.c) call only at the level
 * tk_cpu_level() gives.  Laid out as quants/: the plain C and the dispatch here, the SIMD
 * bodies under x86/ (arm/ for NEON), each behind the one x86 guard TK_HAVE_X86 (tk_cpu.h). */
#ifndef TK_KERNELS_H
#define TK_KERNELS_H

#include <stdint.h>

#include "tk_cpu.h"

/* ---- the panel GEMM (gemm.c) ----
 * Contract: for r < R and n < N,
 *   out[r*ldo + n] = (acc ? out[r*ldo + n] : 0) + sum_{j<J, ascending} c[r*ldc + j] m[j*ldm + n]
 * out must not overlap c or m.  Every instance gives each output one chain over j in
 * ascending order: the reference as a multiply then an add (one axpy per (r, j), vectorizable
 * without reassociation), AVX2 (6 rows x 16 columns in registers, n % 8 columns masked) and
 * AVX-512 (6 rows x 32 columns, n % 16 masked) as one FMA per j. */
typedef void (*tk_gemm_fn)(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm,
                           int32_t R, int32_t J, int32_t N, int acc);
void tk_gemm_ref(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R,
                 int32_t J, int32_t N, int acc);
/* the instance of a CPU level (tk_cpu_level()'s values): AVX-512, AVX2, else the reference */
tk_gemm_fn tk_gemm_at(int level);

/* dst[c*rows + r] = src[r*cols + c], in 8 x 8 tiles (a row-at-a-time transpose of a
 * 128 x 128 state missed the cache on every element: half of a 16-token chunked GDN call) */
void tk_transpose(const float * src, int32_t rows, int32_t cols, float * dst);

/* ---- run-length thresholds (threshold.c) ----
 * The process default of a form's threshold: *slot, or dflt while it is -1 (not set).
 * tk_threshold_set: n >= 0 sets it; n < 0 goes back to dflt.  Both return the threshold in
 * force.  No environment is read (a context's own threshold: tk_context_params). */
int tk_threshold_get(const int * slot, int dflt);
int tk_threshold_set(int * slot, int n, int dflt);

/* ---- Mamba-2 ----
 * The fields of one sequence's Mamba-2 run, first in ssm.c's recurrence job and ssd.c's SSD
 * job (positional initializers in this order): the state s [H, P, N] (updated in place);
 * token rows xBC, dt, y with their strides; A, D [H]; n_tok tokens, H heads of P, N state, G
 * groups, DI = H P (contract: tk_internal.h, tk_ssm_mamba2_run). */
#define TK_M2_RUN_FIELDS                                                                                      \
    float * s;                                                                                                \
    const float * xBC, * dt, * A, * D;                                                                        \
    int64_t xbc_stride, dt_stride, y_stride;                                                                  \
    int32_t n_tok, H, P, N, G, DI;                                                                            \
    float * y;

/* ---- the recurrences' shared pieces ---- */
/* Tokens the SIMD recurrences take through the state while it sits in L1 (x86/) */
#define TK_REC_TOK_BLOCK 32
/* floats of the per-token decays (dec, kd) the SIMD KDA recurrences keep on the stack:
 * blocks of min(TK_REC_TOK_BLOCK, TK_KDA_SIMD_FLOATS / dk) tokens; wider heads take the
 * scalar recurrence */
#define TK_KDA_SIMD_FLOATS 4096
/* One token's rows of a head, for the SIMD recurrences: q, k; v and o at value j; beta
 * (GDN / KDA; 0 for lightning) */
typedef struct {
    const float * q, * k, * v;
    float * o;
    float beta;
} tk_rec_token;

static inline tk_rec_token tk_gdn_token(const tk_gdn_head * h, int64_t t, int32_t j) {
    return (tk_rec_token) {h->q + t * h->q_stride, h->k + t * h->k_stride, h->v + t * h->v_stride + j,
                           h->o + t * h->o_stride + j, h->beta[t * h->gb_stride]};
}

static inline tk_rec_token tk_lightning_token(const tk_lightning_head * h, int64_t t, int32_t j) {
    return (tk_rec_token) {h->q + t * h->q_stride, h->k + t * h->k_stride, h->v + t * h->v_stride + j,
                           h->o + t * h->o_stride + j, 0.0f};
}

/* the chunked forms of a GDN head, a KDA head (gk), at a CPU level (gdn_chunked.c; gdn.c's
 * tk_gdn_run chooses them; h->work: tk_gdn_work_floats / tk_kda_work_floats floats) */
void tk_gdn_chunked(const tk_gdn_head * h, int level);
void tk_kda_chunked(const tk_gdn_head * h, int level);

/* dec[t][i] = expf(g_{t0+t}[i]), kd[t][i] = dec k for T tokens of a KDA head (gdn.c) */
void tk_kda_block_decays(const tk_gdn_head * h, int32_t t0, int32_t T, float * dec, float * kd);

#ifdef TK_HAVE_X86
#include <immintrin.h>

#define TK_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TK_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define TK_KINLINE static inline __attribute__((always_inline))

/* lane mask of the first n (1..8) lanes */
TK_TARGET_AVX2 TK_KINLINE __m256i tk_mask8_avx2(int32_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* lane mask of the first n lanes, all 16 from n >= 16 */
TK_TARGET_AVX512 TK_KINLINE __mmask16 tk_mask16_avx512(int32_t n) {
    return n >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << n) - 1u);
}

void tk_gemm_avx2(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm, int32_t R,
                  int32_t J, int32_t N, int acc);
void tk_gemm_avx512(float * out, int64_t ldo, const float * c, int64_t ldc, const float * m, int64_t ldm,
                    int32_t R, int32_t J, int32_t N, int acc);

/* the recurrences (contracts: tk_testing.h; x86/gdn_avx2.c, gdn_avx512.c, lightning_*.c) */
void tk_gdn_recurrent_avx2(const tk_gdn_head * h);
void tk_kda_recurrent_avx2(const tk_gdn_head * h);     /* dk <= TK_KDA_SIMD_FLOATS */
void tk_kda_recurrent_avx512(const tk_gdn_head * h);   /* dk <= TK_KDA_SIMD_FLOATS */
void tk_lightning_recurrent_avx2(const tk_lightning_head * h);
void tk_lightning_recurrent_avx512(const tk_lightning_head * h);

/* KDA's in-sub-block dots (gdn_chunked.c): sa = sum_i a[i] (p[i] e[i]), sb = sum_i b[i] (p[i] e[i]) */
void tk_kda_dot2_avx2(const float * p, const float * e, const float * a, const float * b, int32_t n, float * sa,
                      float * sb);
void tk_kda_dot2_avx512(const float * p, const float * e, const float * a, const float * b, int32_t n, float * sa,
                        float * sb);
#endif

#endif
