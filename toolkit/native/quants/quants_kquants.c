/* quants_kquants.c: the k-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (256-value super-blocks):
 * ggml's quantizers (without and with an imatrix), their scale searches, and dequantizers,
 * bit-exact with llama-quantize.
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-quants.c at build 0c1e570: quantize_row_*_K_ref (no
 * imatrix), quantize_row_*_K_impl (imatrix), dequantize_row_*_K.  Every arithmetic
 * expression keeps ggml's operation order and float types: the output bytes depend on it.
 * Floating-point contraction is off, as in ggml-base's baseline x86-64 build.
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

/* ==== k-quant scale searches ======================================================== */

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

/* ==== quantizers, no imatrix ======================================================== */

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

/* ==== quantizers with an imatrix: ggml's quantize_row_*_K_impl ====================== */

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

/* ==== dequantizers ================================================================== */

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

/* ==== the table's entry points (quants.h) =========================================== */

TKQ_EXPORT_ROWS(q2_K, blk_q2_K) TKQ_EXPORT_ROWS(q3_K, blk_q3_K) TKQ_EXPORT_ROWS(q4_K, blk_q4_K)
TKQ_EXPORT_ROWS(q5_K, blk_q5_K) TKQ_EXPORT_ROWS(q6_K, blk_q6_K)
TKQ_EXPORT_IMATRIX(q2_K, blk_q2_K) TKQ_EXPORT_IMATRIX(q3_K, blk_q3_K) TKQ_EXPORT_IMATRIX(q4_K, blk_q4_K)
TKQ_EXPORT_IMATRIX(q5_K, blk_q5_K) TKQ_EXPORT_IMATRIX(q6_K, blk_q6_K)
