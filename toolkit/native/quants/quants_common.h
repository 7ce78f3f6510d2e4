/* quants_common.h: helpers shared by the quantizers of every family (quants_legacy.c,
 * quants_kquants.c, quants_iquants.c): ggml's nearest_int and the scale searches used by
 * more than one family (make_qx_quants, make_qkx3_quants), and the macros that export a
 * family's typed block functions with the table's signatures (quants.h).
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-quants.c at build 0c1e570; every expression keeps
 * ggml's operation order and float types (the output bytes depend on it).  These are static
 * functions, compiled with the flags of the file that includes them: the quants_*.c files
 * switch floating-point contraction off first; qdot.c takes nearest_int only, under its
 * own flags (as when it kept its own copy).
 */
#ifndef TK_QUANTS_COMMON_H
#define TK_QUANTS_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quants/quants.h"

#define TKQ_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TKQ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GROUP_MAX_EPS 1e-15f

#define FP32_TO_FP16(x) tkq_fp32_to_fp16(x)
#define FP16_TO_FP32(x) tkq_fp16_to_fp32(x)

/* round to nearest (ties to even) for |fval| <= 4194303 via the 1.5*2^23 trick */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

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


/* The table's void-pointer signatures (quants.h) for a family's typed block functions
 * quantize_<T>(x, blk *, n), dequant_<T>(const blk *, y, n), quantize_<T>_w(x, blk *, n, qw). */
#define TKQ_EXPORT_ROWS(T, BLK)                                                                   \
    void tkq_quantize_##T(const float * x, void * y, int64_t n) { quantize_##T(x, (BLK *) y, n); }  \
    void tkq_dequantize_##T(const void * x, float * y, int64_t n) { dequant_##T((const BLK *) x, y, n); }
#define TKQ_EXPORT_IMATRIX(T, BLK)                                                                \
    void tkq_quantize_##T##_imatrix(const float * x, void * y, int64_t n, const float * qw) {      \
        quantize_##T##_w(x, (BLK *) y, n, qw);                                                    \
    }

#endif
