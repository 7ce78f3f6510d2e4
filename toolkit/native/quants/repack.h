/* repack.h: weights re-laid at load for the GEMM kernels (internal; tk_model_params.repack:
 * model.c; the CLI's default TK_REPACK_AUTO).  Without it the mmap'd file is used as it is.
 *
 * The idea is llama.cpp's ggml-cpu/repack.cpp (block_q4_Kx8, block_q8_0x4): groups of rows
 * interleaved block by block, so that one vector register holds the same 4 bytes of 16 rows
 * and a VNNI instruction (vpdpbusd) adds 4 products into each of 16 row lanes, against one
 * token's 4 activation bytes broadcast.  A register then sums a whole block of one row in
 * one lane: no horizontal sums, one float step per block and 16 rows.
 *
 * Formats (16 rows per group, TK_RP_ROWS; a matrix's last group padded with zero rows; the
 * groups of a matrix one after the other, the blocks of a group in order):
 * The scales stay the file's f16 (d[r], dmin[r]: converted to float in the tiles, exactly, so
 * the bits are those of float scales; a Q8_0 group takes the bytes of its 16 blocks, so
 * generation, which reads every weight once per token, reads no more than the row kernels).
 *   Q8_0 -> tk_rp_q8_0 per 32 values: d[r] (the f16 scale), q[k][r][i] =
 *           (uint8) (qs[4k + i] + 128) of row r (vpdpbusd's unsigned operand; the 128 * sum(a)
 *           this adds is taken off exactly, from the activation block's sum).
 *   Q4_0, IQ4_NL -> tk_rp_q4_0 per 32 values: d[r] (the f16 scale), q[k][r][i] = qs[4k + i] of
 *           row r, the file's nibbles (low: value 4k + i, high: 16 + 4k + i), so a group takes
 *           the bytes of its 16 blocks.  The tiles map a nibble n to u = v(n) + 128 (Q4_0:
 *           v = n - 8; IQ4_NL: kvalues_iq4nl[n]; one vpshufb) and sum as Q8_0 does, from
 *           -128 * sum(a) (the plain AVX2 tiles: v(n) signed, from 0; the same integer).
 *   Q4_K -> tk_rp_q4_K per 256 values: d[r], dmin[r] (f16), sc[j][r] and mn[k][r][2] (the
 *           6-bit scales of sub-block j, the mins of sub-blocks 2k and 2k+1), q[c][k][r][i] =
 *           qs[32c + 4k + i] of row r (low nibble: sub-block 2c, high nibble: 2c + 1).
 *   Q6_K -> tk_rp_q6_K per 256 values, the bytes of the file's 16 blocks (3360): d[r] (f16),
 *           sc[k][r][e] = the signed scale of sub-block 2k + e of row r (a row's pair is one int16
 *           pair for vpmaddwd), and per sub-block j of 16 values three registers' worth of bytes
 *           q[j][m][r][i] (m < 3) = u(16j + 4m + i) | ((u(16j + 12 + i) >> 2m) & 3) << 6 of row r,
 *           u = the 6-bit value + 32 in [0, 63] (ql's nibble | qh's 2 bits << 4): bits 0-5 the
 *           values 4m + i, bits 6-7 a third of value 12 + i each, unpacked in registers (masks
 *           and shifts); the 32 * sum(a) the + 32 adds is taken off once per block, as
 *           32 sum_j sc_j bsum_j.
 *   Q5_K -> tk_rp_q5_K per 256 values, the file's 176 bytes per row: d[r], dmin[r] (f16),
 *           s12[k][r] (byte k of the row's 12 packed 6-bit scales and mins: unpacked in the tiles,
 *           tk_scales_k4, for 16 rows at once), qh[k][r][i] = qh[4k + i] of row r (bit j: the
 *           5th bit of sub-block j's value 4k + i), q[c][k][r][i] = qs[32c + 4k + i] of row r
 *           (as Q4_K: low nibble sub-block 2c, high nibble 2c + 1).
 *   IQ4_XS -> tk_rp_iq4_xs per 256 values, the file's 136 bytes per row: d[r] (f16), sh[b][r]
 *           (byte b of scales_h), sl[j][r] (scales_l[j]), q[j][k][r][i] = qs[16j + 4k + i] of
 *           row r (sub-block j: low nibble value 32j + 4k + i, high nibble 32j + 16 + 4k + i,
 *           looked up as IQ4_NL's).
 *   BF16 -> per pair of columns j (K even): 16 uint32, row r's (bf16 w[2j] | w[2j + 1] << 16): the
 *           operand of one VDPBF16PS against a token's bf16 pair broadcast, or, widened (<< 16,
 *           & 0xffff0000), of two FMAs against its fp32 values (x86/repack_bf16_avx512.c, _avx2.c).
 *           The FMA kernels (avx512 by default except on AMD, and avx2: cpu.c tk_cpu_bf16dot)
 *           take fp32 activations (tk_repack_act_f32) and, per output, acc = 0; for each j in
 *           order acc = fma(w_2j, a_2j, acc); acc = fma(w_2j+1, a_2j+1, acc) (rp_bf16_tile_scalar);
 *           the VDPBF16PS kernel has the instruction's order (repack_bf16_avx512.c).
 *
 * The float order (per output y[t][r], every level, every n_tok, r0/r1, tile position):
 *   acc = 0; per block b, in order:
 *     Q8_0, Q4_0, IQ4_NL: p = sum of the 32 integer products (exact);  acc = fma(d_w * d_a, (float) p, acc)
 *     Q4_K: is = sum_j sc_j sum_l q_l a_l, ms = sum_j m_j bsum_j (exact int32);
 *           acc = fma(d_w * d_a, (float) is, acc);  acc = fma(-(dmin_w * d_a), (float) ms, acc)
 *     Q6_K: is = sum_j sc_j sum_l q_l a_l (exact int32, q = u - 32);  acc = fma(d_w * d_a, (float) is, acc)
 *     Q5_K: as Q4_K (q_l the 5-bit values)
 *     IQ4_XS: is = sum_j sc_j sum_l q_l a_l (exact int32; sc_j = ls_j - 32, q_l =
 *           kvalues_iq4nl[n]);  acc = fma(d_w * d_a, (float) is, acc)
 *   y = acc
 * so the scalar tiles here and the SIMD ones give the same bits, and so does a token alone
 * (generation) or in any ubatch.  It is not the order of the row kernels (qdot.h: 8 float
 * lanes per token then a horizontal sum), so outputs with repacking on differ from outputs
 * with it off by float rounding: one rounding per block instead of eight lanes' partial
 * sums; the bound is in tests/unit/test_repack.py.
 */
#ifndef TK_REPACK_H
#define TK_REPACK_H

#include <stddef.h>
#include <stdint.h>

#include "quants/qdot.h"

#define TK_RP_ROWS 16

typedef struct {
    tk_half d[TK_RP_ROWS];
    uint8_t q[8][TK_RP_ROWS][4];
} tk_rp_q8_0;                                   /* 544 bytes per 16 x 32 values: 16 Q8_0 blocks' */
typedef struct {
    tk_half d[TK_RP_ROWS];
    uint8_t q[4][TK_RP_ROWS][4];
} tk_rp_q4_0;                                   /* 288 bytes per 16 x 32 values: 16 Q4_0 / IQ4_NL blocks' */
typedef struct {
    tk_half d[TK_RP_ROWS], dmin[TK_RP_ROWS];
    uint8_t sc[8][TK_RP_ROWS];
    uint8_t mn[4][TK_RP_ROWS][2];
    uint8_t q[4][8][TK_RP_ROWS][4];
} tk_rp_q4_K;                                   /* 2368 bytes per 16 x 256 values (Q4_K: 2304) */
typedef struct {
    tk_half d[TK_RP_ROWS];
    int8_t sc[8][TK_RP_ROWS][2];
    uint8_t q[16][3][TK_RP_ROWS][4];
} tk_rp_q6_K;                                   /* 3360 bytes per 16 x 256 values: 16 Q6_K blocks' (was 4384) */
typedef struct {
    tk_half d[TK_RP_ROWS], dmin[TK_RP_ROWS];
    uint8_t s12[12][TK_RP_ROWS];
    uint8_t qh[8][TK_RP_ROWS][4];
    uint8_t q[4][8][TK_RP_ROWS][4];
} tk_rp_q5_K;                                   /* 2816 bytes per 16 x 256 values: 16 Q5_K blocks' */
typedef struct {
    tk_half d[TK_RP_ROWS];
    uint8_t sh[2][TK_RP_ROWS];
    uint8_t sl[4][TK_RP_ROWS];
    uint8_t q[8][4][TK_RP_ROWS][4];
} tk_rp_iq4_xs;                                 /* 2176 bytes per 16 x 256 values: 16 IQ4_XS blocks' */
_Static_assert(sizeof(tk_rp_q5_K) == 16 * 176 && sizeof(tk_rp_iq4_xs) == 16 * 136, "Q5_K / IQ4_XS re-laid: the file's bytes");
_Static_assert(sizeof(tk_rp_q4_0) == 288 && sizeof(tk_rp_q8_0) == 544 && sizeof(tk_rp_q4_K) == 2368 && sizeof(tk_rp_q6_K) == 3360,
               "repacked block sizes");

/* Bytes of one repacked matrix of M rows of K values of `type` (whole groups); 0 when the
 * type has no repacked form (or K is not a multiple of its block). */
size_t tk_repack_matrix_bytes(int type, int64_t K, int64_t M);
/* M rows of `type` (row_bytes apart from src) re-laid into dst (tk_repack_matrix_bytes). */
void tk_repack_matrix(int type, const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst);

/* Repacked row kernel: y[t * ldy + r] for t < n_tok and the rows r of groups [g0, g1)
 * (r < M) of the repacked matrix wp; activations as for the type's row kernel (qdot.h),
 * their per-token terms in prep (tk_rp_prep, all n_tok tokens). */
typedef void (*tk_rp_rows_fn)(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                              int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
/* The kernel for `type` at `level` (scalar: the reference tiles below); NULL: none.  bf16dot:
 * BF16 at avx512 runs the VDPBF16PS kernel (else the FMA one; tk_weight.rp_bf16dot). */
tk_rp_rows_fn tk_repack_rows(int type, int level, int bf16dot);
/* 1 when `level` has a SIMD repacked kernel for `type` (what TK_REPACK_ALL re-lays). */
int tk_repack_fast(int type, int level);
/* 1 when the re-laid form of `type` wins at `level`, prompt and generation both (what
 * TK_REPACK_AUTO re-lays; the measurements in repack.c). */
int tk_repack_auto(int type, int level);

/* Per-token terms of the activations, computed once per mat-mul (not per thread chunk):
 * Q8_0, Q4_0, IQ4_NL: float daf[n_tok nb] (d_a), then int32 neg[n_tok nb] (-128 * sum(qs)) of
 * each block;
 * Q4_K, Q5_K, IQ4_XS: float daf[n_tok nb], then int16 bs[n_tok nb 8] (the sums of the 8 sub-blocks);
 * Q6_K: float daf[n_tok nb], then int16 bs[n_tok nb 16] (Q8_K's bsums: the 16 sub-blocks').
 * tk_rp_prep fills tokens [t0, t1) of n_tok; tk_rp_prep_bytes: the size for any type. */
size_t tk_rp_prep_bytes(int64_t n_tok, int64_t K);
void tk_rp_prep(int type, const uint8_t * a, size_t a_bytes, int64_t K, int64_t n_tok, int64_t t0, int64_t t1,
                uint8_t * prep);

/* the 16 values u = v(n) + 128 of the nibbles of Q4_0 (v = n - 8) or IQ4_NL (kvalues_iq4nl) */
void tk_rp_q4x_table(int type, uint8_t u[16]);

/* ---- the drives, shared by the levels (tile: 16 rows x T <= 8 tokens) ---------------- */
typedef void (*tk_rp_q8_tile_fn)(const tk_rp_q8_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                 const float * daf, const int32_t * neg, int T, int nr, float * y, int64_t ldy);
typedef void (*tk_rp_q4_0_tile_fn)(const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                   const float * daf, const int32_t * neg, int T, int nr, float * y, int64_t ldy);
typedef void (*tk_rp_q4k_tile_fn)(const tk_rp_q4_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                  const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy);
typedef void (*tk_rp_q6k_tile_fn)(const tk_rp_q6_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                  const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy);
typedef void (*tk_rp_q5k_tile_fn)(const tk_rp_q5_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                  const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy);
typedef void (*tk_rp_iq4xs_tile_fn)(const tk_rp_iq4_xs * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                    const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy);
void tk_rp_drive_q5_K(tk_rp_q5k_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_drive_iq4_xs(tk_rp_iq4xs_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                        size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_drive_q6_K(tk_rp_q6k_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_drive_q8_0(tk_rp_q8_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
/* Q4_0 and IQ4_NL (type: which) */
void tk_rp_drive_q4_0(int type, tk_rp_q4_0_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_drive_q4_K(tk_rp_q4k_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);

/* 1 when the repacked kernel of `type` at `level` reads fp32 activations as they are (the
 * BF16 FMA kernels) instead of the type's activation rows (tk_matmul skips quantizing). */
int tk_repack_act_f32(int type, int level);   /* with the process default tk_cpu_bf16dot() */
int tk_repack_act_f32_with(int type, int level, int bf16dot);

/* BF16 drive: groups [g0, g1) x all tokens in token blocks of about 192 KiB of activations (a
 * multiple of tmax tokens); in a block, gmax groups at a time against the tokens tmax at a time.
 * tile(G, T, ...): G <= gmax groups (gsz bytes apart) x T <= tmax tokens; nr: rows of the
 * tile's last group. */
/* the store mask of group g of a tile of G groups: all 16 rows, or the nr of the last group */
static inline uint16_t tk_rp_rows_mask(int g, int G, int nr) {
    return g == G - 1 && nr < TK_RP_ROWS ? (uint16_t) ((1u << nr) - 1) : (uint16_t) 0xFFFF;
}
typedef void (*tk_rp_bf16_tile_fn)(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a,
                                   size_t a_bytes, float * y, int64_t ldy, int nr);
void tk_rp_drive_bf16(tk_rp_bf16_tile_fn tile, int gmax, int tmax, const uint8_t * wp, int64_t K, int64_t M,
                      const uint8_t * a, size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t g0, int64_t g1);

/* x86/repack_bf16_avx512.c (VDPBF16PS; FMA), x86/repack_bf16_avx2.c (FMA) */
void tk_rp_rows_bf16_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_bf16_fma_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_avx2_rows_bf16(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                          int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);

/* x86/repack_avx512.c */
void tk_rp_rows_q8_0_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_q4_K_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_q4_0_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_iq4_nl_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                              int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_q5_K_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_iq4_xs_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                              int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);
void tk_rp_rows_q6_K_avx512(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1);

/* x86/repack_avx2.c (tk_rp_avx2_rows_*), x86/repack_avxvnni.c (tk_rp_avxvnni_rows_*) */
#define TK_RP_DECLARE(prefix)                                                                                 \
    void prefix##rows_q8_0(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                           float *, int64_t, int64_t, int64_t);                                                \
    void prefix##rows_q4_K(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                           float *, int64_t, int64_t, int64_t);                                                \
    void prefix##rows_q6_K(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                           float *, int64_t, int64_t, int64_t);                                                \
    void prefix##rows_q4_0(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                           float *, int64_t, int64_t, int64_t);                                                \
    void prefix##rows_iq4_nl(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                             float *, int64_t, int64_t, int64_t);                                              \
    void prefix##rows_q5_K(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                           float *, int64_t, int64_t, int64_t);                                                \
    void prefix##rows_iq4_xs(const uint8_t *, int64_t, int64_t, const uint8_t *, size_t, int64_t, const uint8_t *, \
                             float *, int64_t, int64_t, int64_t);
TK_RP_DECLARE(tk_rp_avx2_)
TK_RP_DECLARE(tk_rp_avxvnni_)

#endif
