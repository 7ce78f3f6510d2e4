/* quants.c: ggml quantizers and dequantizers, bit-exact with llama-quantize (no imatrix).
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-quants.c at build 0c1e570 (2026-10-01).
 * Which function llama-quantize reaches through ggml_quantize_chunk(imatrix = NULL):
 *   Q4_0 Q4_1 Q5_0 Q5_1 Q8_0            quantize_row_*_ref
 *   Q2_K Q3_K Q4_K Q5_K Q6_K            quantize_row_*_K_ref (the _impl variants need an imatrix)
 *   IQ4_NL                              quantize_row_iq4_nl_impl(32, 32, ..., ntry = 7)
 *   IQ4_XS                              quantize_row_iq4_nl_impl(256, 32, ..., ntry = 7)
 *   F16 / BF16                          ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref
 * Every arithmetic expression below keeps ggml's operation order and float types: the
 * output bytes depend on it.  ggml-base is compiled for baseline x86-64 without FMA, so
 * floating-point contraction is switched off here too (a*b+c must not become fma).
 *
 * Rows are independent: quantizing a tensor in any split of whole rows gives the same bytes.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quants.h"
#include "tk_internal.h"

#define TKQ_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TKQ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

#define FP32_TO_FP16(x) tkq_fp32_to_fp16(x)
#define FP16_TO_FP32(x) tkq_fp16_to_fp32(x)

/* IQ4_NL / IQ4_XS non-linear code book (ggml-common.h kvalues_iq4nl) */
const int8_t tk_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* ==== helpers ======================================================================= */

/* round to nearest (ties to even) for |fval| <= 4194303 via the 1.5*2^23 trick */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

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

/* ==== legacy 32-blocks ============================================================== */

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

/* ==== k-quant scale searches ======================================================== */

/* symmetric: L[i] in [0, 2*nmax), x ~ scale * (L[i] - nmax); rmse_type 1 weights x^2 */
static float make_qx_quants(int n, int nmax, const float * x, int8_t * L, int rmse_type, const float * qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            L[i] = nmax + TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, l));
        }
        return 1/iscale;
    }
    int return_early = 0;
    if (rmse_type < 0) { rmse_type = -rmse_type; return_early = 1; }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, l));
        L[i] = l + nmax;
        float w = qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
        sumlx += w*x[i]*l;
        suml2 += w*l*l;
    }
    float scale = suml2 ? sumlx/suml2 : 0.0f;
    if (return_early) return suml2 > 0 ? 0.5f*(scale + 1/iscale) : 1/iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f*is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, l));
            float w = qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? fabsf(x[i]) : sqrtf(fabsf(x[i]));
            sumlx += w*x[i]*l;
            suml2 += w*l*l;
        }
        if (suml2 > 0 && sumlx*sumlx > best*suml2) {
            for (int i = 0; i < n; ++i) {
                int l = nearest_int(iscale * x[i]);
                L[i] = nmax + TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, l));
            }
            scale = sumlx/suml2; best = scale*sumlx;
        }
    }
    return scale;
}

/* symmetric 3-bit search with coordinate-descent refinement (do_rmse) */
static float make_q3_quants(int n, int nmax, const float * x, int8_t * L, int do_rmse) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (do_rmse) {
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, l));
            L[i] = l;
            float w = x[i]*x[i];
            sumlx += w*x[i]*l;
            suml2 += w*l*l;
        }
        for (int itry = 0; itry < 5; ++itry) {
            int n_changed = 0;
            for (int i = 0; i < n; ++i) {
                float w = x[i]*x[i];
                float slx = sumlx - w*x[i]*L[i];
                if (slx > 0) {
                    float sl2 = suml2 - w*L[i]*L[i];
                    int new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, new_l));
                    if (new_l != L[i]) {
                        slx += w*x[i]*new_l;
                        sl2 += w*new_l*new_l;
                        if (sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2) {
                            L[i] = new_l; sumlx = slx; suml2 = sl2;
                            ++n_changed;
                        }
                    }
                }
            }
            if (!n_changed) break;
        }
        for (int i = 0; i < n; ++i) L[i] += nmax;
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = TKQ_MAX(-nmax, TKQ_MIN(nmax - 1, l));
        L[i] = l + nmax;
    }
    return 1/iscale;
}

/* asymmetric: x ~ scale * L[i] - the_min, L in [0, nmax]; grid search over nstep+1 scales */
static float make_qkx2_quants(int n, int nmax, const float * x, const float * weights,
                              uint8_t * L, float * the_min, uint8_t * Laux,
                              float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax/(max - min);
    float scale = 1/iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale*(x[i] - min));
        L[i] = TKQ_MAX(0, TKQ_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta*is + nmax)/(max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale*(x[i] - min));
            l = TKQ_MAX(0, TKQ_MIN(nmax, l));
            Laux[i] = l;
            float w = weights[i];
            sum_l += w*l;
            sum_l2 += w*l*l;
            sum_xl += w*l*x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l)/D;
            float this_min   = (sum_l2 * sum_x - sum_l * sum_xl)/D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

static inline void get_scale_min_k4(int j, const uint8_t * q, uint8_t * d, uint8_t * m) {
    if (j < 4) {
        *d = q[j] & 63; *m = q[j + 4] & 63;
    } else {
        *d = (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4);
        *m = (q[j+4] >>  4) | ((q[j-0] >> 6) << 4);
    }
}

/* ==== k-quants ====================================================================== */

static void quantize_q2_K(const float * x, blk_q2_K * y, int64_t k) {
    const int64_t nb = k / QK_K;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K/16], scales[QK_K/16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < nb; i++) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K/16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16*j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16*j, weights, L + 16*j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            float scale = scales[j];
            if (scale > max_scale) max_scale = scale;
            float min = mins[j];
            if (min > max_min) max_min = min;
        }
        if (max_scale > 0) {
            float iscale = q4scale/max_scale;
            for (int j = 0; j < QK_K/16; ++j) {
                int l = nearest_int(iscale*scales[j]);
                y[i].scales[j] = (uint8_t) l;
            }
            y[i].d = FP32_TO_FP16(max_scale/q4scale);
        } else {
            for (int j = 0; j < QK_K/16; ++j) y[i].scales[j] = 0;
            y[i].d = FP32_TO_FP16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale/max_min;
            for (int j = 0; j < QK_K/16; ++j) {
                int l = nearest_int(iscale*mins[j]);
                y[i].scales[j] |= (uint8_t) (l << 4);
            }
            y[i].dmin = FP32_TO_FP16(max_min/q4scale);
        } else {
            y[i].dmin = FP32_TO_FP16(0.f);
        }
        for (int j = 0; j < QK_K/16; ++j) {
            const float d = FP16_TO_FP32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = FP16_TO_FP32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16*j + ii] + dm)/d);
                l = TKQ_MAX(0, TKQ_MIN(3, l));
                L[16*j + ii] = (uint8_t) l;
            }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j/4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
            }
        }
        x += QK_K;
    }
}

static void quantize_q3_K(const float * x, blk_q3_K * y, int64_t k) {
    const int64_t nb = k / QK_K;
    int8_t L[QK_K];
    float scales[QK_K/16];
    for (int64_t i = 0; i < nb; i++) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K/16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16*j, L + 16*j, 1);
            float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f/max_scale;
            for (int j = 0; j < QK_K/16; ++j) {
                int8_t l = (int8_t) nearest_int(iscale*scales[j]);
                l = (int8_t) (TKQ_MAX(-32, TKQ_MIN(31, l)) + 32);
                if (j < 8) {
                    y[i].scales[j] = l & 0xF;
                } else {
                    y[i].scales[j-8] |= ((l & 0xF) << 4);
                }
                l >>= 4;
                y[i].scales[j%4 + 8] |= (l << (2*(j/4)));
            }
            y[i].d = FP32_TO_FP16(1/iscale);
        } else {
            y[i].d = FP32_TO_FP16(0.f);
        }
        int8_t sc;
        for (int j = 0; j < QK_K/16; ++j) {
            sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j-8] >> 4;
            sc = (int8_t) ((sc | (((y[i].scales[8 + j%4] >> (2*(j/4))) & 3) << 4)) - 32);
            float d = FP16_TO_FP32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16*j + ii]/d);
                l = TKQ_MAX(-4, TKQ_MIN(3, l));
                L[16*j + ii] = (int8_t) (l + 4);
            }
        }
        memset(y[i].hmask, 0, QK_K/8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QK_K/8) { m = 0; hm <<= 1; }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j/4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
            }
        }
        x += QK_K;
    }
}

/* Q4_K and Q5_K share the scale search; nmax 15 / 31, grid (-1, 0.1, 20) / (-0.5, 0.1, 15) */
static void qk_scales_mins(const float * x, int nmax, float rmin, float rdelta, int nstep,
                           uint8_t * L, float * scales, float * mins, float * max_scale, float * max_min) {
    uint8_t Laux[32];
    float weights[32];
    *max_scale = 0; *max_min = 0;
    for (int j = 0; j < QK_K/32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32*j + l] * x[32*j + l];
        float av_x = sqrtf(sum_x2/32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32*j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32*j, weights, L + 32*j, &mins[j], Laux, rmin, rdelta, nstep, 0);
        float scale = scales[j];
        if (scale > *max_scale) *max_scale = scale;
        float min = mins[j];
        if (min > *max_min) *max_min = min;
    }
}

/* pack 8 6-bit scales and mins into 12 bytes (k4 layout), return nothing */
static void pack_scales_k4(const float * scales, const float * mins, float max_scale, float max_min, uint8_t * out) {
    float inv_scale = max_scale > 0 ? 63.f/max_scale : 0.f;
    float inv_min   = max_min   > 0 ? 63.f/max_min   : 0.f;
    for (int j = 0; j < QK_K/32; ++j) {
        uint8_t ls = (uint8_t) nearest_int(inv_scale*scales[j]);
        uint8_t lm = (uint8_t) nearest_int(inv_min*mins[j]);
        ls = TKQ_MIN(63, ls);
        lm = TKQ_MIN(63, lm);
        if (j < 4) {
            out[j] = ls;
            out[j+4] = lm;
        } else {
            out[j+4] = (ls & 0xF) | ((lm & 0xF) << 4);
            out[j-4] |= ((ls >> 4) << 6);
            out[j-0] |= ((lm >> 4) << 6);
        }
    }
}

static void quantize_q4_K(const float * x, blk_q4_K * y, int64_t k) {
    const int64_t nb = k / QK_K;
    uint8_t L[QK_K];
    float mins[QK_K/32], scales[QK_K/32];
    for (int64_t i = 0; i < nb; i++) {
        float max_scale, max_min;
        qk_scales_mins(x, 15, -1.f, 0.1f, 20, L, scales, mins, &max_scale, &max_min);
        pack_scales_k4(scales, mins, max_scale, max_min, y[i].scales);
        y[i].d = FP32_TO_FP16(max_scale/63.f);
        y[i].dmin = FP32_TO_FP16(max_min/63.f);
        uint8_t sc, m;
        for (int j = 0; j < QK_K/32; ++j) {
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = FP16_TO_FP32(y[i].d) * sc;
            if (!d) continue;
            const float dm = FP16_TO_FP32(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                int l = nearest_int((x[32*j + ii] + dm)/d);
                l = TKQ_MAX(0, TKQ_MIN(15, l));
                L[32*j + ii] = (uint8_t) l;
            }
        }
        uint8_t * q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64) {
            for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (L[j + l + 32] << 4);
            q += 32;
        }
        x += QK_K;
    }
}

static void quantize_q5_K(const float * x, blk_q5_K * y, int64_t k) {
    const int64_t nb = k / QK_K;
    uint8_t L[QK_K];
    float mins[QK_K/32], scales[QK_K/32];
    for (int64_t i = 0; i < nb; i++) {
        float max_scale, max_min;
        qk_scales_mins(x, 31, -0.5f, 0.1f, 15, L, scales, mins, &max_scale, &max_min);
        pack_scales_k4(scales, mins, max_scale, max_min, y[i].scales);
        y[i].d = FP32_TO_FP16(max_scale/63.f);
        y[i].dmin = FP32_TO_FP16(max_min/63.f);
        uint8_t sc, m;
        for (int j = 0; j < QK_K/32; ++j) {
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = FP16_TO_FP32(y[i].d) * sc;
            if (!d) continue;
            const float dm = FP16_TO_FP32(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                int l = nearest_int((x[32*j + ii] + dm)/d);
                l = TKQ_MAX(0, TKQ_MIN(31, l));
                L[32*j + ii] = (uint8_t) l;
            }
        }
        uint8_t * qh = y[i].qh;
        uint8_t * ql = y[i].qs;
        memset(qh, 0, QK_K/8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                int l2 = L[n + j + 32];
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t) (l1 | (l2 << 4));
            }
            m1 <<= 2; m2 <<= 2;
            ql += 32;
        }
        x += QK_K;
    }
}

static void quantize_q6_K(const float * x, blk_q6_K * y, int64_t k) {
    const int64_t nb = k / QK_K;
    int8_t L[QK_K];
    float scales[QK_K/16];
    for (int64_t i = 0; i < nb; i++) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K/16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16*ib, L + 16*ib, 1, NULL);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(blk_q6_K));
            y[i].d = FP32_TO_FP16(0.f);
            x += QK_K;
            continue;
        }
        float iscale = -128.f/max_scale;
        y[i].d = FP32_TO_FP16(1/iscale);
        for (int ib = 0; ib < QK_K/16; ++ib) {
            y[i].scales[ib] = (int8_t) TKQ_MIN(127, nearest_int(iscale*scales[ib]));
        }
        for (int j = 0; j < QK_K/16; ++j) {
            float d = FP16_TO_FP32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16*j + ii]/d);
                l = TKQ_MAX(-32, TKQ_MIN(31, l));
                L[16*j + ii] = (int8_t) (l + 32);
            }
        }
        uint8_t * ql = y[i].ql;
        uint8_t * qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l +  0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l+ 0] = q1 | (q3 << 4);
                ql[l+32] = q2 | (q4 << 4);
                qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6);
            }
            ql += 64;
            qh += 32;
        }
        x += QK_K;
    }
}

/* ==== IQ4_NL / IQ4_XS =============================================================== */

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

/* ==== imatrix variants: ggml's quantize_row_*_impl (one row, quant_weights != NULL) ===== */

/* make_qkx2_quants with weights (x^2 when NULL) and its own error measure (qkx3) */
static float make_qkx3_quants(int n, int nmax, const float * x, const float * weights,
                              uint8_t * L, float * the_min, uint8_t * Laux,
                              float rmin, float rdelta, int nstep, int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights ? weights[0] : x[0]*x[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights ? weights[i] : x[i]*x[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax/(max - min);
    float scale = 1/iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale*(x[i] - min));
        L[i] = TKQ_MAX(0, TKQ_MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff*diff;
        float w = weights ? weights[i] : x[i]*x[i];
        best_mad += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta*is + nmax)/(max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale*(x[i] - min));
            l = TKQ_MAX(0, TKQ_MIN(nmax, l));
            Laux[i] = l;
            float w = weights ? weights[i] : x[i]*x[i];
            sum_l  += w*l;
            sum_l2 += w*l*l;
            sum_xl += w*l*x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l)/D;
            float this_min   = (sum_l2 * sum_x - sum_l * sum_xl)/D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff*diff;
                float w = weights ? weights[i] : x[i]*x[i];
                mad += w * diff;
            }
            if (mad < best_mad) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* non-negative values x -> scale * L, L in [0, nmax], weighted search + refinement */
static float make_qp_quants(int n, int nmax, const float * x, uint8_t * L, const float * quant_weights) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = TKQ_MAX(max, x[i]);
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) L[i] = nearest_int(iscale * x[i]);
    float scale = 1/iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        float diff = x[i] - scale*L[i];
        float w = quant_weights[i];
        best_mse += w*diff*diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        float iscale_is = (0.1f*is + nmax)/max;
        float scale_is = 1/iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale_is*x[i]);
            l = TKQ_MIN(nmax, l);
            float diff = x[i] - scale_is*l;
            float w = quant_weights[i];
            mse += w*diff*diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = TKQ_MIN(nmax, l);
        L[i] = l;
        float w = quant_weights[i];
        sumlx += w*x[i]*l;
        suml2 += w*l*l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = quant_weights[i];
            float slx = sumlx - w*x[i]*L[i];
            float sl2 = suml2 - w*L[i]*L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = TKQ_MIN(nmax, new_l);
                if (new_l != L[i]) {
                    slx += w*x[i]*new_l;
                    sl2 += w*new_l*new_l;
                    if (slx*slx*suml2 > sumlx*sumlx*sl2) {
                        L[i] = new_l; sumlx = slx; suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

static void quantize_q2_K_w(const float * x, blk_q2_K * y, int64_t n_per_row, const float * quant_weights) {
    const int64_t nb = n_per_row / QK_K;
    uint8_t L[QK_K], Laux[16];
    float mins[QK_K/16], scales[QK_K/16], sw[QK_K/16], weight[16];
    uint8_t Ls[QK_K/16], Lm[QK_K/16];
    for (int64_t i = 0; i < nb; i++) {
        memset(sw, 0, QK_K/16*sizeof(float));
        float sumx2 = 0;
        for (int j = 0; j < QK_K; ++j) sumx2 += x[j]*x[j];
        float sigma2 = sumx2/QK_K;
        for (int j = 0; j < QK_K/16; ++j) {
            const float * qw = quant_weights + QK_K * i + 16*j;
            for (int l = 0; l < 16; ++l) weight[l] = qw[l] * sqrtf(sigma2 + x[16*j + l]*x[16*j + l]);
            for (int l = 0; l < QK_K/16; ++l) sw[j] += weight[l];
            scales[j] = make_qkx3_quants(16, 3, x + 16*j, weight, L + 16*j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
        }
        float dm = make_qp_quants(QK_K/16, 15, scales, Ls, sw);
        float mm = make_qp_quants(QK_K/16, 15, mins,   Lm, sw);
        y[i].d    = FP32_TO_FP16(dm);
        y[i].dmin = FP32_TO_FP16(mm);
        dm        = FP16_TO_FP32(y[i].d);
        mm        = FP16_TO_FP32(y[i].dmin);
        for (int j = 0; j < QK_K/16; ++j) y[i].scales[j] = Ls[j] | (Lm[j] << 4);
        for (int j = 0; j < QK_K/16; ++j) {  /* requantize = true */
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int((x[16*j + ii] + m)/d);
                l = TKQ_MAX(0, TKQ_MIN(3, l));
                L[16*j + ii] = (uint8_t) l;
            }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j/4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
            }
        }
        x += QK_K;
    }
}

static void quantize_q3_K_w(const float * x, blk_q3_K * y, int64_t n_per_row, const float * quant_weights) {
    const int64_t nb = n_per_row / QK_K;
    int8_t L[QK_K];
    float scales[QK_K/16], weight[16], sw[QK_K/16];
    int8_t Ls[QK_K/16];
    for (int64_t i = 0; i < nb; i++) {
        float sumx2 = 0;
        for (int j = 0; j < QK_K; ++j) sumx2 += x[j]*x[j];
        float sigma2 = 2*sumx2/QK_K;
        for (int j = 0; j < QK_K/16; ++j) {
            const float * qw = quant_weights + QK_K * i + 16*j;
            for (int l = 0; l < 16; ++l) weight[l] = qw[l] * sqrtf(sigma2 + x[16*j+l]*x[16*j+l]);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16*j, L + 16*j, 1, weight);
        }
        memset(y[i].scales, 0, 12);
        float d_block = make_qx_quants(QK_K/16, 32, scales, Ls, 1, sw);
        for (int j = 0; j < QK_K/16; ++j) {
            int l = Ls[j];
            if (j < 8) {
                y[i].scales[j] = l & 0xF;
            } else {
                y[i].scales[j-8] |= ((l & 0xF) << 4);
            }
            l >>= 4;
            y[i].scales[j%4 + 8] |= (l << (2*(j/4)));
        }
        y[i].d = FP32_TO_FP16(d_block);
        int8_t sc;
        for (int j = 0; j < QK_K/16; ++j) {
            sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j-8] >> 4;
            sc = (int8_t) ((sc | (((y[i].scales[8 + j%4] >> (2*(j/4))) & 3) << 4)) - 32);
            float d = FP16_TO_FP32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16*j + ii]/d);
                l = TKQ_MAX(-4, TKQ_MIN(3, l));
                L[16*j + ii] = (int8_t) (l + 4);
            }
        }
        memset(y[i].hmask, 0, QK_K/8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) { y[i].hmask[m] |= hm; L[j] -= 4; }
            if (++m == QK_K/8) { m = 0; hm <<= 1; }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j/4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
            }
        }
        x += QK_K;
    }
}

/* Q4_K / Q5_K with an imatrix: qkx3 search per 32-block, qp search of the scales */
static void qk_scales_mins_w(const float * x, int64_t i, int nmax, const float * quant_weights, uint8_t * L,
                             float * scales, float * mins, uint8_t * Ls, uint8_t * Lm, float * d_block, float * m_block) {
    uint8_t Laux[32];
    float weights[32], sw[QK_K/32];
    float sum_x2 = 0;
    for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
    float sigma2 = 2*sum_x2/QK_K;
    for (int j = 0; j < QK_K/32; ++j) {
        const float * qw = quant_weights + QK_K*i + 32*j;
        for (int l = 0; l < 32; ++l) weights[l] = qw[l] * sqrtf(sigma2 + x[32*j + l]*x[32*j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32*j, weights, L + 32*j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
    }
    *d_block = make_qp_quants(QK_K/32, 63, scales, Ls, sw);
    *m_block = make_qp_quants(QK_K/32, 63, mins,   Lm, sw);
}

static void pack_ls_lm_k4(const uint8_t * Ls, const uint8_t * Lm, uint8_t * out) {
    for (int j = 0; j < QK_K/32; ++j) {
        uint8_t ls = TKQ_MIN(63, Ls[j]);  /* q4_K_impl does not clamp; Ls <= 63 there anyway */
        uint8_t lm = TKQ_MIN(63, Lm[j]);
        if (j < 4) {
            out[j] = ls;
            out[j+4] = lm;
        } else {
            out[j+4] = (ls & 0xF) | ((lm & 0xF) << 4);
            out[j-4] |= ((ls >> 4) << 6);
            out[j-0] |= ((lm >> 4) << 6);
        }
    }
}

static void quantize_q4_K_w(const float * x, blk_q4_K * y, int64_t n_per_row, const float * quant_weights) {
    const int64_t nb = n_per_row / QK_K;
    uint8_t L[QK_K], Ls[QK_K/32], Lm[QK_K/32];
    float mins[QK_K/32], scales[QK_K/32];
    for (int64_t i = 0; i < nb; i++) {
        float d_block, m_block;
        qk_scales_mins_w(x, i, 15, quant_weights, L, scales, mins, Ls, Lm, &d_block, &m_block);
        pack_ls_lm_k4(Ls, Lm, y[i].scales);
        y[i].d = FP32_TO_FP16(d_block);
        y[i].dmin = FP32_TO_FP16(m_block);
        uint8_t sc, m;
        for (int j = 0; j < QK_K/32; ++j) {
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = FP16_TO_FP32(y[i].d) * sc;
            if (!d) continue;
            const float dm = FP16_TO_FP32(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                int l = nearest_int((x[32*j + ii] + dm)/d);
                l = TKQ_MAX(0, TKQ_MIN(15, l));
                L[32*j + ii] = (uint8_t) l;
            }
        }
        uint8_t * q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64) {
            for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (L[j + l + 32] << 4);
            q += 32;
        }
        x += QK_K;
    }
}

static void quantize_q5_K_w(const float * x, blk_q5_K * y, int64_t n_per_row, const float * quant_weights) {
    const int64_t nb = n_per_row / QK_K;
    uint8_t L[QK_K], Ls[QK_K/32], Lm[QK_K/32];
    float mins[QK_K/32], scales[QK_K/32];
    for (int64_t i = 0; i < nb; i++) {
        float d_block, m_block;
        qk_scales_mins_w(x, i, 31, quant_weights, L, scales, mins, Ls, Lm, &d_block, &m_block);
        pack_ls_lm_k4(Ls, Lm, y[i].scales);
        y[i].d = FP32_TO_FP16(d_block);
        y[i].dmin = FP32_TO_FP16(m_block);
        uint8_t sc, m;
        for (int j = 0; j < QK_K/32; ++j) {
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = FP16_TO_FP32(y[i].d) * sc;
            if (!d) continue;
            const float dm = FP16_TO_FP32(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                int l = nearest_int((x[32*j + ii] + dm)/d);
                l = TKQ_MAX(0, TKQ_MIN(31, l));
                L[32*j + ii] = (uint8_t) l;
            }
        }
        uint8_t * qh = y[i].qh;
        uint8_t * ql = y[i].qs;
        memset(qh, 0, QK_K/8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                int l2 = L[n + j + 32];
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t) (l1 | (l2 << 4));
            }
            m1 <<= 2; m2 <<= 2;
            ql += 32;
        }
        x += QK_K;
    }
}

/* Q6_K with an imatrix: the same as without, but make_qx_quants weighs by the imatrix */
static void quantize_q6_K_w(const float * x, blk_q6_K * y, int64_t n_per_row, const float * quant_weights) {
    const int64_t nb = n_per_row / QK_K;
    int8_t L[QK_K];
    float scales[QK_K/16];
    for (int64_t i = 0; i < nb; i++) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K/16; ++ib) {
            const float * qw = quant_weights + QK_K*i + 16*ib;
            const float scale = make_qx_quants(16, 32, x + 16*ib, L + 16*ib, 1, qw);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof(blk_q6_K));
            y[i].d = FP32_TO_FP16(0.f);
            x += QK_K;
            continue;
        }
        float iscale = -128.f/max_scale;
        y[i].d = FP32_TO_FP16(1/iscale);
        for (int ib = 0; ib < QK_K/16; ++ib) y[i].scales[ib] = (int8_t) TKQ_MIN(127, nearest_int(iscale*scales[ib]));
        for (int j = 0; j < QK_K/16; ++j) {
            float d = FP16_TO_FP32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = nearest_int(x[16*j + ii]/d);
                l = TKQ_MAX(-32, TKQ_MIN(31, l));
                L[16*j + ii] = (int8_t) (l + 32);
            }
        }
        uint8_t * ql = y[i].ql;
        uint8_t * qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l +  0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l+ 0] = q1 | (q3 << 4);
                ql[l+32] = q2 | (q4 << 4);
                qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6);
            }
            ql += 64;
            qh += 32;
        }
        x += QK_K;
    }
}

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

static void dequant_q2_K(const blk_q2_K * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = FP16_TO_FP32(x[i].d);
        const float min = FP16_TO_FP32(x[i].dmin);
        const uint8_t * q = x[i].qs;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = x[i].scales[is++];
                float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
                sc = x[i].scales[is++];
                dl = d * (sc & 0xF); ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l+16] >> shift) & 3)) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

static void dequant_q3_K(const blk_q3_K * x, float * y, int64_t k) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    int8_t scales[16];
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d_all = FP16_TO_FP32(x[i].d);
        const uint8_t * q = x[i].qs;
        const uint8_t * hm = x[i].hmask;
        uint8_t m = 1;
        memcpy(aux, x[i].scales, 12);
        uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        memcpy(scales, aux, 16);
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                float dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l+ 0] >> shift) & 3) - ((hm[l+ 0] & m) ? 0 : 4));
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l+16] >> shift) & 3) - ((hm[l+16] & m) ? 0 : 4));
                shift += 2;
                m <<= 1;
            }
            q += 32;
        }
    }
}

static void dequant_q4_K(const blk_q4_K * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const uint8_t * q = x[i].qs;
        const float d = FP16_TO_FP32(x[i].d), min = FP16_TO_FP32(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l]  >> 4) - m2;
            q += 32; is += 2;
        }
    }
}

static void dequant_q5_K(const blk_q5_K * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const uint8_t * ql = x[i].qs;
        const uint8_t * qh = x[i].qh;
        const float d = FP16_TO_FP32(x[i].d), min = FP16_TO_FP32(x[i].dmin);
        int is = 0;
        uint8_t sc, m, u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l]  >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32; is += 2;
            u1 <<= 2; u2 <<= 2;
        }
    }
}

static void dequant_q6_K(const blk_q6_K * x, float * y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = FP16_TO_FP32(x[i].d);
        const uint8_t * ql = x[i].ql;
        const uint8_t * qh = x[i].qh;
        const int8_t * sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                int is = l/16;
                const int8_t q1 = (int8_t)((ql[l +  0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l +  0]  >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32]  >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l +  0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128; ql += 64; qh += 32; sc += 8;
        }
    }
}

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

/* ==== type table and public entry points ============================================ */

typedef void (*quant_fn)(const float * x, void * y, int64_t k);
typedef void (*dequant_fn)(const void * x, float * y, int64_t k);
/* one row of n_per_row values with its imatrix qw[n_per_row] (NULL: the type ignores it) */
typedef void (*quant_w_fn)(const float * x, void * y, int64_t n_per_row, const float * qw);

static void quant_f32(const float * x, void * y, int64_t k) { memcpy(y, x, (size_t) k * sizeof(float)); }
static void quant_f16(const float * x, void * vy, int64_t k) {
    uint16_t * y = vy;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_fp32_to_fp16(x[i]);
}
static void quant_bf16(const float * x, void * vy, int64_t k) {
    uint16_t * y = vy;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_fp32_to_bf16(x[i]);
}
static void dequant_f32(const void * x, float * y, int64_t k) { memcpy(y, x, (size_t) k * sizeof(float)); }
static void dequant_f16(const void * vx, float * y, int64_t k) {
    const uint16_t * x = vx;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_fp16_to_fp32(x[i]);
}
static void dequant_bf16(const void * vx, float * y, int64_t k) {
    const uint16_t * x = vx;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_bf16_to_fp32(x[i]);
}

typedef struct {
    int type;           /* ggml type number */
    int block_size;     /* elements per block */
    int type_size;      /* bytes per block */
    quant_fn quant;
    dequant_fn dequant;
    quant_w_fn quant_w;     /* imatrix variant (ggml's quantize_row_*_impl); NULL: imatrix unused */
} qtype;

/* adapters from the typed block functions to the table's void-pointer signatures */
#define WRAP(T, BLK) \
    static void q_##T(const float * x, void * y, int64_t k) { quantize_##T(x, (BLK *) y, k); } \
    static void dq_##T(const void * x, float * y, int64_t k) { dequant_##T((const BLK *) x, y, k); }
WRAP(q4_0, blk_q4_0) WRAP(q4_1, blk_q4_1) WRAP(q5_0, blk_q5_0) WRAP(q5_1, blk_q5_1) WRAP(q8_0, blk_q8_0)
WRAP(q2_K, blk_q2_K) WRAP(q3_K, blk_q3_K) WRAP(q4_K, blk_q4_K) WRAP(q5_K, blk_q5_K) WRAP(q6_K, blk_q6_K)
WRAP(iq4_nl, blk_iq4_nl) WRAP(iq4_xs, blk_iq4_xs)
#define WRAPW(T, BLK) \
    static void qw_##T(const float * x, void * y, int64_t k, const float * qw) { quantize_##T##_w(x, (BLK *) y, k, qw); }
WRAPW(q4_0, blk_q4_0) WRAPW(q4_1, blk_q4_1) WRAPW(q5_0, blk_q5_0) WRAPW(q5_1, blk_q5_1)
WRAPW(q2_K, blk_q2_K) WRAPW(q3_K, blk_q3_K) WRAPW(q4_K, blk_q4_K) WRAPW(q5_K, blk_q5_K) WRAPW(q6_K, blk_q6_K)
WRAPW(iq4_nl, blk_iq4_nl) WRAPW(iq4_xs, blk_iq4_xs)
#define QW(fn) qw_##fn
#define Q(fn) q_##fn
#define DQ(fn) dq_##fn

static const qtype QTYPES[] = {
    { TKQ_T_F32,     1,    4,                  quant_f32,   dequant_f32,  NULL },
    { TKQ_T_F16,     1,    2,                  quant_f16,   dequant_f16,  NULL },
    { TKQ_T_BF16,    1,    2,                  quant_bf16,  dequant_bf16, NULL },
    { TKQ_T_Q4_0,    QK32, sizeof(blk_q4_0),   Q(q4_0),     DQ(q4_0),     QW(q4_0) },
    { TKQ_T_Q4_1,    QK32, sizeof(blk_q4_1),   Q(q4_1),     DQ(q4_1),     QW(q4_1) },
    { TKQ_T_Q5_0,    QK32, sizeof(blk_q5_0),   Q(q5_0),     DQ(q5_0),     QW(q5_0) },
    { TKQ_T_Q5_1,    QK32, sizeof(blk_q5_1),   Q(q5_1),     DQ(q5_1),     QW(q5_1) },
    { TKQ_T_Q8_0,    QK32, sizeof(blk_q8_0),   Q(q8_0),     DQ(q8_0),     NULL },
    { TKQ_T_Q2_K,    QK_K, sizeof(blk_q2_K),   Q(q2_K),     DQ(q2_K),     QW(q2_K) },
    { TKQ_T_Q3_K,    QK_K, sizeof(blk_q3_K),   Q(q3_K),     DQ(q3_K),     QW(q3_K) },
    { TKQ_T_Q4_K,    QK_K, sizeof(blk_q4_K),   Q(q4_K),     DQ(q4_K),     QW(q4_K) },
    { TKQ_T_Q5_K,    QK_K, sizeof(blk_q5_K),   Q(q5_K),     DQ(q5_K),     QW(q5_K) },
    { TKQ_T_Q6_K,    QK_K, sizeof(blk_q6_K),   Q(q6_K),     DQ(q6_K),     QW(q6_K) },
    { TKQ_T_IQ4_NL,  QK32, sizeof(blk_iq4_nl), Q(iq4_nl),   DQ(iq4_nl),   QW(iq4_nl) },
    { TKQ_T_IQ4_XS,  QK_K, sizeof(blk_iq4_xs), Q(iq4_xs),   DQ(iq4_xs),   QW(iq4_xs) },
};

static const qtype * find_qtype(int type) {
    for (size_t i = 0; i < sizeof QTYPES / sizeof QTYPES[0]; i++) {
        if (QTYPES[i].type == type) return &QTYPES[i];
    }
    return NULL;
}

int tk_quant_type_supported(int type) { return find_qtype(type) != NULL; }

int64_t tk_quant_row_size(int type, int64_t n_per_row) {
    const qtype * t = find_qtype(type);
    if (!t || n_per_row <= 0 || n_per_row % t->block_size) return -1;
    return n_per_row / t->block_size * t->type_size;
}

tk_status tk_dequantize_row(int type, const void * src, float * dst, int64_t n) {
    const qtype * t = find_qtype(type);
    if (!t) return TK_FAIL(TK_ERR_UNSUPPORTED, "dequantize: ggml type %d is not supported", type);
    if (!src || !dst || n < 0) return TK_FAIL(TK_ERR_INVALID, "dequantize: null buffer or negative count");
    if (n % t->block_size) {
        return TK_FAIL(TK_ERR_INVALID, "dequantize: %lld elements is not a multiple of the block size %d of ggml type %d",
                       (long long) n, t->block_size, type);
    }
    t->dequant(src, dst, n);
    return TK_OK;
}

/* ---- row-parallel driver: each thread takes a contiguous run of whole rows ---------- */

typedef struct {
    const qtype * st;        /* source type (NULL: src is float32) */
    const qtype * dt;        /* destination type (NULL: dst is float32) */
    const void * src;
    void * dst;
    int64_t n_rows;          /* rows in the call */
    int64_t chunk;           /* rows per work item (~64K elements) */
    int64_t n_per_row;
    size_t src_row_bytes;    /* bytes of one source row */
    size_t dst_row_bytes;    /* bytes of one destination row */
    const float * imatrix;   /* [n_per_row] importance of each column, or NULL */
    int64_t next;            /* next row to hand out (atomic) */
    int failed;              /* set when a thread could not allocate its row scratch (atomic) */
} rows_work;

/* Threads take chunks of rows from a shared counter (a slow or busy core does less, as in
 * llama-quantize).  Each row is dequantized into a one-row float32 scratch (unless the source
 * is float32) and quantized from it, so no band-sized float32 buffer is ever needed. */
static void run_rows(rows_work * j) {
    float * scratch = NULL;
    if (j->st && j->dt) {
        scratch = malloc((size_t) j->n_per_row * sizeof(float));
        if (!scratch) { __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED); return; }
    }
    for (;;) {
        const int64_t r0 = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
        if (r0 >= j->n_rows) break;
        const int64_t r1 = r0 + j->chunk < j->n_rows ? r0 + j->chunk : j->n_rows;
        for (int64_t r = r0; r < r1; r++) {
            const char * s = (const char *) j->src + (size_t) r * j->src_row_bytes;
            char * d = (char *) j->dst + (size_t) r * j->dst_row_bytes;
            const float * x = (const float *) s;
            if (!j->dt) {
                j->st->dequant(s, (float *) d, j->n_per_row);
                continue;
            }
            if (j->st) {
                j->st->dequant(s, scratch, j->n_per_row);
                x = scratch;
            }
            if (j->imatrix && j->dt->quant_w) j->dt->quant_w(x, d, j->n_per_row, j->imatrix);
            else j->dt->quant(x, d, j->n_per_row);
        }
    }
    free(scratch);
}

static void * run_rows_thread(void * arg) { run_rows((rows_work *) arg); return NULL; }

#define TK_QUANT_MAX_THREADS 256

static const qtype * check_type(int type, int64_t n_per_row, const char * what, tk_status * st) {
    const qtype * t = find_qtype(type);
    if (!t) { *st = TK_FAIL(TK_ERR_UNSUPPORTED, "%s: ggml type %d is not supported", what, type); return NULL; }
    if (n_per_row % t->block_size) {
        *st = TK_FAIL(TK_ERR_INVALID, "%s: row of %lld elements is not a multiple of the block size %d of ggml type %d",
                      what, (long long) n_per_row, t->block_size, type);
        return NULL;
    }
    return t;
}

/* src_type / dst_type < 0 mean float32 rows */
static tk_status rows_parallel(int src_type, int dst_type, const void * src, void * dst,
                               int64_t n_rows, int64_t n_per_row, const float * imatrix, int n_threads, const char * what) {
    tk_status st = TK_OK;
    if (!src || !dst) return TK_FAIL(TK_ERR_INVALID, "%s: null buffer", what);
    if (n_rows < 0 || n_per_row <= 0) {
        return TK_FAIL(TK_ERR_INVALID, "%s: bad shape (%lld rows of %lld)", what, (long long) n_rows, (long long) n_per_row);
    }
    const qtype * s = NULL, * d = NULL;
    if (src_type >= 0 && !(s = check_type(src_type, n_per_row, what, &st))) return st;
    if (dst_type >= 0 && !(d = check_type(dst_type, n_per_row, what, &st))) return st;
    const size_t src_row = s ? (size_t) (n_per_row / s->block_size) * (size_t) s->type_size : (size_t) n_per_row * 4;
    const size_t dst_row = d ? (size_t) (n_per_row / d->block_size) * (size_t) d->type_size : (size_t) n_per_row * 4;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > TK_QUANT_MAX_THREADS) n_threads = TK_QUANT_MAX_THREADS;
    /* at least ~64K elements per thread, so tiny tensors do not pay for thread start-up */
    int64_t max_useful = (n_rows * n_per_row) / 65536 + 1;
    if (max_useful < n_threads) n_threads = (int) max_useful;
    if (n_threads > n_rows) n_threads = (int) (n_rows > 0 ? n_rows : 1);

    int64_t chunk = 65536 / n_per_row;
    if (chunk < 1) chunk = 1;
    rows_work work = { s, d, src, dst, n_rows, chunk, n_per_row, src_row, dst_row, imatrix, 0, 0 };
    pthread_t tids[TK_QUANT_MAX_THREADS];
    int started[TK_QUANT_MAX_THREADS] = { 0 };
    for (int i = 1; i < n_threads; i++) {
        started[i] = pthread_create(&tids[i], NULL, run_rows_thread, &work) == 0;  /* failure: fewer threads */
    }
    run_rows(&work);
    for (int i = 1; i < n_threads; i++) {
        if (started[i]) pthread_join(tids[i], NULL);
    }
    if (work.failed) return TK_FAIL(TK_ERR_NOMEM, "%s: cannot allocate a row of %lld floats", what, (long long) n_per_row);
    return TK_OK;
}

tk_status tk_quantize_rows(int type, const float * src, void * dst, int64_t n_rows, int64_t n_per_row, int n_threads) {
    if (type < 0) return TK_FAIL(TK_ERR_UNSUPPORTED, "quantize: ggml type %d is not supported", type);
    return rows_parallel(-1, type, src, dst, n_rows, n_per_row, NULL, n_threads, "quantize");
}

tk_status tk_dequantize_rows(int type, const void * src, float * dst, int64_t n_rows, int64_t n_per_row, int n_threads) {
    if (type < 0) return TK_FAIL(TK_ERR_UNSUPPORTED, "dequantize: ggml type %d is not supported", type);
    return rows_parallel(type, -1, src, dst, n_rows, n_per_row, NULL, n_threads, "dequantize");
}

tk_status tk_convert_rows(int src_type, const void * src, int dst_type, void * dst,
                          int64_t n_rows, int64_t n_per_row, int n_threads) {
    return tk_convert_rows_imatrix(src_type, src, dst_type, dst, n_rows, n_per_row, NULL, n_threads);
}

tk_status tk_convert_rows_imatrix(int src_type, const void * src, int dst_type, void * dst,
                                  int64_t n_rows, int64_t n_per_row, const float * imatrix, int n_threads) {
    if (dst_type < 0) return TK_FAIL(TK_ERR_UNSUPPORTED, "convert: bad ggml type %d -> %d", src_type, dst_type);
    /* a float32 source is read as is (no scratch copy) */
    return rows_parallel(src_type == TKQ_T_F32 ? -1 : src_type, dst_type, src, dst, n_rows, n_per_row, imatrix,
                         n_threads, "convert");
}
