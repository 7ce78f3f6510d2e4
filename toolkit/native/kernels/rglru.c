/* rglru.c: RecurrentGemma's RG-LRU kernels: the block-diagonal gate mat-mul and the scan
 * (contracts in tk_testing.h: tk_rglru_gates, tk_rglru_scan), scalar and AVX2+FMA, chosen by
 * tk_cpu_level().
 *
 * The scan, per channel c and token t (docs/specs/more-hybrids.md §6.4; transformers 5.24
 * modeling_recurrent_gemma.py RecurrentGemmaRglru.forward and _rnn_scan, lines 301-366):
 *   r = sigmoid(ga), i = sigmoid(gi), log a = -8 softplus(Lambda_c) r   (neg8sp[c] = -8 softplus(Lambda_c))
 *   a = exp(log a), m = sqrt(1 - exp(2 log a))          (HF: two exps, not a * a)
 *   position 0 (reset[t]): a = 0, m = 1                 (HF keys the reset on position_ids == 0)
 *   h <- a h + (x i) m;  y = h yb                       (float32 accumulator, as HF's acc_dtype)
 * The AVX2 form runs 8 channels per vector with kernels/x86/exp_avx2.h's exp (a few ulp from
 * expf: the two levels agree to float rounding, not bit for bit); a channel range's tail
 * (c1 - c0) % 8 goes through a zero-padded vector, so a channel's bits do not depend on the
 * range it sits in, and a token's do not depend on how a run is split over calls.
 *
 * The gates: out[t][h bw + j] = b[h][j] + sum_i x[t][h bw + i] W[h][i][j] (torch.baddbmm with
 * the activations as the left operand, modeling_recurrent_gemma.py:312-316: W[h] is [in, out], the transpose of a
 * Linear's).  Each output is one chain over i in order (the AVX2 form: fused multiply-adds,
 * 4 tokens x 16 outputs per register tile; its j tail by fmaf, the same operation), so a
 * token's gates do not depend on the ubatch it is in.
 */
#include <math.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

/* ---- scalar ---- */

static void gates_scalar(const float * x, int64_t x_stride, int32_t n_tok, const float * W, const float * b, int32_t h0,
                         int32_t h1, int32_t bw, float * out, int64_t out_stride) {
    for (int32_t t = 0; t < n_tok; t++)
        for (int32_t h = h0; h < h1; h++) {
            const float * xh = x + (int64_t) t * x_stride + (int64_t) h * bw;
            const float * Wh = W + (int64_t) h * bw * bw;
            float * o = out + (int64_t) t * out_stride + (int64_t) h * bw;
            for (int32_t j = 0; j < bw; j++) o[j] = b[(int64_t) h * bw + j];
            for (int32_t i = 0; i < bw; i++) {
                const float xi = xh[i];
                const float * wr = Wh + (int64_t) i * bw;
                for (int32_t j = 0; j < bw; j++) o[j] += xi * wr[j];
            }
        }
}

static void scan_scalar(const float * ga, const float * gi, int64_t g_stride, const float * x, const float * yb, int64_t stride,
                        const float * neg8sp, const uint8_t * reset, int32_t n_tok, int32_t c0, int32_t c1, float * h,
                        float * y, int64_t y_stride, float * const * snap) {
    for (int32_t t = 0; t < n_tok; t++) {
        const int64_t o = (int64_t) t * stride, og = (int64_t) t * g_stride;
        for (int32_t c = c0; c < c1; c++) {
            const float r = 1.0f / (1.0f + expf(-ga[og + c])), i = 1.0f / (1.0f + expf(-gi[og + c]));
            const float la = neg8sp[c] * r;
            float a = expf(la), m = sqrtf(1.0f - expf(2.0f * la));
            if (reset[t]) { a = 0.0f; m = 1.0f; }
            h[c] = a * h[c] + (x[o + c] * i) * m;
            y[(int64_t) t * y_stride + c] = h[c] * yb[o + c];
        }
        if (snap && snap[t]) memcpy(snap[t] + c0, h + c0, (size_t) (c1 - c0) * sizeof(float));
    }
}

/* ---- AVX2 + FMA ---- */
#ifdef TK_HAVE_X86
#include "kernels/x86/exp_avx2.h"

#define TK_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
#define TK_AVX2 __attribute__((target("avx2,fma")))

TK_AVX2_INLINE __m256 sigmoid8(__m256 x) {
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), tk_exp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

/* one vector of 8 channels: h (in/out), returns y = h yb */
TK_AVX2_INLINE __m256 scan8(__m256 ga, __m256 gi, __m256 x, __m256 yb, __m256 n8, int reset, __m256 * h) {
    const __m256 r = sigmoid8(ga), i = sigmoid8(gi);
    const __m256 la = _mm256_mul_ps(n8, r);
    __m256 a = tk_exp8_avx2(la);
    __m256 m = _mm256_sqrt_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), tk_exp8_avx2(_mm256_add_ps(la, la))),
                                            _mm256_setzero_ps()));
    if (reset) { a = _mm256_setzero_ps(); m = _mm256_set1_ps(1.0f); }
    *h = _mm256_fmadd_ps(a, *h, _mm256_mul_ps(_mm256_mul_ps(x, i), m));
    return _mm256_mul_ps(*h, yb);
}

TK_AVX2 static void scan_avx2(const float * ga, const float * gi, int64_t g_stride, const float * x, const float * yb, int64_t stride,
                              const float * neg8sp, const uint8_t * reset, int32_t n_tok, int32_t c0, int32_t c1, float * h,
                              float * y, int64_t y_stride, float * const * snap) {
    const int32_t cv = c0 + (c1 - c0) / 8 * 8;     /* [c0, cv): whole vectors; [cv, c1): the tail */
    const size_t nt = (size_t) (c1 - cv) * sizeof(float);
    for (int32_t t = 0; t < n_tok; t++) {          /* token rows in order, channels along each row (contiguous) */
        const int64_t o = (int64_t) t * stride, og = (int64_t) t * g_stride, oy = (int64_t) t * y_stride;
        for (int32_t c = c0; c < cv; c += 8) {
            __m256 hv = _mm256_loadu_ps(h + c);
            const __m256 yv = scan8(_mm256_loadu_ps(ga + og + c), _mm256_loadu_ps(gi + og + c), _mm256_loadu_ps(x + o + c),
                                    _mm256_loadu_ps(yb + o + c), _mm256_loadu_ps(neg8sp + c), reset[t], &hv);
            _mm256_storeu_ps(h + c, hv);
            _mm256_storeu_ps(y + oy + c, yv);
        }
        if (nt) {                                  /* the tail through a zero-padded vector: the same lane operations */
            float a[8] = {0}, b[8] = {0}, xx[8] = {0}, yy[8] = {0}, n8[8] = {0}, th[8] = {0}, out[8];
            memcpy(a, ga + og + cv, nt); memcpy(b, gi + og + cv, nt); memcpy(xx, x + o + cv, nt);
            memcpy(yy, yb + o + cv, nt); memcpy(n8, neg8sp + cv, nt); memcpy(th, h + cv, nt);
            __m256 hv = _mm256_loadu_ps(th);
            _mm256_storeu_ps(out, scan8(_mm256_loadu_ps(a), _mm256_loadu_ps(b), _mm256_loadu_ps(xx), _mm256_loadu_ps(yy),
                                        _mm256_loadu_ps(n8), reset[t], &hv));
            _mm256_storeu_ps(th, hv);
            memcpy(h + cv, th, nt);
            memcpy(y + oy + cv, out, nt);
        }
        if (snap && snap[t]) memcpy(snap[t] + c0, h + c0, (size_t) (c1 - c0) * sizeof(float));
    }
}

/* 4 tokens (or fewer: nt) x 16 outputs j0.. of head h: one FMA chain over i per output */
TK_AVX2_INLINE void gates_tile(const float * x, int64_t x_stride, int nt, const float * Wh, const float * bh, int32_t bw,
                               int32_t j0, float * o, int64_t out_stride) {
    __m256 acc[4][2];
    for (int t = 0; t < nt; t++) { acc[t][0] = _mm256_loadu_ps(bh + j0); acc[t][1] = _mm256_loadu_ps(bh + j0 + 8); }
    for (int32_t i = 0; i < bw; i++) {
        const __m256 w0 = _mm256_loadu_ps(Wh + (int64_t) i * bw + j0), w1 = _mm256_loadu_ps(Wh + (int64_t) i * bw + j0 + 8);
        for (int t = 0; t < nt; t++) {
            const __m256 xi = _mm256_broadcast_ss(x + (int64_t) t * x_stride + i);
            acc[t][0] = _mm256_fmadd_ps(xi, w0, acc[t][0]);
            acc[t][1] = _mm256_fmadd_ps(xi, w1, acc[t][1]);
        }
    }
    for (int t = 0; t < nt; t++) {
        _mm256_storeu_ps(o + (int64_t) t * out_stride + j0, acc[t][0]);
        _mm256_storeu_ps(o + (int64_t) t * out_stride + j0 + 8, acc[t][1]);
    }
}

TK_AVX2 static void gates_avx2(const float * x, int64_t x_stride, int32_t n_tok, const float * W, const float * b, int32_t h0,
                               int32_t h1, int32_t bw, float * out, int64_t out_stride) {
    for (int32_t h = h0; h < h1; h++) {
        const float * Wh = W + (int64_t) h * bw * bw, * bh = b + (int64_t) h * bw;
        for (int32_t t0 = 0; t0 < n_tok; t0 += 4) {
            const int nt = n_tok - t0 < 4 ? n_tok - t0 : 4;
            const float * xt = x + (int64_t) t0 * x_stride + (int64_t) h * bw;
            float * ot = out + (int64_t) t0 * out_stride + (int64_t) h * bw;
            int32_t j = 0;
            switch (nt) {      /* nt a constant in each instance */
                case 4: for (; j + 16 <= bw; j += 16) gates_tile(xt, x_stride, 4, Wh, bh, bw, j, ot, out_stride); break;
                case 3: for (; j + 16 <= bw; j += 16) gates_tile(xt, x_stride, 3, Wh, bh, bw, j, ot, out_stride); break;
                case 2: for (; j + 16 <= bw; j += 16) gates_tile(xt, x_stride, 2, Wh, bh, bw, j, ot, out_stride); break;
                default: for (; j + 16 <= bw; j += 16) gates_tile(xt, x_stride, 1, Wh, bh, bw, j, ot, out_stride); break;
            }
            for (int t = 0; t < nt; t++)          /* the j tail: the same chain, fmaf = one FMA */
                for (int32_t jj = j; jj < bw; jj++) {
                    float acc = bh[jj];
                    for (int32_t i = 0; i < bw; i++) acc = fmaf(xt[(int64_t) t * x_stride + i], Wh[(int64_t) i * bw + jj], acc);
                    ot[(int64_t) t * out_stride + jj] = acc;
                }
        }
    }
}
#endif

/* ---- dispatch ---- */

void tk_rglru_gates(const float * x, int64_t x_stride, int32_t n_tok, const float * W, const float * b, int32_t h0,
                    int32_t h1, int32_t bw, float * out, int64_t out_stride) {
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { gates_avx2(x, x_stride, n_tok, W, b, h0, h1, bw, out, out_stride); return; }
#endif
    gates_scalar(x, x_stride, n_tok, W, b, h0, h1, bw, out, out_stride);
}

void tk_rglru_scan(const float * ga, const float * gi, int64_t g_stride, const float * x, const float * yb, int64_t stride,
                   const float * neg8sp, const uint8_t * reset, int32_t n_tok, int32_t c0, int32_t c1, float * h,
                   float * y, int64_t y_stride, float * const * snap) {
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) {
        scan_avx2(ga, gi, g_stride, x, yb, stride, neg8sp, reset, n_tok, c0, c1, h, y, y_stride, snap);
        return;
    }
#endif
    scan_scalar(ga, gi, g_stride, x, yb, stride, neg8sp, reset, n_tok, c0, c1, h, y, y_stride, snap);
}
