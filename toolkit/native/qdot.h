/* qdot.h: integer dot products of quantized weights with quantized activations (internal).
 *
 * As ggml does for its quantized types (ggml-cpu type_traits' vec_dot_type), a mat-mul with
 * quantized weights first quantizes each activation row per block -- Q8_0 for Q8_0, Q4_0,
 * Q5_0 and IQ4_NL weights; Q8_1 for Q4_1 and Q5_1; Q8_K for the k-quants and IQ4_XS -- and
 * then sums integer products block by block, scaled once per block (or sub-block) in float.
 *
 * Results differ from float32 activations by the activation rounding (about 2^-8 relative
 * per block), as llama.cpp's do.  Per output, the integer sums are exact, so the scalar and
 * the SIMD kernels differ only in the order of the per-block float multiply-adds.
 *
 * Layout of everything here: ggml's (ggml-common.h, build 0c1e570).
 *
 * Which kernel and which activation type a weight type takes is the type table's
 * (ggml_types.c: vec_dot_type, qdot_rows, act_from_float).
 *
 * Files: qdot.c (activation quantizers, scalar dot products of the legacy types and
 * IQ4_NL, the scalar row kernels), qdot_kquants.c (scalar dot products of the k-quants and IQ4_XS),
 * qdot_avx2.c (AVX2 activation quantizers), qdot_kquants_avx2.c (AVX2 Q2_K / Q3_K / Q4_K /
 * Q5_K / Q6_K / IQ4_XS kernels), qdot_legacy_avx2.c (AVX2 Q8_0 / Q4_0 / Q5_0 / IQ4_NL / Q4_1 /
 * Q5_1 kernels), qdot_avx512.c (AVX-512 VNNI Q8_0 prompt kernel), qdot_kquants_avx512.c
 * (AVX-512 VNNI Q4_K / Q5_K / Q6_K / Q3_K / Q2_K prompt kernels), qdot_bf16_avx512.c
 * (AVX512_BF16 BF16 x BF16 kernel and the f32 -> bf16 activation conversion), qdot_avxvnni.c
 * (AVX-VNNI Q8_0 / Q4_K / Q5_K / Q6_K prompt kernels at the avx2 level).
 */
#ifndef TK_QDOT_H
#define TK_QDOT_H

#include <stddef.h>
#include <stdint.h>

#include "quants.h"

/* ---- activation blocks ------------------------------------------------------------- */
typedef struct { tk_half d; tk_half s; int8_t qs[QK32]; } blk_q8_1;    /* s = d * sum(qs); 36 bytes */
typedef struct {
    float   d;                /* scale (float32, not f16) */
    int8_t  qs[QK_K];
    int16_t bsums[QK_K/16];   /* sums of qs over each 16 values */
} blk_q8_K;                   /* 292 bytes */
_Static_assert(sizeof(blk_q8_1) == 36 && sizeof(blk_q8_K) == 292, "activation block sizes");

/* Activation type numbers (ggml.h) besides TKQ_T_Q8_0 */
#define TKQ_T_Q8_1 TK_GGML_Q8_1
#define TKQ_T_Q8_K TK_GGML_Q8_K

/* Scalar activation quantizers (ggml quantize_row_q8_0_ref / q8_1_ref / q8_K_ref, except
 * that every rounding is round-to-nearest-even, as ggml's SIMD versions do, so
 * every level writes the same bytes).  x: K floats, K a multiple of the block; y: K / block
 * blk_q8_0 / blk_q8_1 / blk_q8_K (void * for the table's tk_from_float_fn). */
void tk_quantize_act_q8_0(const float * x, void * y, int64_t K);
void tk_quantize_act_q8_1(const float * x, void * y, int64_t K);
void tk_quantize_act_q8_K(const float * x, void * y, int64_t K);

/* Scalar dot products: one weight row `w` of K values (K a multiple of the weight block)
 * with one activation row `a` of the matching activation type; float32 result.
 * Reference: ggml-cpu quants.c ggml_vec_dot_<w>_<a>_generic (same integer sums; the float
 * accumulation is one running sum over blocks, in block order).  (tk_vec_dot_fn) */
float tk_vec_dot_q8_0_q8_0(int64_t K, const void * w, const void * a);
float tk_vec_dot_q4_0_q8_0(int64_t K, const void * w, const void * a);
float tk_vec_dot_q5_0_q8_0(int64_t K, const void * w, const void * a);
float tk_vec_dot_iq4_nl_q8_0(int64_t K, const void * w, const void * a);
float tk_vec_dot_q4_1_q8_1(int64_t K, const void * w, const void * a);
float tk_vec_dot_q5_1_q8_1(int64_t K, const void * w, const void * a);
/* qdot_kquants.c */
float tk_vec_dot_q2_K_q8_K(int64_t K, const void * w, const void * a);
float tk_vec_dot_q3_K_q8_K(int64_t K, const void * w, const void * a);
float tk_vec_dot_q4_K_q8_K(int64_t K, const void * w, const void * a);
float tk_vec_dot_q5_K_q8_K(int64_t K, const void * w, const void * a);
float tk_vec_dot_q6_K_q8_K(int64_t K, const void * w, const void * a);
float tk_vec_dot_iq4_xs_q8_K(int64_t K, const void * w, const void * a);

/* ---- row kernels ---------------------------------------------------------------------
 * A row kernel computes y[t * ldy + r] for every weight row r in [r0, r1) and activation
 * row t in [0, n_tok): weight rows `row_bytes` apart from `w`, activation rows `a_bytes`
 * apart from `a`.  Contract for every kernel, at every level: each output is computed by
 * the same operations whatever n_tok, r0, r1 and the position of (r, t) in a tile, so a
 * token's result never depends on the ubatch it shares or on the thread split.
 * (tk_qdot_rows_fn, ggml_types.h) */
#define TK_QDOT_DECLARE_ROWS(NAME)                                                                          \
    void NAME(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, \
              float * y, int64_t ldy, int64_t r0, int64_t r1);
/* qdot.c: the scalar row kernels, one dot product (above) per output */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_scalar) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_0_scalar)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_0_scalar) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_iq4_nl_scalar)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_1_scalar) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_1_scalar)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q2_K_scalar) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q3_K_scalar)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_K_scalar) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_K_scalar)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q6_K_scalar) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_iq4_xs_scalar)

/* Generation reads weight rows once, in order: rows shorter than a page stream poorly
 * through the hardware prefetcher (measured on the float mat-vec, ops_avx2.c), so the
 * row loops ask for bytes ahead.  Hints only.  Q5_0 / Q4_1 / Q5_1 ask for row
 * r + TK_QDOT_PF_ROWS, whole, while they work on row r (417M Q4_K_M model, tg64 -t 2, 6
 * alternating runs: median 53.3 vs 51.0 t/s without, when the k-quants did the same).
 * Spreading the hints over the row measured better where the kernel is fast enough to
 * wait on memory: Q8_0 asks, at each block, for the row TK_QDOT_PF_NEAR ahead
 * (qdot_legacy_avx2.c), the k-quants for the bytes KQ_PF_BYTES ahead
 * (qdot_kquants_avx2.c). */
#define TK_QDOT_PF_ROWS 8
#define TK_QDOT_PF_NEAR 2
static inline void tk_qdot_prefetch_row(const uint8_t * row, size_t row_bytes) {
    for (size_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(row + o, 0, 3);
}

#if defined(__x86_64__) || defined(_M_X64)
/* qdot_avx2.c: the activation quantizers (the bytes of the scalar ones) */
void tk_quantize_act_q8_0_avx2(const float * x, void * y, int64_t K);
void tk_quantize_act_q8_K_avx2(const float * x, void * y, int64_t K);
/* qdot_legacy_avx2.c */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_avx2) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_0_avx2)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_0_avx2) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_iq4_nl_avx2)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_1_avx2) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_1_avx2)
/* qdot_kquants_avx2.c */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q2_K_avx2) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q3_K_avx2)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_K_avx2) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_K_avx2)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q6_K_avx2) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_iq4_xs_avx2)
/* qdot_avx512.c: Q8_0 with AVX-512 VNNI (TK_CPU_AVX512; outputs bit-identical to the AVX2 kernel) */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_avx512)
/* qdot_kquants_avx512.c: the k-quants with AVX-512 VNNI (TK_CPU_AVX512; bit-identical to AVX2) */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_K_avx512) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_K_avx512)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q6_K_avx512) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q3_K_avx512)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q2_K_avx512)
/* qdot_avxvnni.c: Q8_0, Q4_K, Q5_K, Q6_K prompts with AVX-VNNI (the AVXVNNI slot, in force at
 * TK_CPU_AVX2 where tk_cpu_avxvnni(); outputs bit-identical to the AVX2 kernels) */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_avxvnni) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_K_avxvnni)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_K_avxvnni) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q6_K_avxvnni)
/* qdot_bf16_avx512.c: BF16 weights x BF16 activations with AVX512_BF16 (VDPBF16PS; the BF16
 * row's AVX512 slot, in force where tk_cpu_has_avx512bf16); its outputs follow the
 * instruction's rounding on bf16-rounded activations, not the float kernels' */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_bf16_avx512)
#endif
/* qdot_bf16_avx512.c, every build: K floats -> K bf16 (uint16) rounded to nearest even, NaN
 * kept quiet (llama.cpp ggml_compute_fp32_to_bf16) */
void tk_quantize_act_bf16(const float * x, void * y, int64_t K);
#if defined(__aarch64__) && defined(__ARM_NEON)
/* kernels_neon.c: Q8_0 (the other types run their scalar kernels at the NEON level) */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_neon)
#endif

#endif
