/* quants_iquants.c: the non-linear types IQ4_NL (32-value blocks) and IQ4_XS (256-value
 * super-blocks): their code book, ggml's quantizer (without and with an imatrix) and
 * dequantizers, bit-exact with llama-quantize.
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-quants.c at build 0c1e570: quantize_row_iq4_nl_impl
 * (ntry = 7, as quantize_iq4_nl / quantize_iq4_xs call it), dequantize_row_iq4_*.  Every
 * arithmetic expression keeps ggml's operation order and float types; floating-point
 * contraction is off, as in ggml-base's baseline x86-64 build.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <math.h>
#include <string.h>

#include "quants/quants_common.h"

/* IQ4_NL / IQ4_XS non-linear code book (ggml-common.h kvalues_iq4nl) */
const int8_t tk_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* index of the code-book value nearest to x (val sorted ascending, n entries) */
static inline int best_index_int8(int n, const int8_t * val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav; else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ==== quantizers ==================================================================== */

/* One super-block of super_block_size values in blocks of block_size, no imatrix
 * (weight = x^2), ntry = 7 as quantize_iq4_nl / quantize_iq4_xs call it. */
static void iq4_nl_impl(const int super_block_size, const int block_size, const float * x,
                        tk_half * dh, uint8_t * q4, uint16_t * scales_h, uint8_t * scales_l,
                        float * scales, float * weight, uint8_t * L, const int8_t * values,
                        const float * quant_weights, const int ntry) {
    float sigma2 = 0;
    for (int j = 0; j < super_block_size; ++j) sigma2 += x[j]*x[j];
    sigma2 *= 2.f/super_block_size;

    memset(q4, 0, super_block_size/2);
    dh[0] = FP32_TO_FP16(0.f);

    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < super_block_size/block_size; ++ib) {
        const float * xb = x + ib*block_size;
        uint8_t * Lb = L + ib*block_size;
        if (quant_weights) {
            const float * qw = quant_weights + ib*block_size;
            for (int j = 0; j < block_size; ++j) weight[j] = qw[j] * sqrtf(sigma2 + xb[j]*xb[j]);
        } else {
            for (int j = 0; j < block_size; ++j) weight[j] = xb[j]*xb[j];
        }
        float amax = 0, max = 0;
        for (int j = 0; j < block_size; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = ntry > 0 ? -max/values[0] : max/values[0];
        float id = 1/d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < block_size; ++j) {
            float al = id*xb[j];
            int l = best_index_int8(16, values, al);
            Lb[j] = (uint8_t) l;
            float q = values[l];
            float w = weight[j];
            sumqx += w*q*xb[j];
            sumq2 += w*q*q;
        }
        d = sumq2 > 0 ? sumqx/sumq2 : 0.f;
        float best = d*sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0])/max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < block_size; ++j) {
                float al = id*xb[j];
                int l = best_index_int8(16, values, al);
                float q = values[l];
                float w = weight[j];
                sumqx += w*q*xb[j];
                sumq2 += w*q*q;
            }
            if (sumq2 > 0 && sumqx*sumqx > best*sumq2) {
                d = sumqx/sumq2; best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }
    }

    if (super_block_size/block_size > 1) {
        int nb = super_block_size/block_size;
        memset(scales_h, 0, ((nb+7)/8)*sizeof(uint16_t));
        float d = -max_scale/32;
        dh[0] = FP32_TO_FP16(d);
        float id = d ? 1/d : 0.f;
        for (int ib = 0; ib < super_block_size/block_size; ++ib) {
            int l = nearest_int(id*scales[ib]);
            l = TKQ_MAX(-32, TKQ_MIN(31, l));
            float dl = d * l;
            float idl = dl ? 1/dl : 0.f;
            uint8_t * Lb = L + ib*block_size;
            const float * xb = x + ib*block_size;
            for (int j = 0; j < block_size; ++j) Lb[j] = (uint8_t) best_index_int8(16, values, idl*xb[j]);
            l += 32;
            uint8_t l_l = l & 0xf;
            uint8_t l_h = l >>  4;
            if (ib%2 == 0) scales_l[ib/2] = l_l;
            else scales_l[ib/2] |= (l_l << 4);
            scales_h[ib/8] |= (uint16_t) (l_h << 2*(ib%8));
        }
    } else {
        dh[0] = FP32_TO_FP16(scales[0]);
        if (ntry > 0) {
            float id = scales[0] ? 1/scales[0] : 0;
            for (int j = 0; j < super_block_size; ++j) L[j] = (uint8_t) best_index_int8(16, values, id*x[j]);
        }
    }

    for (int i = 0; i < super_block_size/32; ++i) {
        for (int j = 0; j < 16; ++j) q4[16*i + j] = L[32*i + j] | (L[32*i + 16 + j] << 4);
    }
}

/* quant_weights: the imatrix of this row ([k] floats) or NULL */
static void quantize_iq4_nl_w(const float * x, blk_iq4_nl * y, int64_t k, const float * quant_weights) {
    uint8_t L[QK32];
    float weight[QK32];
    uint16_t unused_h;
    float scale;
    for (int64_t ib = 0; ib < k / QK32; ++ib) {
        const float * qw = quant_weights ? quant_weights + QK32*ib : NULL;
        iq4_nl_impl(QK32, 32, x + QK32*ib, &y[ib].d, y[ib].qs, &unused_h, NULL, &scale, weight, L, tk_kvalues_iq4nl, qw, 7);
    }
}

static void quantize_iq4_xs_w(const float * x, blk_iq4_xs * y, int64_t k, const float * quant_weights) {
    uint8_t L[QK_K];
    float weight[32];
    float scales[QK_K/32];
    for (int64_t ib = 0; ib < k / QK_K; ++ib) {
        const float * qw = quant_weights ? quant_weights + QK_K*ib : NULL;
        uint16_t sh;
        iq4_nl_impl(QK_K, 32, x + QK_K*ib, &y[ib].d, y[ib].qs, &sh, y[ib].scales_l, scales, weight, L, tk_kvalues_iq4nl, qw, 7);
        y[ib].scales_h = sh;
    }
}

static void quantize_iq4_nl(const float * x, blk_iq4_nl * y, int64_t k) { quantize_iq4_nl_w(x, y, k, NULL); }
static void quantize_iq4_xs(const float * x, blk_iq4_xs * y, int64_t k) { quantize_iq4_xs_w(x, y, k, NULL); }

/* ==== dequantizers ================================================================== */

static void dequant_iq4_nl(const blk_iq4_nl * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = FP16_TO_FP32(x[i].d);
        for (int j = 0; j < QK32/2; ++j) {
            y[j] = d * tk_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + QK32/2] = d * tk_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
        y += QK32;
    }
}

static void dequant_iq4_xs(const blk_iq4_xs * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const uint8_t * qs = x[i].qs;
        const float d = FP16_TO_FP32(x[i].d);
        const uint16_t scales_h = x[i].scales_h;
        for (int ib = 0; ib < QK_K/32; ++ib) {
            const int ls = ((x[i].scales_l[ib/2] >> 4*(ib%2)) & 0xf) | (((scales_h >> 2*ib) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j +  0] = dl * tk_kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * tk_kvalues_iq4nl[qs[j] >>  4];
            }
            y += 32; qs += 16;
        }
    }
}

/* ==== the table's entry points (quants.h) =========================================== */

TKQ_EXPORT_ROWS(iq4_nl, blk_iq4_nl) TKQ_EXPORT_ROWS(iq4_xs, blk_iq4_xs)
TKQ_EXPORT_IMATRIX(iq4_nl, blk_iq4_nl) TKQ_EXPORT_IMATRIX(iq4_xs, blk_iq4_xs)
