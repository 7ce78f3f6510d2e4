/* quants_legacy.c: the 32-value block types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: ggml's
 * quantizers (without and with an imatrix) and dequantizers, bit-exact with llama-quantize.
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-quants.c at build 0c1e570: quantize_row_*_ref (no
 * imatrix), quantize_row_*_impl (imatrix; Q8_0 has none), dequantize_row_*.  Every
 * arithmetic expression keeps ggml's operation order and float types: the output bytes
 * depend on it.  ggml-base is compiled for baseline x86-64 without FMA, so floating-point
 * contraction is switched off here too (a*b+c must not become fma).
 * The activation quantizers of the integer dot (Q8_0 / Q8_1 / Q8_K) are qdot.c's.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <float.h>
#include <math.h>
#include <string.h>

#include "quants/quants_common.h"

/* ==== quantizers, no imatrix ======================================================== */

static void quantize_q4_0(const float * x, blk_q4_0 * y, int64_t k) {
    const int64_t nb = k / QK32;
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK32; j++) {
            const float v = x[i*QK32 + j];
            if (amax < fabsf(v)) { amax = fabsf(v); max = v; }
        }
        const float d = max / -8;
        const float id = d ? 1.0f/d : 0.0f;
        y[i].d = FP32_TO_FP16(d);
        for (int j = 0; j < QK32/2; ++j) {
            const float x0 = x[i*QK32 + 0      + j]*id;
            const float x1 = x[i*QK32 + QK32/2 + j]*id;
            const uint8_t xi0 = TKQ_MIN(15, (int8_t)(x0 + 8.5f));
            const uint8_t xi1 = TKQ_MIN(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = xi0 | (uint8_t)(xi1 << 4);
        }
    }
}

static void quantize_q4_1(const float * x, blk_q4_1 * y, int64_t k) {
    const int64_t nb = k / QK32;
    for (int64_t i = 0; i < nb; i++) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK32; j++) {
            const float v = x[i*QK32 + j];
            if (v < min) min = v;
            if (v > max) max = v;
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f/d : 0.0f;
        y[i].d = FP32_TO_FP16(d);
        y[i].m = FP32_TO_FP16(min);
        for (int j = 0; j < QK32/2; ++j) {
            const float x0 = (x[i*QK32 + 0      + j] - min)*id;
            const float x1 = (x[i*QK32 + QK32/2 + j] - min)*id;
            const uint8_t xi0 = TKQ_MIN(15, (int8_t)(x0 + 0.5f));
            const uint8_t xi1 = TKQ_MIN(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = xi0 | (uint8_t)(xi1 << 4);
        }
    }
}

static void quantize_q5_0(const float * x, blk_q5_0 * y, int64_t k) {
    const int64_t nb = k / QK32;
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK32; j++) {
            const float v = x[i*QK32 + j];
            if (amax < fabsf(v)) { amax = fabsf(v); max = v; }
        }
        const float d = max / -16;
        const float id = d ? 1.0f/d : 0.0f;
        y[i].d = FP32_TO_FP16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK32/2; ++j) {
            const float x0 = x[i*QK32 + 0      + j]*id;
            const float x1 = x[i*QK32 + QK32/2 + j]*id;
            const uint8_t xi0 = TKQ_MIN(31, (int8_t)(x0 + 16.5f));
            const uint8_t xi1 = TKQ_MIN(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK32/2);
        }
        memcpy(y[i].qh, &qh, sizeof qh);
    }
}

static void quantize_q5_1(const float * x, blk_q5_1 * y, int64_t k) {
    const int64_t nb = k / QK32;
    for (int64_t i = 0; i < nb; i++) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK32; j++) {
            const float v = x[i*QK32 + j];
            if (v < min) min = v;
            if (v > max) max = v;
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f/d : 0.0f;
        y[i].d = FP32_TO_FP16(d);
        y[i].m = FP32_TO_FP16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK32/2; ++j) {
            const float x0 = (x[i*QK32 + 0      + j] - min)*id;
            const float x1 = (x[i*QK32 + QK32/2 + j] - min)*id;
            const uint8_t xi0 = (uint8_t)(x0 + 0.5f);
            const uint8_t xi1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK32/2);
        }
        memcpy(y[i].qh, &qh, sizeof qh);
    }
}

static void quantize_q8_0(const float * x, blk_q8_0 * y, int64_t k) {
    const int64_t nb = k / QK32;
    for (int64_t i = 0; i < nb; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK32; j++) {
            const float v = x[i*QK32 + j];
            amax = TKQ_MAX(amax, fabsf(v));
        }
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f/d : 0.0f;
        y[i].d = FP32_TO_FP16(d);
        for (int j = 0; j < QK32; ++j) {
            const float x0 = x[i*QK32 + j]*id;
            y[i].qs[j] = (int8_t) roundf(x0);
        }
    }
}

/* ==== quantizers with an imatrix: ggml's quantize_row_*_impl ======================== */

/* legacy types with an imatrix: sigma2 is over the whole row */
static float row_sigma2(const float * x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; ++j) sum_x2 += x[j]*x[j];
    return sum_x2/n;
}

static void quantize_q4_0_w(const float * x, blk_q4_0 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[QK32];
    int8_t L[QK32];
    const float sigma2 = row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row/QK32; ++ib) {
        const float * xb = x + QK32 * ib;
        const float * qw = quant_weights + QK32 * ib;
        for (int j = 0; j < QK32; ++j) weight[j] = qw[j] * sqrtf(sigma2 + xb[j]*xb[j]);
        float d = make_qx_quants(QK32, 8, xb, L, 1, weight);
        y[ib].d = FP32_TO_FP16(d);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = L[j] | (L[j+16] << 4);
    }
}

static void quantize_q4_1_w(const float * x, blk_q4_1 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[QK32];
    uint8_t L[QK32], Laux[QK32];
    const float sigma2 = row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row/QK32; ++ib) {
        const float * xb = x + QK32 * ib;
        const float * qw = quant_weights + QK32 * ib;
        for (int j = 0; j < QK32; ++j) weight[j] = qw[j] * sqrtf(sigma2 + xb[j]*xb[j]);
        float min;
        float d = make_qkx3_quants(QK32, 15, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, 0);
        y[ib].d = FP32_TO_FP16(d);
        y[ib].m = FP32_TO_FP16(-min);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = L[j] | (L[j+16] << 4);
    }
}

static void quantize_q5_0_w(const float * x, blk_q5_0 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[QK32];
    int8_t L[QK32];
    const float sigma2 = row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row/QK32; ++ib) {
        const float * xb = x + QK32 * ib;
        const float * qw = quant_weights + QK32 * ib;
        for (int j = 0; j < QK32; ++j) weight[j] = qw[j] * sqrtf(sigma2 + xb[j]*xb[j]);
        float d = make_qx_quants(QK32, 16, xb, L, 1, weight);
        y[ib].d = FP32_TO_FP16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const uint8_t xi0 = L[j], xi1 = L[j+16];
            y[ib].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK32/2);
        }
        memcpy(y[ib].qh, &qh, sizeof qh);
    }
}

static void quantize_q5_1_w(const float * x, blk_q5_1 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[QK32];
    uint8_t L[QK32], Laux[QK32];
    const float sigma2 = row_sigma2(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row/QK32; ++ib) {
        const float * xb = x + QK32 * ib;
        const float * qw = quant_weights + QK32 * ib;
        for (int j = 0; j < QK32; ++j) weight[j] = qw[j] * sqrtf(sigma2 + xb[j]*xb[j]);
        float min;
        float d = make_qkx3_quants(QK32, 31, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, 0);
        y[ib].d = FP32_TO_FP16(d);
        y[ib].m = FP32_TO_FP16(-min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            const uint8_t xi0 = L[j], xi1 = L[j+16];
            y[ib].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK32/2);
        }
        memcpy(y[ib].qh, &qh, sizeof qh);
    }
}

/* ==== dequantizers ================================================================== */

static void dequant_q4_0(const blk_q4_0 * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = FP16_TO_FP32(x[i].d);
        for (int j = 0; j < QK32/2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >>   4) - 8;
            y[i*QK32 + j] = x0*d;
            y[i*QK32 + j + QK32/2] = x1*d;
        }
    }
}

static void dequant_q4_1(const blk_q4_1 * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = FP16_TO_FP32(x[i].d), m = FP16_TO_FP32(x[i].m);
        for (int j = 0; j < QK32/2; ++j) {
            y[i*QK32 + j] = (x[i].qs[j] & 0x0F)*d + m;
            y[i*QK32 + j + QK32/2] = (x[i].qs[j] >> 4)*d + m;
        }
    }
}

static void dequant_q5_0(const blk_q5_0 * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = FP16_TO_FP32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        for (int j = 0; j < QK32/2; ++j) {
            const uint8_t xh_0 = ((qh >> (j +  0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))     ) & 0x10;
            const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
            const int32_t x1 = ((x[i].qs[j] >>   4) | xh_1) - 16;
            y[i*QK32 + j] = x0*d;
            y[i*QK32 + j + QK32/2] = x1*d;
        }
    }
}

static void dequant_q5_1(const blk_q5_1 * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = FP16_TO_FP32(x[i].d), m = FP16_TO_FP32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, sizeof qh);
        for (int j = 0; j < QK32/2; ++j) {
            const uint8_t xh_0 = ((qh >> (j +  0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))     ) & 0x10;
            const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
            const int x1 = (x[i].qs[j] >>   4) | xh_1;
            y[i*QK32 + j] = x0*d + m;
            y[i*QK32 + j + QK32/2] = x1*d + m;
        }
    }
}

static void dequant_q8_0(const blk_q8_0 * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK32; i++) {
        const float d = FP16_TO_FP32(x[i].d);
        for (int j = 0; j < QK32; ++j) y[i*QK32 + j] = x[i].qs[j]*d;
    }
}

/* ==== the table's entry points (quants.h) =========================================== */

TKQ_EXPORT_ROWS(q4_0, blk_q4_0) TKQ_EXPORT_ROWS(q4_1, blk_q4_1) TKQ_EXPORT_ROWS(q5_0, blk_q5_0)
TKQ_EXPORT_ROWS(q5_1, blk_q5_1) TKQ_EXPORT_ROWS(q8_0, blk_q8_0)
TKQ_EXPORT_IMATRIX(q4_0, blk_q4_0) TKQ_EXPORT_IMATRIX(q4_1, blk_q4_1) TKQ_EXPORT_IMATRIX(q5_0, blk_q5_0)
TKQ_EXPORT_IMATRIX(q5_1, blk_q5_1)
