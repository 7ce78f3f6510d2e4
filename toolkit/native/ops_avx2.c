/* ops_avx2.c: AVX2 + FMA + F16C mat-vec / mat-mat kernels (x86-64 only).
 *
 * Compiled with the portable flags like every file; only the functions below carry
 * __attribute__((target("avx2,fma,f16c"))), and ops.c calls them only when cpu.c found the
 * instructions and the OS's YMM support, so the package still runs on any x86-64.
 *
 * One accumulation order per output, whatever the path:
 *   acc0, acc1: 8-lane FMA accumulators; elements [16i, 16i+8) go to acc0, [16i+8, 16i+16)
 *   to acc1; a last full 8 to acc0; then s = hsum(acc0 + acc1) (fixed tree); then the
 *   K % 8 tail in order with fmaf.
 * A weight element is the same float whichever way it is produced (F16/BF16 conversion is
 * exact; Q8_0 is d * (float) q rounded once, as ops.c's row_to_f32), so the direct mat-vec
 * (generation, n_tok == 1) and the expand-once mat-mat (prompt) give bit-identical
 * results for a token, and a token's result never depends on the ubatch it shares.
 * The order differs from the scalar path (ops.c: 8 separate mul+add lanes), so the two
 * levels agree to float reordering, not bit for bit.
 */
#include <math.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

#ifdef TK_HAVE_X86
#include <immintrin.h>

#define TK_AVX2 __attribute__((target("avx2,fma,f16c")))

TK_AVX2 static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);                        /* (0+4) (1+5) (2+6) (3+7) */
    __m128 sh = _mm_movehl_ps(lo, lo);
    lo = _mm_add_ps(lo, sh);                        /* ((0+4)+(2+6)) ((1+5)+(3+7)) */
    sh = _mm_shuffle_ps(lo, lo, 0x55);
    return _mm_cvtss_f32(_mm_add_ss(lo, sh));
}

/* 8 weights from element i (i % 8 == 0) of a row of `type` */
TK_AVX2 static inline __m256 load8(int type, const uint8_t * p, int64_t i) {
    switch (type) {
        case TK_GGML_F16:
            return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (const void *) (p + 2 * i)));
        case TK_GGML_BF16: {
            const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) (const void *) (p + 2 * i)));
            return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
        }
        case TK_GGML_Q8_0: {
            const uint8_t * blk = p + (i / 32) * 34;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
            const __m128i q8 = _mm_loadl_epi64((const __m128i *) (const void *) (blk + 2 + (i % 32)));
            return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
        }
        default:   /* F32 */
            return _mm256_loadu_ps((const float *) (const void *) p + i);
    }
}

TK_AVX2 static inline float elem(int type, const uint8_t * p, int64_t i) {
    uint16_t h;
    switch (type) {
        case TK_GGML_F16: memcpy(&h, p + 2 * i, 2); return _cvtsh_ss(h);
        case TK_GGML_BF16: memcpy(&h, p + 2 * i, 2); return tk_bf16_to_fp32(h);
        default: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    }
}

/* one dot product, weights read (and converted) in place */
TK_AVX2 static float dot_direct(int type, const uint8_t * w, const float * x, int64_t K) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= K; i += 16) {
        a0 = _mm256_fmadd_ps(load8(type, w, i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load8(type, w, i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    if (i + 8 <= K) {
        a0 = _mm256_fmadd_ps(load8(type, w, i), _mm256_loadu_ps(x + i), a0);
        i += 8;
    }
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; i < K; i++) s = fmaf(elem(type, w, i), x[i], s);
    return s;
}

/* 4 tokens against one float32 row: each token's accumulators see exactly dot_direct's ops */
TK_AVX2 static void dot4(const float * w, const float * x, int64_t ldx, int64_t K, float * out) {
    const float * x0 = x, * x1 = x + ldx, * x2 = x + 2 * ldx, * x3 = x + 3 * ldx;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
    int64_t i = 0;
    for (; i + 16 <= K; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
        a00 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a00);
        a01 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x0 + i + 8), a01);
        a10 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), a10);
        a11 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x1 + i + 8), a11);
        a20 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x2 + i), a20);
        a21 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x2 + i + 8), a21);
        a30 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x3 + i), a30);
        a31 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x3 + i + 8), a31);
    }
    if (i + 8 <= K) {
        const __m256 w0 = _mm256_loadu_ps(w + i);
        a00 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x0 + i), a00);
        a10 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x1 + i), a10);
        a20 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x2 + i), a20);
        a30 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x3 + i), a30);
        i += 8;
    }
    float s0 = hsum256(_mm256_add_ps(a00, a01)), s1 = hsum256(_mm256_add_ps(a10, a11));
    float s2 = hsum256(_mm256_add_ps(a20, a21)), s3 = hsum256(_mm256_add_ps(a30, a31));
    for (; i < K; i++) {
        s0 = fmaf(w[i], x0[i], s0);
        s1 = fmaf(w[i], x1[i], s1);
        s2 = fmaf(w[i], x2[i], s2);
        s3 = fmaf(w[i], x3[i], s3);
    }
    out[0] = s0; out[1] = s1; out[2] = s2; out[3] = s3;
}

/* a row of `type` to float32, the values load8 produces */
TK_AVX2 static void expand(int type, const uint8_t * p, float * dst, int64_t K) {
    int64_t i = 0;
    if (type == TK_GGML_F16 || type == TK_GGML_BF16 || type == TK_GGML_Q8_0) {
        for (; i + 8 <= K; i += 8) _mm256_storeu_ps(dst + i, load8(type, p, i));
        for (; i < K; i++) dst[i] = elem(type, p, i);
    } else {
        tk_dequantize_row(type, p, dst, K);       /* other quant types: quants.c */
    }
}

static int direct_type(int type) {
    return type == TK_GGML_F32 || type == TK_GGML_F16 || type == TK_GGML_BF16 || type == TK_GGML_Q8_0;
}

TK_AVX2 void tk_matmul_rows_avx2(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                                 const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1) {
    if (n_tok == 1 && direct_type(type)) {
        for (int64_t r = r0; r < r1; r++) y[r] = dot_direct(type, base + (size_t) r * row_bytes, x, K);
        return;
    }
    /* token blocks whose activations stay in L2 (~256 KiB), weights re-expanded per block */
    int64_t tb = (int64_t) 65536 / (K > 0 ? K : 1);
    tb = tb < 4 ? 4 : tb - tb % 4;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t t1 = t0 + tb < n_tok ? t0 + tb : n_tok;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t * row = base + (size_t) r * row_bytes;
            const float * wr = (const float *) (const void *) row;
            if (type != TK_GGML_F32) {
                expand(type, row, scratch, K);
                wr = scratch;
            }
            int64_t t = t0;
            float o[4];
            for (; t + 4 <= t1; t += 4) {
                dot4(wr, x + t * K, K, K, o);
                y[t * M + r] = o[0];
                y[(t + 1) * M + r] = o[1];
                y[(t + 2) * M + r] = o[2];
                y[(t + 3) * M + r] = o[3];
            }
            for (; t < t1; t++) y[t * M + r] = dot_direct(TK_GGML_F32, (const uint8_t *) (const void *) wr, x + t * K, K);
        }
    }
}

#endif
