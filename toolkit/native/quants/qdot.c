/* qdot.c: activation quantizers, scalar integer dot products of the 32-value block types,
 * and the scalar row kernels of every quantized type (contract in qdot.h).  Which kernel a
 * weight type takes at which level is the type table's (ggml_types.c).
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-cpu/quants.c (build 0c1e570): quantize_row_q8_*_ref
 * and ggml_vec_dot_{q4_0,q4_1,q5_0,q5_1,q8_0,iq4_nl}_*_generic.  The integer sums are
 * ggml's; the float part of every dot product here is one running sum over the blocks in
 * order: sumf += (d_w * d_a) * (float) sumi  [+ m_w * s_a for the types with a minimum].
 */
#include <math.h>
#include <string.h>

#include "quants/qdot.h"
#include "quants/quants_common.h"

/* ==== activation quantizers ========================================================== */

/* 1 when every x[0..n) is finite.  A block holding an inf or a NaN is written as d = NaN
 * (s = NaN), q = 0 at every level, so the non-finite value reaches the outputs as NaN, as
 * on the float path (ggml's quantizers differ here between its scalar and SIMD code). */
static int block_finite(const float * x, int n) {
    int ok = 1;
    for (int j = 0; j < n; j++) ok &= (x[j] - x[j]) == 0.0f;
    return ok;
}

/* Q8_0: d = amax / 127, q = rint(x * 127 / amax) (the scale and rounding of ggml's AVX2
 * quantize_row_q8_0; its _ref divides by d instead, which can differ by one ulp). */
void tk_quantize_act_q8_0(const float * x, void * vy, int64_t K) {
    blk_q8_0 * y = vy;
    for (int64_t b = 0; b < K / QK32; b++, x += QK32) {
        if (!block_finite(x, QK32)) {
            y[b].d = tkq_fp32_to_fp16(NAN);
            memset(y[b].qs, 0, QK32);
            continue;
        }
        float amax = 0.0f;
        for (int j = 0; j < QK32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[b].d = tkq_fp32_to_fp16(d);
        for (int j = 0; j < QK32; j++) y[b].qs[j] = (int8_t) nearest_int(x[j] * id);
    }
}

/* Q8_1: Q8_0 plus s = d * sum(q) (ggml quantize_row_q8_1). */
void tk_quantize_act_q8_1(const float * x, void * vy, int64_t K) {
    blk_q8_1 * y = vy;
    for (int64_t b = 0; b < K / QK32; b++, x += QK32) {
        if (!block_finite(x, QK32)) {
            y[b].d = y[b].s = tkq_fp32_to_fp16(NAN);
            memset(y[b].qs, 0, QK32);
            continue;
        }
        float amax = 0.0f;
        for (int j = 0; j < QK32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK32; j++) {
            y[b].qs[j] = (int8_t) nearest_int(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].d = tkq_fp32_to_fp16(d);
        y[b].s = tkq_fp32_to_fp16((float) sum * d);
    }
}

/* Q8_K (ggml quantize_row_q8_K_ref): max = the value of largest magnitude, iscale =
 * -127 / max, q = min(127, rint(iscale * x)), d = 1 / iscale, bsums over 16 values. */
void tk_quantize_act_q8_K(const float * x, void * vy, int64_t K) {
    blk_q8_K * y = vy;
    for (int64_t b = 0; b < K / QK_K; b++, x += QK_K) {
        if (!block_finite(x, QK_K)) {
            memset(&y[b], 0, sizeof(blk_q8_K));
            y[b].d = NAN;
            continue;
        }
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof(blk_q8_K));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t) (v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[j * 16 + i];
            y[b].bsums[j] = (int16_t) sum;
        }
        y[b].d = 1.0f / iscale;
    }
}

/* ==== scalar dot products, 32-value blocks =========================================== */

/* The 32 integer levels of one weight block, element order (low nibbles are elements
 * 0..15, high nibbles 16..31):
 *   Q8_0 q;  Q4_0 nibble - 8;  Q5_0 (nibble | fifth bit << 4) - 16;  IQ4_NL kvalues[nibble];
 *   Q4_1 nibble;  Q5_1 nibble | fifth bit << 4   (fifth bits: qh, a little-endian u32).
 * Every block starts with its f16 scale d; Q4_1/Q5_1 follow it with the f16 minimum m. */
static void block_levels(int wtype, const uint8_t * blk, int8_t q[QK32]) {
    uint32_t qh = 0;
    switch (wtype) {
        case TKQ_T_Q8_0: memcpy(q, blk + 2, QK32); return;
        case TKQ_T_Q5_0: memcpy(&qh, blk + 2, 4); break;
        case TKQ_T_Q5_1: memcpy(&qh, blk + 4, 4); break;
        default: break;
    }
    const uint8_t * qs = blk + (wtype == TKQ_T_Q4_0 || wtype == TKQ_T_IQ4_NL ? 2 : wtype == TKQ_T_Q4_1 ? 4 : wtype == TKQ_T_Q5_0 ? 6 : 8);
    for (int j = 0; j < QK32 / 2; j++) {
        int lo = qs[j] & 0xF, hi = qs[j] >> 4;
        switch (wtype) {
            case TKQ_T_Q4_0: lo -= 8; hi -= 8; break;
            case TKQ_T_Q5_0: lo = (lo | (int) (((qh >> j) << 4) & 0x10)) - 16; hi = (hi | (int) ((qh >> (j + 12)) & 0x10)) - 16; break;
            case TKQ_T_Q5_1: lo |= (int) (((qh >> j) << 4) & 0x10); hi |= (int) ((qh >> (j + 12)) & 0x10); break;
            case TKQ_T_IQ4_NL: lo = tk_kvalues_iq4nl[lo]; hi = tk_kvalues_iq4nl[hi]; break;
            default: break;   /* Q4_1 */
        }
        q[j] = (int8_t) lo;
        q[j + QK32 / 2] = (int8_t) hi;
    }
}

/* sum over blocks of (d_w d_a) * sum(levels * a.qs)  [+ m_w * s_a for Q4_1 / Q5_1, whose
 * Q8_1 activations carry s = d * sum(qs)] */
static float dot_blocks32(int wtype, size_t wbs, int64_t K, const uint8_t * w, const uint8_t * a) {
    const int with_min = wtype == TKQ_T_Q4_1 || wtype == TKQ_T_Q5_1;
    const size_t abs_ = with_min ? sizeof(blk_q8_1) : sizeof(blk_q8_0), aqs = with_min ? 4 : 2;
    float sumf = 0.0f;
    int8_t q[QK32];
    for (int64_t b = 0; b < K / QK32; b++, w += wbs, a += abs_) {
        block_levels(wtype, w, q);
        const int8_t * y = (const int8_t *) (a + aqs);
        int sumi = 0;
        for (int j = 0; j < QK32; j++) sumi += q[j] * y[j];
        tk_half dw, da, mw, sa;
        memcpy(&dw, w, 2);
        memcpy(&da, a, 2);
        float blk = (tkq_fp16_to_fp32(dw) * tkq_fp16_to_fp32(da)) * (float) sumi;
        if (with_min) {
            memcpy(&mw, w + 2, 2);
            memcpy(&sa, a + 2, 2);
            blk += tkq_fp16_to_fp32(mw) * tkq_fp16_to_fp32(sa);
        }
        sumf += blk;
    }
    return sumf;
}

float tk_vec_dot_q8_0_q8_0(int64_t K, const void * w, const void * a) { return dot_blocks32(TKQ_T_Q8_0, sizeof(blk_q8_0), K, w, a); }
float tk_vec_dot_q4_0_q8_0(int64_t K, const void * w, const void * a) { return dot_blocks32(TKQ_T_Q4_0, sizeof(blk_q4_0), K, w, a); }
float tk_vec_dot_q5_0_q8_0(int64_t K, const void * w, const void * a) { return dot_blocks32(TKQ_T_Q5_0, sizeof(blk_q5_0), K, w, a); }
float tk_vec_dot_iq4_nl_q8_0(int64_t K, const void * w, const void * a) { return dot_blocks32(TKQ_T_IQ4_NL, sizeof(blk_iq4_nl), K, w, a); }
float tk_vec_dot_q4_1_q8_1(int64_t K, const void * w, const void * a) { return dot_blocks32(TKQ_T_Q4_1, sizeof(blk_q4_1), K, w, a); }
float tk_vec_dot_q5_1_q8_1(int64_t K, const void * w, const void * a) { return dot_blocks32(TKQ_T_Q5_1, sizeof(blk_q5_1), K, w, a); }

/* ==== row kernels ===================================================================== */

/* The scalar row kernel: one dot product per output, rows outer (a weight row is read once
 * per call, from cache for every token after the first). */
#define SCALAR_ROWS(NAME, FN)                                                                        \
    void NAME(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,       \
              int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {                         \
        for (int64_t r = r0; r < r1; r++)                                                            \
            for (int64_t t = 0; t < n_tok; t++)                                                      \
                y[t * ldy + r] = FN(K, w + (size_t) r * row_bytes, a + (size_t) t * a_bytes);        \
    }
SCALAR_ROWS(tk_qdot_rows_q8_0_scalar, tk_vec_dot_q8_0_q8_0)
SCALAR_ROWS(tk_qdot_rows_q4_0_scalar, tk_vec_dot_q4_0_q8_0)
SCALAR_ROWS(tk_qdot_rows_q5_0_scalar, tk_vec_dot_q5_0_q8_0)
SCALAR_ROWS(tk_qdot_rows_iq4_nl_scalar, tk_vec_dot_iq4_nl_q8_0)
SCALAR_ROWS(tk_qdot_rows_q4_1_scalar, tk_vec_dot_q4_1_q8_1)
SCALAR_ROWS(tk_qdot_rows_q5_1_scalar, tk_vec_dot_q5_1_q8_1)
SCALAR_ROWS(tk_qdot_rows_q2_K_scalar, tk_vec_dot_q2_K_q8_K)
SCALAR_ROWS(tk_qdot_rows_q3_K_scalar, tk_vec_dot_q3_K_q8_K)
SCALAR_ROWS(tk_qdot_rows_q4_K_scalar, tk_vec_dot_q4_K_q8_K)
SCALAR_ROWS(tk_qdot_rows_q5_K_scalar, tk_vec_dot_q5_K_q8_K)
SCALAR_ROWS(tk_qdot_rows_q6_K_scalar, tk_vec_dot_q6_K_q8_K)
SCALAR_ROWS(tk_qdot_rows_iq4_xs_scalar, tk_vec_dot_iq4_xs_q8_K)
