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
 * Files (in quants/): qdot.c (activation quantizers, scalar dot products of the legacy types
 * and IQ4_NL, the scalar row kernels), qdot_kquants.c (scalar dot products of the k-quants and
 * IQ4_XS); per instruction set, x86/qdot_avx2.c (AVX2 activation quantizers),
 * x86/qdot_kquants_avx2.c (AVX2 Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS kernels),
 * x86/qdot_legacy_avx2.c (AVX2 Q8_0 / Q4_0 / Q5_0 / IQ4_NL / Q4_1 / Q5_1 kernels),
 * x86/qdot_avx512.c (AVX-512 VNNI Q8_0 prompt kernel), x86/qdot_kquants_avx512.c (AVX-512 VNNI
 * Q4_K / Q5_K / Q6_K / Q3_K / Q2_K prompt kernels), x86/qdot_bf16_avx512.c (AVX512_BF16 BF16 x
 * BF16 kernel and the f32 -> bf16 activation conversion), x86/qdot_avxvnni.c (AVX-VNNI Q8_0 /
 * Q4_K / Q5_K / Q6_K / Q3_K / Q2_K prompt kernels at the avx2 level), arm/qdot_neon.c (NEON
 * Q8_0 kernel).
 */
#ifndef TK_QDOT_H
#define TK_QDOT_H

#include <stddef.h>
#include <stdint.h>

#include "quants/quants.h"

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

/* ---- k-quant scale bytes (ggml's kmask unpacking), for the SIMD kernels ---------------- */
/* Q4_K / Q5_K: the 12 scale bytes -> u as 16 bytes: the 6-bit scales s0..s7, then the mins
 * m0..m7 (ggml get_scale_min_k4: s0..3 = b0..3 & 63, m0..3 = b4..7 & 63,
 * s4..7 = (b8..11 & 15) | (b0..3 >> 6) << 4, m4..7 = (b8..11 >> 4) | (b4..7 >> 6) << 4) */
static inline void tk_scales_k4(const uint8_t * s12, uint32_t u[4]) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t v[3];
    memcpy(v, s12, 12);
    u[0] = v[0] & k1;
    u[1] = (v[2] & k2) | (((v[0] >> 6) & k3) << 4);
    u[2] = v[1] & k1;
    u[3] = ((v[2] >> 4) & k2) | (((v[1] >> 6) & k3) << 4);
}
/* Q3_K: the 12 scale bytes -> u as the 16 6-bit scales, unsigned (the scale is the value - 32):
 * low 4 bits in the nibbles of bytes 0..7 (j >= 8: high nibble), high 2 bits in byte
 * 8 + j % 4, bits 2 (j / 4) .. 2 (j / 4) + 1 */
static inline void tk_scales_q3(const uint8_t * s12, uint32_t u[4]) {
    const uint32_t k4 = 0x0f0f0f0f, k2 = 0x03030303;
    uint32_t v[3];
    memcpy(v, s12, 12);
    u[0] = (v[0] & k4) | ((v[2] & k2) << 4);
    u[1] = (v[1] & k4) | (((v[2] >> 2) & k2) << 4);
    u[2] = ((v[0] >> 4) & k4) | (((v[2] >> 4) & k2) << 4);
    u[3] = ((v[1] >> 4) & k4) | (((v[2] >> 6) & k2) << 4);
}

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

/* ---- shared by the VNNI prompt kernels (qdot_avx512.c, qdot_kquants_avx512.c, qdot_avxvnni.c) ---- */
/* The f16 scales of n blocks `stride` bytes apart as floats, dst[k * step] (the same bits as
 * F16C's vcvtph2ps for all 65536 halves, NaNs included: checked exhaustively). */
static inline void tk_scales_f16_f32(const uint8_t * blk, size_t stride, int64_t n, float * dst, int step) {
    for (int64_t k = 0; k < n; k++) {
        tk_half h;
        memcpy(&h, blk + (size_t) k * stride, 2);
        dst[k * step] = tkq_fp16_to_fp32(h);
    }
}

/* Q8_0 prompt kernels (qdot_avx512.c, qdot_avxvnni.c): a group of R (4 or 1) weight rows
 * against the n tokens of a token block, their scales as floats: dwf[4 b + i] = d_w of row
 * i, block b; daf[t nb + b] = d_a of token t; y[t ldy + i] */
typedef void (*tk_q8_group_fn)(const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb,
                               const float * dwf, const float * daf, int64_t n, float * y, int64_t ldy);
#define TK_Q8_TOK_FLOATS 6144   /* token scales of a token block (tb * nb floats) */
#define TK_Q8_MAX_NB 1024       /* K <= 32768 (dwf: 16 KiB of stack); longer rows: `gen` */

/* The drive of a Q8_0 prompt kernel: rows [r0, r1) x all tokens in token blocks of about
 * 192 KiB of activations (at most TK_Q8_TOK_FLOATS / nb tokens, a multiple of `step` where
 * more), in a block groups of 4 rows (rows4), then single rows (rows1), each group's and
 * token's f16 scales converted once.  Generation (n_tok == 1) and rows of more than
 * TK_Q8_MAX_NB blocks: the kernel `gen` (AVX2). */
/* tk_q8_drive for the kernel `kname` from a group function rows(R, ...) (R: 4 or 1, a
 * constant in each of the two wrappers name_4, name_1 this defines with target ATTR) */
#define TK_Q8_KERNEL(ATTR, kname, rows, step)                                                              \
    ATTR static void kname##_4(const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb, \
                               const float * dwf, const float * daf, int64_t n, float * y, int64_t ldy) {  \
        rows(4, wr, row_bytes, a, a_bytes, nb, dwf, daf, n, y, ldy);                                       \
    }                                                                                                      \
    ATTR static void kname##_1(const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb, \
                               const float * dwf, const float * daf, int64_t n, float * y, int64_t ldy) {  \
        rows(1, wr, row_bytes, a, a_bytes, nb, dwf, daf, n, y, ldy);                                       \
    }                                                                                                      \
    void kname(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, \
               float * y, int64_t ldy, int64_t r0, int64_t r1) {                                           \
        tk_q8_drive(kname##_4, kname##_1, tk_qdot_rows_q8_0_avx2, step, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, \
                    r0, r1);                                                                               \
    }
static inline void tk_q8_drive(tk_q8_group_fn rows4, tk_q8_group_fn rows1, tk_qdot_rows_fn gen, int64_t step,
                               const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                               int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = K / QK32;
    if (n_tok == 1 || nb > TK_Q8_MAX_NB) {
        gen(w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);
        return;
    }
    float daf[TK_Q8_TOK_FLOATS], dwf[4 * TK_Q8_MAX_NB];
    int64_t tb = (int64_t) 196608 / (a_bytes > 0 ? (int64_t) a_bytes : 1);
    if (tb * nb > TK_Q8_TOK_FLOATS) tb = TK_Q8_TOK_FLOATS / nb;
    tb = tb < step ? (tb < 1 ? 1 : tb) : tb - tb % step;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t n = t0 + tb < n_tok ? tb : n_tok - t0;
        const uint8_t * at = a + (size_t) t0 * a_bytes;
        for (int64_t t = 0; t < n; t++) tk_scales_f16_f32(at + (size_t) t * a_bytes, sizeof(blk_q8_0), nb, daf + t * nb, 1);
        for (int64_t r = r0; r < r1;) {
            const int R = r + 4 <= r1 ? 4 : 1;
            const uint8_t * wr = w + (size_t) r * row_bytes;
            for (int i = 0; i < R; i++) tk_scales_f16_f32(wr + (size_t) i * row_bytes, sizeof(blk_q8_0), nb, dwf + i, 4);
            (R == 4 ? rows4 : rows1)(wr, row_bytes, at, a_bytes, nb, dwf, daf, n, y + t0 * ldy + r, ldy);
            r += R;
        }
    }
}

/* k-quant prompt tiles: 1 weight row x T tokens (T = 1..TK_KQ_TMAX), w = the row, a = the T
 * activation rows ab bytes apart, nb super-blocks, y[t * ldy] */
typedef void (*tk_kq_tile_fn)(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, float * y, int64_t ldy);
#define TK_KQ_TMAX 8       /* tokens per tile */
#define TK_KQ_RCHUNK 16    /* rows per chunk: a chunk's weights stay cached while the token groups pass */

/* super-block i of a weight row (blocks bw bytes) and of the T activation rows (q) */
static inline const uint8_t * tk_kq_sb(const uint8_t * w, size_t bw, int64_t i, const uint8_t * a, size_t ab, int T,
                                       const blk_q8_K ** q) {
    for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
    return w + i * bw;
}

/* A k-quant row kernel from its tiles (toks[T - 1]: 1 x T): chunks of TK_KQ_RCHUNK rows; in a
 * chunk, groups of up to TK_KQ_TMAX tokens, each row against the whole group (the AVX2
 * driver's order, qdot_kquants_avx2.c).  Generation (n_tok == 1) and groups of fewer than
 * min_tok tokens: the kernel `gen` (AVX2; whole for generation, else on the chunk's rows and
 * the group's tokens: every kernel computes an output with the same operations, so the mix
 * gives the same bits). */
static inline void tk_kq_drive(const tk_kq_tile_fn toks[TK_KQ_TMAX], tk_qdot_rows_fn gen, int min_tok,
                               const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                               int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {
    if (n_tok == 1 || n_tok < min_tok) {
        gen(w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);
        return;
    }
    const int64_t nb = K / QK_K;
    for (int64_t rc = r0; rc < r1; rc += TK_KQ_RCHUNK) {
        const int64_t rce = r1 - rc < TK_KQ_RCHUNK ? r1 : rc + TK_KQ_RCHUNK;
        for (int64_t t = 0; t < n_tok; t += TK_KQ_TMAX) {
            const int tn = (int) (n_tok - t < TK_KQ_TMAX ? n_tok - t : TK_KQ_TMAX);
            if (tn < min_tok) {
                gen(w, row_bytes, K, a + t * a_bytes, a_bytes, tn, y + t * ldy, ldy, rc, rce);
                continue;
            }
            for (int64_t r = rc; r < rce; r++) toks[tn - 1](w + r * row_bytes, a + t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
        }
    }
}

/* The tiles name_1 .. name_8 (ATTR: their target attribute; each calls
 * tile(kind, w, a, ab, nb, T, y, ldy) with a constant T), their table name_toks, and the row
 * kernel `kname` that drives them, with `gen` for generation and groups under min_tok. */
#define TK_KQ_TILE(ATTR, name, tile, kind, T)                                                              \
    ATTR static void name##_##T(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, float * y,    \
                                int64_t ldy) { tile(kind, w, a, ab, nb, T, y, ldy); }
#define TK_KQ_KERNEL(ATTR, kname, name, tile, kind, gen, min_tok)                                          \
    TK_KQ_TILE(ATTR, name, tile, kind, 1) TK_KQ_TILE(ATTR, name, tile, kind, 2)                            \
    TK_KQ_TILE(ATTR, name, tile, kind, 3) TK_KQ_TILE(ATTR, name, tile, kind, 4)                            \
    TK_KQ_TILE(ATTR, name, tile, kind, 5) TK_KQ_TILE(ATTR, name, tile, kind, 6)                            \
    TK_KQ_TILE(ATTR, name, tile, kind, 7) TK_KQ_TILE(ATTR, name, tile, kind, 8)                            \
    static const tk_kq_tile_fn name##_toks[TK_KQ_TMAX] = { name##_1, name##_2, name##_3, name##_4,         \
                                                            name##_5, name##_6, name##_7, name##_8 };      \
    void kname(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, \
               float * y, int64_t ldy, int64_t r0, int64_t r1) {                                           \
        tk_kq_drive(name##_toks, gen, min_tok, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);        \
    }
/* The five k-quant row kernels tk_qdot_rows_{q4_K,q5_K,q6_K,q3_K,q2_K}_LV from the tiles
 * q45(five, ...) and s16(kind, ...) (kinds: tk_kq_x86.h); generation and token groups under
 * min45 (Q4_K, Q5_K) / min16 (the others) on the AVX2 kernels */
#define TK_KQ_KERNELS(ATTR, LV, q45, s16, min45, min16)                                                    \
    TK_KQ_KERNEL(ATTR, tk_qdot_rows_q4_K_##LV, q45##_q4k_##LV, q45, 0, tk_qdot_rows_q4_K_avx2, min45)       \
    TK_KQ_KERNEL(ATTR, tk_qdot_rows_q5_K_##LV, q45##_q5k_##LV, q45, 1, tk_qdot_rows_q5_K_avx2, min45)       \
    TK_KQ_KERNEL(ATTR, tk_qdot_rows_q6_K_##LV, s16##_q6k_##LV, s16, TK_KQX_Q6, tk_qdot_rows_q6_K_avx2, min16) \
    TK_KQ_KERNEL(ATTR, tk_qdot_rows_q3_K_##LV, s16##_q3k_##LV, s16, TK_KQX_Q3, tk_qdot_rows_q3_K_avx2, min16) \
    TK_KQ_KERNEL(ATTR, tk_qdot_rows_q2_K_##LV, s16##_q2k_##LV, s16, TK_KQX_Q2, tk_qdot_rows_q2_K_avx2, min16)

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
/* qdot_avxvnni.c: Q8_0 and k-quant prompts with AVX-VNNI (the AVXVNNI slot, in force at
 * TK_CPU_AVX2 where tk_cpu_avxvnni(); outputs bit-identical to the AVX2 kernels) */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_avxvnni) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q4_K_avxvnni)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q5_K_avxvnni) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q6_K_avxvnni)
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q3_K_avxvnni) TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q2_K_avxvnni)
/* qdot_bf16_avx512.c: BF16 weights x BF16 activations with AVX512_BF16 (VDPBF16PS; the BF16
 * row's AVX512 slot, in force where tk_cpu_has_avx512bf16); its outputs follow the
 * instruction's rounding on bf16-rounded activations, not the float kernels' */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_bf16_avx512)
#endif
/* qdot_bf16_avx512.c, every build: K floats -> K bf16 (uint16) rounded to nearest even, NaN
 * kept quiet (llama.cpp ggml_compute_fp32_to_bf16) */
void tk_quantize_act_bf16(const float * x, void * y, int64_t K);
#if defined(__aarch64__) && defined(__ARM_NEON)
/* arm/qdot_neon.c: Q8_0 (the other types run their scalar kernels at the NEON level) */
TK_QDOT_DECLARE_ROWS(tk_qdot_rows_q8_0_neon)
#endif

#endif
