/* qdot_kquants.c: scalar integer dot products of k-quant / IQ4_XS weight rows with Q8_K
 * activation rows (the reference every SIMD kernel is checked against).
 *
 * Inputs of every function: K (a multiple of QK_K = 256), w = one weight row of K/256
 * super-blocks (blk_q2_K ... blk_iq4_xs), a = one activation row of K/256 blk_q8_K.
 * Output: the float32 dot product.
 *
 * Within a super-block everything is integer and exact (int32 never overflows: the
 * largest |isum| is for IQ4_XS, 32 * 127 * 127 * 256 < 2^28).  Per super-block i, with
 * d8 = a[i].d and the weight's own fp16 scales converted exactly to float:
 *
 *   Q2_K, Q4_K, Q5_K   weight = d * sc_j * q - dmin * m_j       (sc_j, m_j: sub-block scale, min)
 *       isum = sum_j sc_j * sum_{l in j} q_l * q8_l
 *       msum = sum_j m_j  * sum_{l in j} q8_l               (from the Q8_K bsums)
 *       sumf += (d8 * d) * (float) isum - (d8 * dmin) * (float) msum
 *   Q3_K, Q6_K, IQ4_XS weight = d * sc_j * q                 (q signed, sc_j signed)
 *       sumf += (d8 * d) * (float) isum
 *
 * with sumf one running float starting at 0, super-blocks in order.  The float products
 * (d8 * d) etc. are each rounded once; the expressions are written so that a compiler that
 * contracts a*b+c (aarch64 gcc in gnu mode) may fuse them: the reference is defined only
 * to float reordering/contraction, its integer parts are exact.
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-cpu/quants.c ggml_vec_dot_{q2_K,q3_K,q4_K,q5_K,
 * q6_K,iq4_xs}_q8_K_generic (same integer sums; ggml keeps 8 float lanes or a float per
 * 32-value sub-block instead of one float per super-block).
 */
#include <stdint.h>
#include <string.h>

#include "quants/qdot.h"

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block
 * (ggml-quants.c get_scale_min_k4) */
static inline void kq_scale_min_k4(int j, const uint8_t * q, int * sc, int * m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---- Q2_K: 16 sub-blocks of 16, 4-bit scale and 4-bit min each ------------------------ */
float tk_vec_dot_q2_K_q8_K(int64_t K, const void * w, const void * a) {
    const blk_q2_K * x = (const blk_q2_K *) w;
    const blk_q8_K * y = (const blk_q8_K *) a;
    const int64_t nb = K / QK_K;
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t * q2 = x[i].qs;
        const int8_t * q8 = y[i].qs;
        const uint8_t * sc = x[i].scales;
        int32_t msum = 0;
        for (int j = 0; j < 16; j++) msum += (int32_t) y[i].bsums[j] * (sc[j] >> 4);
        /* element 128*h + 32*s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32*h + l];
         * its sub-block is 8*h + 2*s + l/16 */
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < 4; s++) {
                const int shift = 2 * s;
                for (int half = 0; half < 2; half++) {
                    int32_t sub = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++) sub += q8[l] * ((q2[l] >> shift) & 3);
                    isum += (sc[8 * h + 2 * s + half] & 0xF) * sub;
                }
                q8 += 32;
            }
            q2 += 32;
        }
        const float dall = y[i].d * tkq_fp16_to_fp32(x[i].d);
        const float dmin = y[i].d * tkq_fp16_to_fp32(x[i].dmin);
        sumf += dall * (float) isum - dmin * (float) msum;
    }
    return sumf;
}

/* ---- Q3_K: 16 sub-blocks of 16, signed 6-bit scales (stored + 32), q in [-4, 3] ------- */
float tk_vec_dot_q3_K_q8_K(int64_t K, const void * w, const void * a) {
    const blk_q3_K * x = (const blk_q3_K *) w;
    const blk_q8_K * y = (const blk_q8_K *) a;
    const int64_t nb = K / QK_K;
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        /* scales: low 4 bits in bytes 0..7 (sub-blocks j and j + 8 share byte j % 8),
         * high 2 bits in bytes 8..11 (ggml's kmask1/kmask2 unpacking, written per byte) */
        const uint8_t * s = x[i].scales;
        int scale[16];
        for (int j = 0; j < 16; j++) {
            const int lo = (s[j % 8] >> (4 * (j / 8))) & 0xF;
            const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
            scale[j] = (lo | (hi << 4)) - 32;
        }
        const uint8_t * q3 = x[i].qs;
        const uint8_t * hm = x[i].hmask;
        const int8_t * q8 = y[i].qs;
        /* element 128*h + 32*s + l: low bits 2s..2s+1 of qs[32*h + l], high bit (4*h + s)
         * of hmask[l]; value = low - (high ? 0 : 4) */
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            for (int s2 = 0; s2 < 4; s2++) {
                const int shift = 2 * s2;
                const uint8_t m = (uint8_t) (1u << (4 * h + s2));
                for (int half = 0; half < 2; half++) {
                    int32_t sub = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int q = ((q3[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        sub += q8[l] * q;
                    }
                    isum += scale[8 * h + 2 * s2 + half] * sub;
                }
                q8 += 32;
            }
            q3 += 32;
        }
        const float d = y[i].d * tkq_fp16_to_fp32(x[i].d);
        sumf += d * (float) isum;
    }
    return sumf;
}

/* ---- Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scale and min each ----------------------
 * Sub-block 2c: low nibbles of qs[32c .. 32c+32), sub-block 2c+1: high nibbles; Q5_K adds
 * a 5th bit, bit j of qh[l] for sub-block j.  Both blocks start d, dmin, scales[12]. */
static float kq_dot_q4q5(int64_t K, const uint8_t * w, size_t bs, const uint8_t * (*qs_of)(const uint8_t *),
                         const uint8_t * (*qh_of)(const uint8_t *), const blk_q8_K * y) {
    const int64_t nb = K / QK_K;
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++, w += bs) {
        const uint8_t * q4 = qs_of(w), * qh = qh_of ? qh_of(w) : NULL, * scales = w + 4;
        const int8_t * q8 = y[i].qs;
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kq_scale_min_k4(j, scales, &sc, &m);
            const int shift = 4 * (j & 1);
            int32_t sub = 0;
            if (qh) for (int l = 0; l < 32; l++) sub += q8[l] * (((q4[l] >> shift) & 0xF) | (((qh[l] >> j) & 1) << 4));
            else for (int l = 0; l < 32; l++) sub += q8[l] * ((q4[l] >> shift) & 0xF);
            isum += sc * sub;
            msum += m * ((int32_t) y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
            q8 += 32;
            if (j & 1) q4 += 32;
        }
        tk_half dh, mh;
        memcpy(&dh, w, 2);
        memcpy(&mh, w + 2, 2);
        const float d = y[i].d * tkq_fp16_to_fp32(dh);
        const float dmin = y[i].d * tkq_fp16_to_fp32(mh);
        sumf += d * (float) isum - dmin * (float) msum;
    }
    return sumf;
}

static const uint8_t * q4k_qs(const uint8_t * b) { return ((const blk_q4_K *) (const void *) b)->qs; }
static const uint8_t * q5k_qs(const uint8_t * b) { return ((const blk_q5_K *) (const void *) b)->qs; }
static const uint8_t * q5k_qh(const uint8_t * b) { return ((const blk_q5_K *) (const void *) b)->qh; }

float tk_vec_dot_q4_K_q8_K(int64_t K, const void * w, const void * a) {
    return kq_dot_q4q5(K, w, sizeof(blk_q4_K), q4k_qs, NULL, a);
}

float tk_vec_dot_q5_K_q8_K(int64_t K, const void * w, const void * a) {
    return kq_dot_q4q5(K, w, sizeof(blk_q5_K), q5k_qs, q5k_qh, a);
}

/* ---- Q6_K: 16 sub-blocks of 16, signed 8-bit scales, q = 6 bits - 32 ------------------- */
float tk_vec_dot_q6_K_q8_K(int64_t K, const void * w, const void * a) {
    const blk_q6_K * x = (const blk_q6_K *) w;
    const blk_q8_K * y = (const blk_q8_K *) a;
    const int64_t nb = K / QK_K;
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t * ql = x[i].ql;
        const uint8_t * qh = x[i].qh;
        const int8_t * q8 = y[i].qs;
        const int8_t * sc = x[i].scales;
        /* element 128*h + 32*s + l: low nibble (s odd: of ql[64h + 32 + l], s even: of
         * ql[64h + l]; s >= 2: high nibble), bits 2s..2s+1 of qh[32h + l] */
        int32_t isum = 0;
        for (int h = 0; h < 2; h++) {
            for (int s = 0; s < 4; s++) {
                const uint8_t * lo = ql + 32 * (s & 1);
                const int nshift = 4 * (s >> 1);
                for (int half = 0; half < 2; half++) {
                    int32_t sub = 0;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int q = (((lo[l] >> nshift) & 0xF) | (((qh[l] >> (2 * s)) & 3) << 4)) - 32;
                        sub += q8[l] * q;
                    }
                    isum += sc[8 * h + 2 * s + half] * sub;
                }
                q8 += 32;
            }
            ql += 64;
            qh += 32;
        }
        const float d = y[i].d * tkq_fp16_to_fp32(x[i].d);
        sumf += d * (float) isum;
    }
    return sumf;
}

/* ---- IQ4_XS: 8 sub-blocks of 32, 6-bit scales (stored + 32), non-linear 4-bit codes ----- */
float tk_vec_dot_iq4_xs_q8_K(int64_t K, const void * w, const void * a) {
    const blk_iq4_xs * x = (const blk_iq4_xs *) w;
    const blk_q8_K * y = (const blk_q8_K *) a;
    const int64_t nb = K / QK_K;
    float sumf = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t * qs = x[i].qs;
        const int8_t * q8 = y[i].qs;
        const unsigned sh = x[i].scales_h;
        int32_t isum = 0;
        /* sub-block j: low nibbles of qs[16j .. 16j+16) then their high nibbles */
        for (int j = 0; j < 8; j++) {
            const int ls = ((x[i].scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4);
            int32_t sub = 0;
            for (int l = 0; l < 16; l++) {
                sub += q8[l] * tk_kvalues_iq4nl[qs[l] & 0xF];
                sub += q8[l + 16] * tk_kvalues_iq4nl[qs[l] >> 4];
            }
            isum += (ls - 32) * sub;
            qs += 16;
            q8 += 32;
        }
        const float d = y[i].d * tkq_fp16_to_fp32(x[i].d);
        sumf += d * (float) isum;
    }
    return sumf;
}
