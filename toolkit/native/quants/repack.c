/* repack.c: the repacked weight formats (repack.h): re-laying at load, the drives, and the
 * scalar tiles, the reference every SIMD tile must equal bit for bit. */
#include <math.h>
#include <string.h>

#include "quants/quants.h"
#include "quants/repack.h"
#include "tk_testing.h"

/* ---- re-laying ---------------------------------------------------------------------- */
size_t tk_repack_matrix_bytes(int type, int64_t K, int64_t M) {
    const size_t ng = (size_t) ((M + TK_RP_ROWS - 1) / TK_RP_ROWS);
    if (K <= 0 || M <= 0) return 0;
    if (type == TK_GGML_Q8_0 && K % QK32 == 0) return ng * (size_t) (K / QK32) * sizeof(tk_rp_q8_0);
    if ((type == TK_GGML_Q4_0 || type == TK_GGML_IQ4_NL) && K % QK32 == 0) return ng * (size_t) (K / QK32) * sizeof(tk_rp_q4_0);
    if (type == TK_GGML_Q4_K && K % QK_K == 0) return ng * (size_t) (K / QK_K) * sizeof(tk_rp_q4_K);
    if (type == TK_GGML_Q6_K && K % QK_K == 0) return ng * (size_t) (K / QK_K) * sizeof(tk_rp_q6_K);
    if (type == TK_GGML_Q5_K && K % QK_K == 0) return ng * (size_t) (K / QK_K) * sizeof(tk_rp_q5_K);
    if (type == TK_GGML_IQ4_XS && K % QK_K == 0) return ng * (size_t) (K / QK_K) * sizeof(tk_rp_iq4_xs);
    if (type == TK_GGML_BF16 && K % 2 == 0) return ng * (size_t) K * 2 * TK_RP_ROWS;
    return 0;
}

static void repack_q8_0(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t nb = K / QK32, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_q8_0 * o = (tk_rp_q8_0 *) (void *) dst;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t b = 0; b < nb; b++, o++) {
            memset(o, 0, sizeof *o);
            for (int r = 0; r < TK_RP_ROWS; r++) {
                const int64_t row = g * TK_RP_ROWS + r;
                if (row >= M) {   /* padding: d = 0 and q = 128 (the value 0) */
                    for (int k = 0; k < 8; k++) memset(o->q[k][r], 128, 4);
                    continue;
                }
                const blk_q8_0 * x = (const blk_q8_0 *) (const void *) (src + (size_t) row * row_bytes) + b;
                o->d[r] = x->d;
                for (int k = 0; k < 8; k++)
                    for (int i = 0; i < 4; i++) o->q[k][r][i] = (uint8_t) (x->qs[4 * k + i] + 128);
            }
        }
}

/* Q4_0 and IQ4_NL: the same block (f16 d, 16 bytes of nibbles) */
static void repack_q4_0(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t nb = K / QK32, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_q4_0 * o = (tk_rp_q4_0 *) (void *) dst;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t b = 0; b < nb; b++, o++) {
            memset(o, 0, sizeof *o);   /* padding: d = 0 */
            for (int r = 0; r < TK_RP_ROWS && g * TK_RP_ROWS + r < M; r++) {
                const blk_q4_0 * x = (const blk_q4_0 *) (const void *) (src + (size_t) (g * TK_RP_ROWS + r) * row_bytes) + b;
                o->d[r] = x->d;
                for (int k = 0; k < 4; k++) memcpy(o->q[k][r], x->qs + 4 * k, 4);
            }
        }
}

void tk_rp_q4x_table(int type, uint8_t u[16]) {
    for (int n = 0; n < 16; n++) u[n] = (uint8_t) ((type == TK_GGML_IQ4_NL ? tk_kvalues_iq4nl[n] : n - 8) + 128);
}

static void repack_q4_K(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t nb = K / QK_K, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_q4_K * o = (tk_rp_q4_K *) (void *) dst;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t i = 0; i < nb; i++, o++) {
            memset(o, 0, sizeof *o);
            for (int r = 0; r < TK_RP_ROWS; r++) {
                const int64_t row = g * TK_RP_ROWS + r;
                if (row >= M) continue;   /* padding: all zero */
                const blk_q4_K * x = (const blk_q4_K *) (const void *) (src + (size_t) row * row_bytes) + i;
                uint32_t u[4];
                uint8_t sm[16];
                tk_scales_k4(x->scales, u);
                memcpy(sm, u, 16);
                o->d[r] = x->d;
                o->dmin[r] = x->dmin;
                for (int j = 0; j < 8; j++) o->sc[j][r] = sm[j];
                for (int k = 0; k < 4; k++) {
                    o->mn[k][r][0] = sm[8 + 2 * k];
                    o->mn[k][r][1] = sm[8 + 2 * k + 1];
                }
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 8; k++) memcpy(o->q[c][k][r], x->qs + 32 * c + 4 * k, 4);
            }
        }
}

/* Q5_K: the file's bytes, byte k of the 16 rows' fields side by side (padding: all zero) */
static void repack_q5_K(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t nb = K / QK_K, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_q5_K * o = (tk_rp_q5_K *) (void *) dst;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t i = 0; i < nb; i++, o++) {
            memset(o, 0, sizeof *o);
            for (int r = 0; r < TK_RP_ROWS && g * TK_RP_ROWS + r < M; r++) {
                const blk_q5_K * x = (const blk_q5_K *) (const void *) (src + (size_t) (g * TK_RP_ROWS + r) * row_bytes) + i;
                o->d[r] = x->d;
                o->dmin[r] = x->dmin;
                for (int k = 0; k < 12; k++) o->s12[k][r] = x->scales[k];
                for (int k = 0; k < 8; k++) memcpy(o->qh[k][r], x->qh + 4 * k, 4);
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 8; k++) memcpy(o->q[c][k][r], x->qs + 32 * c + 4 * k, 4);
            }
        }
}

/* IQ4_XS: the file's bytes (padding: d = 0) */
static void repack_iq4_xs(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t nb = K / QK_K, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_iq4_xs * o = (tk_rp_iq4_xs *) (void *) dst;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t i = 0; i < nb; i++, o++) {
            memset(o, 0, sizeof *o);
            for (int r = 0; r < TK_RP_ROWS && g * TK_RP_ROWS + r < M; r++) {
                const blk_iq4_xs * x = (const blk_iq4_xs *) (const void *) (src + (size_t) (g * TK_RP_ROWS + r) * row_bytes) + i;
                o->d[r] = x->d;
                o->sh[0][r] = (uint8_t) (x->scales_h & 0xFF);
                o->sh[1][r] = (uint8_t) (x->scales_h >> 8);
                for (int j = 0; j < 4; j++) o->sl[j][r] = x->scales_l[j];
                for (int j = 0; j < 8; j++)
                    for (int k = 0; k < 4; k++) memcpy(o->q[j][k][r], x->qs + 16 * j + 4 * k, 4);
            }
        }
}

/* u(e) of a Q6_K block: the 6-bit value of element e + 32, in [0, 63]: element 128 h + 32 s + l is
 * the low nibble of ql[64 h + 32 (s & 1) + l] (s >= 2: high) with bits 2s, 2s + 1 of qh[32 h + l]
 * above it (qdot_kquants.c tk_vec_dot_q6_K_q8_K) */
static inline int q6_u(const blk_q6_K * x, int e) {
    const int h = e / 128, sb = (e / 32) % 4, l = e % 32;
    return ((x->ql[64 * h + 32 * (sb & 1) + l] >> (4 * (sb >> 1))) & 0xF) | (((x->qh[32 * h + l] >> (2 * sb)) & 3) << 4);
}

static void repack_q6_K(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t nb = K / QK_K, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    tk_rp_q6_K * o = (tk_rp_q6_K *) (void *) dst;
    for (int64_t g = 0; g < ng; g++)
        for (int64_t i = 0; i < nb; i++, o++) {
            memset(o, 0, sizeof *o);
            for (int r = 0; r < TK_RP_ROWS; r++) {
                const int64_t row = g * TK_RP_ROWS + r;
                if (row >= M) continue;   /* padding: d = 0 (and sc = 0) */
                const blk_q6_K * x = (const blk_q6_K *) (const void *) (src + (size_t) row * row_bytes) + i;
                o->d[r] = x->d;
                uint8_t u[QK_K];
                for (int e = 0; e < QK_K; e++) u[e] = (uint8_t) q6_u(x, e);
                for (int j = 0; j < 16; j++) o->sc[j / 2][r][j % 2] = x->scales[j];
                for (int j = 0; j < 16; j++)
                    for (int m = 0; m < 3; m++)
                        for (int l = 0; l < 4; l++)
                            o->q[j][m][r][l] = (uint8_t) (u[16 * j + 4 * m + l] | ((u[16 * j + 12 + l] >> (2 * m)) & 3) << 6);
            }
        }
}

static void repack_bf16(const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    const int64_t np = K / 2, ng = (M + TK_RP_ROWS - 1) / TK_RP_ROWS;
    /* row by row (the source read in order; a group's K * 32 bytes stay cached while written) */
    for (int64_t g = 0; g < ng; g++) {
        uint32_t * o = (uint32_t *) (void *) dst + (size_t) g * (size_t) np * TK_RP_ROWS;
        for (int r = 0; r < TK_RP_ROWS; r++) {
            const int64_t row = g * TK_RP_ROWS + r;
            const uint8_t * s = src + (size_t) row * row_bytes;
            for (int64_t j = 0; j < np; j++) {
                uint32_t v = 0;   /* padding: +0 */
                if (row < M) memcpy(&v, s + (size_t) j * 4, 4);
                o[j * TK_RP_ROWS + r] = v;
            }
        }
    }
}

void tk_repack_matrix(int type, const uint8_t * src, size_t row_bytes, int64_t K, int64_t M, uint8_t * dst) {
    if (type == TK_GGML_Q8_0) repack_q8_0(src, row_bytes, K, M, dst);
    else if (type == TK_GGML_Q4_0 || type == TK_GGML_IQ4_NL) repack_q4_0(src, row_bytes, K, M, dst);
    else if (type == TK_GGML_Q4_K) repack_q4_K(src, row_bytes, K, M, dst);
    else if (type == TK_GGML_Q6_K) repack_q6_K(src, row_bytes, K, M, dst);
    else if (type == TK_GGML_Q5_K) repack_q5_K(src, row_bytes, K, M, dst);
    else if (type == TK_GGML_IQ4_XS) repack_iq4_xs(src, row_bytes, K, M, dst);
    else if (type == TK_GGML_BF16) repack_bf16(src, row_bytes, K, M, dst);
}

/* ---- per-token terms (once per mat-mul, tk_matmul: in the activation scratch) ---------- */
size_t tk_rp_prep_bytes(int64_t n_tok, int64_t K) { return (size_t) n_tok * (size_t) (K / QK32) * 8 + 64; }

void tk_rp_prep(int type, const uint8_t * a, size_t a_bytes, int64_t K, int64_t n_tok, int64_t t0, int64_t t1,
                uint8_t * prep) {
    if (type == TK_GGML_Q8_0 || type == TK_GGML_Q4_0 || type == TK_GGML_IQ4_NL) {
        const int64_t nb = K / QK32;
        float * daf = (float *) (void *) prep;
        int32_t * neg = (int32_t *) (void *) (daf + n_tok * nb);
        for (int64_t t = t0; t < t1; t++)
            for (int64_t b = 0; b < nb; b++) {
                const blk_q8_0 * x = (const blk_q8_0 *) (const void *) (a + (size_t) t * a_bytes) + b;
                int32_t s = 0;
                for (int i = 0; i < QK32; i++) s += x->qs[i];
                daf[t * nb + b] = tkq_fp16_to_fp32(x->d);
                neg[t * nb + b] = -128 * s;
            }
    } else if (type == TK_GGML_Q4_K || type == TK_GGML_Q5_K || type == TK_GGML_IQ4_XS) {
        const int64_t nb = K / QK_K;
        float * daf = (float *) (void *) prep;
        int16_t * bs = (int16_t *) (void *) (daf + n_tok * nb);
        for (int64_t t = t0; t < t1; t++)
            for (int64_t i = 0; i < nb; i++) {
                const blk_q8_K * x = (const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i;
                daf[t * nb + i] = x->d;
                for (int j = 0; j < 8; j++) bs[(t * nb + i) * 8 + j] = (int16_t) (x->bsums[2 * j] + x->bsums[2 * j + 1]);
            }
    } else if (type == TK_GGML_Q6_K) {
        const int64_t nb = K / QK_K;
        float * daf = (float *) (void *) prep;
        int16_t * bs = (int16_t *) (void *) (daf + n_tok * nb);
        for (int64_t t = t0; t < t1; t++)
            for (int64_t i = 0; i < nb; i++) {
                const blk_q8_K * x = (const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i;
                daf[t * nb + i] = x->d;
                memcpy(bs + (t * nb + i) * 16, x->bsums, 16 * sizeof(int16_t));
            }
    }
}

/* ---- drives ------------------------------------------------------------------------- */
/* Token blocks of about 192 KiB of activations, a multiple of the tile's tmax tokens (at
 * least one tile); in a block, each group against the tokens tmax at a time (the group's
 * weights stay cached while the tokens pass).  Only the speed depends on it: every output's
 * order is the same in any block. */
static int64_t rp_token_block(size_t a_bytes, int tmax) {
    const int64_t tb = (int64_t) 196608 / (int64_t) (a_bytes ? a_bytes : 1);
    return tb < tmax ? tmax : tb - tb % tmax;
}

/* One loop for the types: `type` picks the block (QK32 / QK_K elements, the group's bytes)
 * and the per-token terms that follow daf in prep (Q8_0, Q4_0, IQ4_NL: one int32 per block;
 * Q4_K, Q5_K, IQ4_XS: 8 int16; Q6_K: 16 int16), and casts `tile` back to its own signature for the call. */
typedef void (*rp_any_fn)(void);
static void rp_drive(int type, rp_any_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                     size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    const int q4x = type == TK_GGML_Q4_0 || type == TK_GGML_IQ4_NL;
    const int64_t nb = K / (type == TK_GGML_Q8_0 || q4x ? QK32 : QK_K), tb = rp_token_block(a_bytes, 8);
    const size_t gbytes = (size_t) nb * (type == TK_GGML_Q8_0 ? sizeof(tk_rp_q8_0) : q4x ? sizeof(tk_rp_q4_0)
                                         : type == TK_GGML_Q4_K ? sizeof(tk_rp_q4_K)
                                         : type == TK_GGML_Q5_K ? sizeof(tk_rp_q5_K)
                                         : type == TK_GGML_IQ4_XS ? sizeof(tk_rp_iq4_xs) : sizeof(tk_rp_q6_K));
    const float * daf = (const float *) (const void *) prep;
    const int32_t * neg = (const int32_t *) (const void *) (daf + n_tok * nb);     /* Q8_0, Q4_0, IQ4_NL */
    const int16_t * bs = (const int16_t *) (const void *) (daf + n_tok * nb);      /* Q4_K, Q6_K */
    const int64_t nbs = type == TK_GGML_Q6_K ? 16 : 8;                              /* bsums per block */
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t n = t0 + tb < n_tok ? tb : n_tok - t0;
        for (int64_t g = g0; g < g1; g++) {
            const void * wg = wp + (size_t) g * gbytes;
            const int nr = (int) (M - g * TK_RP_ROWS < TK_RP_ROWS ? M - g * TK_RP_ROWS : TK_RP_ROWS);
            for (int64_t t = t0; t < t0 + n; t += 8) {
                const int T = (int) (t0 + n - t < 8 ? t0 + n - t : 8);
                const uint8_t * at = a + (size_t) t * a_bytes;
                float * yt = y + t * ldy + g * TK_RP_ROWS;
                if (type == TK_GGML_Q8_0)
                    ((tk_rp_q8_tile_fn) tile)((const tk_rp_q8_0 *) wg, nb, at, a_bytes, daf + t * nb, neg + t * nb, T, nr, yt, ldy);
                else if (q4x)
                    ((tk_rp_q4_0_tile_fn) tile)((const tk_rp_q4_0 *) wg, nb, at, a_bytes, daf + t * nb, neg + t * nb, T, nr, yt, ldy);
                else if (type == TK_GGML_Q5_K)
                    ((tk_rp_q5k_tile_fn) tile)((const tk_rp_q5_K *) wg, nb, at, a_bytes, daf + t * nb, bs + t * nb * nbs, T, nr,
                                               yt, ldy);
                else if (type == TK_GGML_IQ4_XS)
                    ((tk_rp_iq4xs_tile_fn) tile)((const tk_rp_iq4_xs *) wg, nb, at, a_bytes, daf + t * nb, bs + t * nb * nbs, T,
                                                 nr, yt, ldy);
                else if (type == TK_GGML_Q4_K)
                    ((tk_rp_q4k_tile_fn) tile)((const tk_rp_q4_K *) wg, nb, at, a_bytes, daf + t * nb, bs + t * nb * nbs, T, nr,
                                               yt, ldy);
                else
                    ((tk_rp_q6k_tile_fn) tile)((const tk_rp_q6_K *) wg, nb, at, a_bytes, daf + t * nb, bs + t * nb * nbs, T, nr,
                                               yt, ldy);
            }
        }
    }
}

void tk_rp_drive_q8_0(tk_rp_q8_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    rp_drive(TK_GGML_Q8_0, (rp_any_fn) tile, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_drive_q4_0(int type, tk_rp_q4_0_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    rp_drive(type, (rp_any_fn) tile, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_drive_q4_K(tk_rp_q4k_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    rp_drive(TK_GGML_Q4_K, (rp_any_fn) tile, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_drive_q5_K(tk_rp_q5k_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    rp_drive(TK_GGML_Q5_K, (rp_any_fn) tile, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_drive_iq4_xs(tk_rp_iq4xs_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                        size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    rp_drive(TK_GGML_IQ4_XS, (rp_any_fn) tile, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_drive_q6_K(tk_rp_q6k_tile_fn tile, const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a,
                      size_t a_bytes, int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    rp_drive(TK_GGML_Q6_K, (rp_any_fn) tile, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

void tk_rp_drive_bf16(tk_rp_bf16_tile_fn tile, int gmax, int tmax, const uint8_t * wp, int64_t K, int64_t M,
                      const uint8_t * a, size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    const int64_t np = K / 2;
    const size_t gsz = (size_t) np * 4 * TK_RP_ROWS;
    const int64_t tb = rp_token_block(a_bytes, tmax);
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t n = t0 + tb < n_tok ? tb : n_tok - t0;
        for (int64_t g = g0; g < g1; g += gmax) {
            const int G = (int) (g1 - g < gmax ? g1 - g : gmax);
            const int64_t last = (g + G - 1) * TK_RP_ROWS;
            const int nr = (int) (M - last < TK_RP_ROWS ? M - last : TK_RP_ROWS);
            for (int64_t t = t0; t < t0 + n; t += tmax) {
                const int T = (int) (t0 + n - t < tmax ? t0 + n - t : tmax);
                tile(G, T, wp + (size_t) g * gsz, gsz, np, a + (size_t) t * a_bytes, a_bytes, y + t * ldy + g * TK_RP_ROWS,
                     ldy, nr);
            }
        }
    }
}

/* ---- scalar tiles (the reference order, repack.h) ----------------------------------- */
/* BF16, the FMA kernels' order: fp32 activations, one fma chain per output over the columns */
static void rp_bf16_tile_scalar(int G, int T, const uint8_t * wg, size_t gsz, int64_t np, const uint8_t * a,
                                size_t a_bytes, float * y, int64_t ldy, int nr) {
    for (int g = 0; g < G; g++) {
        const uint32_t * w = (const uint32_t *) (const void *) (wg + (size_t) g * gsz);
        for (int t = 0; t < T; t++) {
            const float * x = (const float *) (const void *) (a + (size_t) t * a_bytes);
            for (int r = 0; r < (g == G - 1 ? nr : TK_RP_ROWS); r++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < np; j++) {
                    const uint32_t v = w[j * TK_RP_ROWS + r];
                    union { uint32_t u; float f; } e = {v << 16}, o = {v & 0xffff0000u};
                    acc = fmaf(e.f, x[2 * j], acc);
                    acc = fmaf(o.f, x[2 * j + 1], acc);
                }
                y[t * ldy + g * TK_RP_ROWS + r] = acc;
            }
        }
    }
}

static void rp_rows_bf16_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    (void) prep;
    tk_rp_drive_bf16(rp_bf16_tile_scalar, 1, 8, wp, K, M, a, a_bytes, n_tok, y, ldy, g0, g1);
}

static void rp_q8_tile_scalar(const tk_rp_q8_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                              const float * daf, const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t * q = ((const blk_q8_0 *) (const void *) (a + (size_t) t * a_bytes) + b)->qs;
                int32_t p = neg[t * nb + b];
                for (int k = 0; k < 8; k++)
                    for (int i = 0; i < 4; i++) p += (int32_t) wg[b].q[k][r][i] * q[4 * k + i];
                acc = fmaf(tkq_fp16_to_fp32(wg[b].d[r]) * daf[t * nb + b], (float) p, acc);
            }
            y[t * ldy + r] = acc;
        }
}

/* Q4_0, IQ4_NL: u = v(n) + 128 per nibble, then Q8_0's sum (from -128 * sum(a)) */
static inline void rp_q4x_tile_scalar(int type, const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                      const float * daf, const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    uint8_t u[16];
    tk_rp_q4x_table(type, u);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const int8_t * q = ((const blk_q8_0 *) (const void *) (a + (size_t) t * a_bytes) + b)->qs;
                int32_t p = neg[t * nb + b];
                for (int k = 0; k < 4; k++)
                    for (int i = 0; i < 4; i++) {
                        const uint8_t v = wg[b].q[k][r][i];
                        p += (int32_t) u[v & 15] * q[4 * k + i] + (int32_t) u[v >> 4] * q[16 + 4 * k + i];
                    }
                acc = fmaf(tkq_fp16_to_fp32(wg[b].d[r]) * daf[t * nb + b], (float) p, acc);
            }
            y[t * ldy + r] = acc;
        }
}

static void rp_q4_0_tile_scalar(const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                                const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    rp_q4x_tile_scalar(TK_GGML_Q4_0, wg, nb, a, a_bytes, daf, neg, T, nr, y, ldy);
}

static void rp_iq4_nl_tile_scalar(const tk_rp_q4_0 * wg, int64_t nb, const uint8_t * a, size_t a_bytes, const float * daf,
                                  const int32_t * neg, int T, int nr, float * y, int64_t ldy) {
    rp_q4x_tile_scalar(TK_GGML_IQ4_NL, wg, nb, a, a_bytes, daf, neg, T, nr, y, ldy);
}

static void rp_rows_q4_0_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_0(TK_GGML_Q4_0, rp_q4_0_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

static void rp_rows_iq4_nl_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                  int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_0(TK_GGML_IQ4_NL, rp_iq4_nl_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

static void rp_q4k_tile_scalar(const tk_rp_q4_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                               const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                const tk_rp_q4_K * w = wg + i;
                const int8_t * q = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
                const int16_t * s = bs + (t * nb + i) * 8;
                int32_t is = 0, ms = 0;
                for (int c = 0; c < 4; c++) {
                    int32_t lo = 0, hi = 0;
                    for (int k = 0; k < 8; k++)
                        for (int l = 0; l < 4; l++) {
                            const uint8_t v = w->q[c][k][r][l];
                            lo += (v & 15) * q[64 * c + 4 * k + l];
                            hi += (v >> 4) * q[64 * c + 32 + 4 * k + l];
                        }
                    is += lo * w->sc[2 * c][r] + hi * w->sc[2 * c + 1][r];
                }
                for (int k = 0; k < 4; k++) ms += w->mn[k][r][0] * s[2 * k] + w->mn[k][r][1] * s[2 * k + 1];
                const float da = daf[t * nb + i];
                acc = fmaf(tkq_fp16_to_fp32(w->d[r]) * da, (float) is, acc);
                acc = fmaf(-(tkq_fp16_to_fp32(w->dmin[r]) * da), (float) ms, acc);
            }
            y[t * ldy + r] = acc;
        }
}

static void rp_q6k_tile_scalar(const tk_rp_q6_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                               const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                const tk_rp_q6_K * w = wg + i;
                const int8_t * q = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
                const int16_t * s = bs + (t * nb + i) * 16;
                int32_t is = 0;
                for (int j = 0; j < 16; j++) {
                    int32_t p = -32 * s[j];
                    for (int l = 0; l < 4; l++) {
                        int u3 = 0;
                        for (int m = 0; m < 3; m++) {
                            const uint8_t v = w->q[j][m][r][l];
                            p += (v & 63) * q[16 * j + 4 * m + l];
                            u3 |= (v >> 6) << (2 * m);
                        }
                        p += u3 * q[16 * j + 12 + l];
                    }
                    is += w->sc[j / 2][r][j % 2] * p;
                }
                acc = fmaf(tkq_fp16_to_fp32(w->d[r]) * daf[t * nb + i], (float) is, acc);
            }
            y[t * ldy + r] = acc;
        }
}

/* Q5_K: Q4_K's sums with the 5th bit (qh) on the nibbles, the scales unpacked per row */
static void rp_q5k_tile_scalar(const tk_rp_q5_K * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                               const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                const tk_rp_q5_K * w = wg + i;
                const int8_t * q = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
                const int16_t * s = bs + (t * nb + i) * 8;
                uint8_t s12[12], sm[16];
                uint32_t u[4];
                for (int k = 0; k < 12; k++) s12[k] = w->s12[k][r];
                tk_scales_k4(s12, u);
                memcpy(sm, u, 16);   /* scales 0-7, mins 0-7 */
                int32_t is = 0, ms = 0;
                for (int c = 0; c < 4; c++) {
                    int32_t lo = 0, hi = 0;
                    for (int k = 0; k < 8; k++)
                        for (int l = 0; l < 4; l++) {
                            const uint8_t v = w->q[c][k][r][l], h = w->qh[k][r][l];
                            lo += ((v & 15) | (((h >> (2 * c)) & 1) << 4)) * q[64 * c + 4 * k + l];
                            hi += ((v >> 4) | (((h >> (2 * c + 1)) & 1) << 4)) * q[64 * c + 32 + 4 * k + l];
                        }
                    is += lo * sm[2 * c] + hi * sm[2 * c + 1];
                }
                for (int j = 0; j < 8; j++) ms += sm[8 + j] * s[j];
                const float da = daf[t * nb + i];
                acc = fmaf(tkq_fp16_to_fp32(w->d[r]) * da, (float) is, acc);
                acc = fmaf(-(tkq_fp16_to_fp32(w->dmin[r]) * da), (float) ms, acc);
            }
            y[t * ldy + r] = acc;
        }
}

/* IQ4_XS: per sub-block of 32 (ls - 32) * sum kvalues_iq4nl[n] a */
static void rp_iq4xs_tile_scalar(const tk_rp_iq4_xs * wg, int64_t nb, const uint8_t * a, size_t a_bytes,
                                 const float * daf, const int16_t * bs, int T, int nr, float * y, int64_t ldy) {
    (void) bs;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                const tk_rp_iq4_xs * w = wg + i;
                const int8_t * q = ((const blk_q8_K *) (const void *) (a + (size_t) t * a_bytes) + i)->qs;
                const unsigned sh = (unsigned) w->sh[0][r] | ((unsigned) w->sh[1][r] << 8);
                int32_t is = 0;
                for (int j = 0; j < 8; j++) {
                    const int ls = ((w->sl[j / 2][r] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
                    int32_t p = 0;
                    for (int k = 0; k < 4; k++)
                        for (int l = 0; l < 4; l++) {
                            const uint8_t v = w->q[j][k][r][l];
                            p += tk_kvalues_iq4nl[v & 15] * q[32 * j + 4 * k + l] + tk_kvalues_iq4nl[v >> 4] * q[32 * j + 16 + 4 * k + l];
                        }
                    is += (ls - 32) * p;
                }
                acc = fmaf(tkq_fp16_to_fp32(w->d[r]) * daf[t * nb + i], (float) is, acc);
            }
            y[t * ldy + r] = acc;
        }
}

static void rp_rows_q5_K_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q5_K(rp_q5k_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

static void rp_rows_iq4_xs_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                  int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_iq4_xs(rp_iq4xs_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

static void rp_rows_q6_K_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q6_K(rp_q6k_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

static void rp_rows_q8_0_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q8_0(rp_q8_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

static void rp_rows_q4_K_scalar(const uint8_t * wp, int64_t K, int64_t M, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, const uint8_t * prep, float * y, int64_t ldy, int64_t g0, int64_t g1) {
    tk_rp_drive_q4_K(rp_q4k_tile_scalar, wp, K, M, a, a_bytes, n_tok, prep, y, ldy, g0, g1);
}

/* Where re-laying pays (single thread, 3584 x 1024 weights x 512 tokens, tk_mat_mul against
 * tk_mat_mul_repacked, under load: docs/internals-kernels.md "Repacked weights"): avx512 all
 * three types (x2.5 Q8_0, x2.0 Q4_K, x1.5 Q6_K); avx2 Q8_0 (x1.9 with AVX-VNNI, x1.2-1.7 plain)
 * and Q4_K (x1.6 AVX-VNNI, x1.5 plain), Q4_0 and IQ4_NL (bench/README.md); Q6_K at avx2: see tk_repack_auto. */
int tk_repack_fast(int type, int level) {
#if defined(__x86_64__) && defined(__GNUC__)
    const int q4x = type == TK_GGML_Q4_0 || type == TK_GGML_IQ4_NL, q5xs = type == TK_GGML_Q5_K || type == TK_GGML_IQ4_XS;
    if (level == TK_CPU_AVX512) return type == TK_GGML_Q8_0 || type == TK_GGML_Q4_K || type == TK_GGML_Q6_K || type == TK_GGML_BF16 || q4x || q5xs;
    if (level == TK_CPU_AVX2) return type == TK_GGML_Q8_0 || type == TK_GGML_Q4_K || type == TK_GGML_Q6_K || type == TK_GGML_BF16 || q4x || q5xs;
#endif
    (void) type;
    (void) level;
    return 0;
}

/* What TK_REPACK_AUTO re-lays: the types whose re-laid form is faster for prompts and not
 * slower for generation, toolkit against toolkit (bench/README.md "Repacked weights by
 * default", Bamba 430M, 2 threads, under load 12-17): at avx512 pp512 2.5x Q8_0, 2.6x Q4_K_M,
 * 1.7x BF16; tg128 1.11x Q8_0, 1.34x Q4_K_M, BF16 tg32 0.99-1.27x in three pairs; Q4_K_M with
 * Q6_K re-laid against without it: tg64 in three pairs 1.24x, 1.84x, 0.76x (Q6_K's re-laid form
 * is 30% larger than the file's, but its row kernel is compute-bound).  At avx2 Q8_0's tiles
 * lost generation: without AVX-VNNI tg128 0.44x (pp512 1.31x) and tg32 0.70x, 1.03x, 0.93x in
 * three pairs; with AVX-VNNI tg32 0.84x, 0.94x, 0.84x.  A token must take the same kernel alone
 * and in a ubatch (repack.h), so there Q8_0 stays on the row kernels for prompts too, until a
 * one-token tile over the re-laid layout keeps up.  Q4_K at avx2 without AVX-VNNI: pp512 1.31x,
 * tg128 1.20x; BF16: pp512 1.62x, tg128 1.12x.  Q4_0 and IQ4_NL (Bamba 430M files, bench/README.md
 * "Q4_0 and IQ4_NL re-laid"): pp512 3.3-4.8x at avx512, 1.4-3.8x at avx2 with and without
 * AVX-VNNI; tg64 at avx2 1.06-2.8x in twelve pairs: re-laid at both levels.  Q5_K and IQ4_XS
 * (Bamba 430M Q5_K_M / IQ4_XS files, bench/README.md "Q5_K and IQ4_XS re-laid", under load 6-15):
 * at avx512 pp512 1.6-2.0x (Q5_K) and 2.7-3.2x (IQ4_XS), tg64 1.04x, 1.16x (Q5_K) and 0.96-1.76x
 * in five pairs (IQ4_XS): re-laid.  At avx2 without AVX-VNNI IQ4_XS lost prompts (pp512 0.88x,
 * 0.61x: the sign form's four operations per 32 bytes and token) and Q5_K generation (tg64 0.88x,
 * 0.83x, 0.65x: the 5th bit's shifts per line): both stay on the row kernels at avx2 (the AVX-VNNI
 * tiles not measured: no such machine here).  Q6_K in the file's
 * bytes (bench/README.md "Q6_K re-laid in the file's bytes", Bamba 430M Q4_K_M, default with
 * it against without it, 2 threads, under load 5-17): at avx512 against the 4384-byte form
 * pp512 0.92x, tg64 1.23x (medians of 7 pairs), re-laid; at avx2 without AVX-VNNI pp512 0.99x,
 * tg64 0.93x (medians of 13 pairs; one thread's 3584 x 1024 x 512 GEMM 1.3-1.4x the row
 * kernel): no win, so at avx2 Q6_K stays on the row kernels unless --repack. */
int tk_repack_auto(int type, int level) {
    if (level == TK_CPU_AVX2 && (type == TK_GGML_Q8_0 || type == TK_GGML_Q6_K)) return 0;
    if (level == TK_CPU_AVX2 && (type == TK_GGML_Q5_K || type == TK_GGML_IQ4_XS)) return 0;
    return tk_repack_fast(type, level);
}

tk_rp_rows_fn tk_repack_rows(int type, int level, int bf16dot) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (level == TK_CPU_AVX512 && type == TK_GGML_Q8_0) return tk_rp_rows_q8_0_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_Q4_K) return tk_rp_rows_q4_K_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_Q6_K) return tk_rp_rows_q6_K_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_Q4_0) return tk_rp_rows_q4_0_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_IQ4_NL) return tk_rp_rows_iq4_nl_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_Q5_K) return tk_rp_rows_q5_K_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_IQ4_XS) return tk_rp_rows_iq4_xs_avx512;
    if (level == TK_CPU_AVX512 && type == TK_GGML_BF16) return bf16dot ? tk_rp_rows_bf16_avx512 : tk_rp_rows_bf16_fma_avx512;
    if (level == TK_CPU_AVX2) {
        const int vnni = tk_cpu_avxvnni();
        if (type == TK_GGML_Q8_0) return vnni ? tk_rp_avxvnni_rows_q8_0 : tk_rp_avx2_rows_q8_0;
        if (type == TK_GGML_Q4_K) return vnni ? tk_rp_avxvnni_rows_q4_K : tk_rp_avx2_rows_q4_K;
        if (type == TK_GGML_Q6_K) return vnni ? tk_rp_avxvnni_rows_q6_K : tk_rp_avx2_rows_q6_K;
        if (type == TK_GGML_Q4_0) return vnni ? tk_rp_avxvnni_rows_q4_0 : tk_rp_avx2_rows_q4_0;
        if (type == TK_GGML_IQ4_NL) return vnni ? tk_rp_avxvnni_rows_iq4_nl : tk_rp_avx2_rows_iq4_nl;
        if (type == TK_GGML_Q5_K) return vnni ? tk_rp_avxvnni_rows_q5_K : tk_rp_avx2_rows_q5_K;
        if (type == TK_GGML_IQ4_XS) return vnni ? tk_rp_avxvnni_rows_iq4_xs : tk_rp_avx2_rows_iq4_xs;
        if (type == TK_GGML_BF16) return tk_rp_avx2_rows_bf16;
    }
#endif
    (void) level;
    if (type == TK_GGML_Q8_0) return rp_rows_q8_0_scalar;
    if (type == TK_GGML_Q4_K) return rp_rows_q4_K_scalar;
    if (type == TK_GGML_Q6_K) return rp_rows_q6_K_scalar;
    if (type == TK_GGML_Q4_0) return rp_rows_q4_0_scalar;
    if (type == TK_GGML_IQ4_NL) return rp_rows_iq4_nl_scalar;
    if (type == TK_GGML_Q5_K) return rp_rows_q5_K_scalar;
    if (type == TK_GGML_IQ4_XS) return rp_rows_iq4_xs_scalar;
    if (type == TK_GGML_BF16) return rp_rows_bf16_scalar;
    return NULL;
}

int tk_repack_act_f32_with(int type, int level, int bf16dot) {
    return type == TK_GGML_BF16 && !(level == TK_CPU_AVX512 && bf16dot);
}

int tk_repack_act_f32(int type, int level) { return tk_repack_act_f32_with(type, level, tk_cpu_bf16dot()); }
