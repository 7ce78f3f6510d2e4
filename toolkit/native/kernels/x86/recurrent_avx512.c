/* recurrent_avx512.c: the AVX-512 (F, VL) recurrences of KDA and lightning attention, and
 * KDA's in-sub-block dot of the chunked form (contracts: tk_testing.h, tk_gdn_head and
 * tk_lightning_head; kernels/kernels.h): recurrent_avx2.c's arithmetic on 16 lanes, KDA's 8
 * value rows (then 4, then 1) and lightning's 4 (then 1) with two accumulators each; tails
 * under a lane mask.  Sums of the 16 lanes: KDA _mm512_reduce_add_ps (a fixed tree),
 * lightning the two halves of 8 added, then tk_hsum8's tree.  Reached only from gdn.c's,
 * gdn_chunked.c's and lightning.c's dispatch at the avx512 level.  (GDN's own recurrence runs
 * recurrent_avx2.c's at this level.)
 */
#include <math.h>
#include <stddef.h>

#include "kernels/kernels.h"

#ifdef TK_HAVE_X86
enum { REC_KDA, REC_LIGHTNING };

/* a[r] = S_r . kd over dk lanes, 32 at a time into two accumulators, then 16, then masked */
TK_TARGET_AVX512 TK_KINLINE void rows_dot_avx512(const float * S, int32_t dk, const float * kd, __m512 * a,
                                                const int NR) {
    __m512 b[8];
    for (int r = 0; r < NR; r++) a[r] = b[r] = _mm512_setzero_ps();
    int32_t i = 0;
    for (; i + 32 <= dk; i += 32) {
        const __m512 k0 = _mm512_loadu_ps(kd + i), k1 = _mm512_loadu_ps(kd + i + 16);
        for (int r = 0; r < NR; r++) {
            const float * Sr = S + (int64_t) r * dk + i;
            a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(Sr), k0, a[r]);
            b[r] = _mm512_fmadd_ps(_mm512_loadu_ps(Sr + 16), k1, b[r]);
        }
    }
    for (; i < dk; i += 16) {
        const __mmask16 m = tk_mask16_avx512(dk - i);
        const __m512 kk = _mm512_maskz_loadu_ps(m, kd + i);
        for (int r = 0; r < NR; r++) a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, S + (int64_t) r * dk + i), kk, a[r]);
    }
    for (int r = 0; r < NR; r++) a[r] = _mm512_add_ps(a[r], b[r]);
}

/* 16 lanes (under m) at S + i of NR rows: S_r <- k u_r + dd S_r, acc[r] += S_r q; dd: dec per
 * lane (KDA), or the head's decay decv (lightning) */
TK_TARGET_AVX512 TK_KINLINE void rows_upd16_avx512(float * S, int32_t dk, int32_t i, const float * q, const float * k,
                                                  const int kda, const float * dec, __m512 decv, const __m512 * u,
                                                  __m512 * acc, __mmask16 m, const int NR) {
    const __m512 kk = _mm512_maskz_loadu_ps(m, k + i), qq = _mm512_maskz_loadu_ps(m, q + i);
    const __m512 dd = kda ? _mm512_maskz_loadu_ps(m, dec + i) : decv;
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * dk + i;
        __m512 s = _mm512_fmadd_ps(kk, u[r], _mm512_mul_ps(_mm512_maskz_loadu_ps(m, Sr), dd));
        _mm512_mask_storeu_ps(Sr, m, s);
        acc[r] = _mm512_fmadd_ps(s, qq, acc[r]);
    }
}

/* lightning's sum of 16 lanes: the two halves of 8 added, then tk_hsum8's tree */
TK_TARGET_AVX512 TK_KINLINE float hsum16_halves(__m512 x) {
    const __m256 lo = _mm512_castps512_ps256(x);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
    return tk_hsum8_avx2(_mm256_add_ps(lo, hi));
}

/* NR (1..8) value rows through one token (KDA: the dot over kd = dec * k; lightning: no dot,
 * u = v); v and o at the rows' first value */
TK_TARGET_AVX512 TK_KINLINE void rows_avx512(float * S, int32_t dk, const float * q, const float * k, const int mode,
                                            const float * kd, const float * dec, __m512 decv, const float * v,
                                            float beta, float * o, const int NR) {
    const int kda = mode == REC_KDA;
    __m512 a[8], b[8], u[8];
    if (kda) rows_dot_avx512(S, dk, kd, a, NR);
    for (int r = 0; r < NR; r++) {
        u[r] = _mm512_set1_ps(kda ? beta * (v[r] - _mm512_reduce_add_ps(a[r])) : v[r]);
        a[r] = b[r] = _mm512_setzero_ps();
    }
    int32_t i = 0;
    for (; i + 32 <= dk; i += 32) {
        rows_upd16_avx512(S, dk, i, q, k, kda, dec, decv, u, a, (__mmask16) 0xffff, NR);
        rows_upd16_avx512(S, dk, i + 16, q, k, kda, dec, decv, u, b, (__mmask16) 0xffff, NR);
    }
    for (; i < dk; i += 16) rows_upd16_avx512(S, dk, i, q, k, kda, dec, decv, u, a, tk_mask16_avx512(dk - i), NR);
    for (int r = 0; r < NR; r++) {
        const __m512 ab = _mm512_add_ps(a[r], b[r]);
        o[r] = kda ? _mm512_reduce_add_ps(ab) : hsum16_halves(ab);
    }
}

/* The whole run (recurrent_avx2.c's blocking; KDA 8 value rows at a time, then 4, then 1) */
TK_TARGET_AVX512 TK_KINLINE void recurrent_avx512(const tk_gdn_head * h, const tk_lightning_head * lh, const int mode) {
    const int kda = mode == REC_KDA;
    const int32_t dk = kda ? h->dk : lh->d, dv = kda ? h->dv : lh->d, n_tok = kda ? h->n_tok : lh->n_tok;
    const int32_t TB = kda && TK_KDA_SIMD_FLOATS / dk < TK_REC_TOK_BLOCK ? TK_KDA_SIMD_FLOATS / dk : TK_REC_TOK_BLOCK;
    float * S = kda ? h->S : lh->S;
    float dec[TK_KDA_SIMD_FLOATS], kd[TK_KDA_SIMD_FLOATS];
    const __m512 decv = _mm512_set1_ps(kda ? 0.0f : expf(-lh->slope));
    for (int32_t t0 = 0; t0 < n_tok; t0 += TB) {
        const int32_t T = n_tok - t0 < TB ? n_tok - t0 : TB;
        if (kda) tk_kda_block_decays(h, t0, T, dec, kd);
        for (int32_t j = 0; j < dv;) {
            const int NR = kda && dv - j >= 8 ? 8 : dv - j >= 4 ? 4 : 1;
            float * Sj = S + (int64_t) j * dk;
            for (int32_t t = 0; t < T; t++) {
                const tk_rec_token x = kda ? tk_gdn_token(h, t0 + t, j) : tk_lightning_token(lh, t0 + t, j);
                const float * d = dec + (int64_t) t * dk, * kt = kd + (int64_t) t * dk;
                if (NR == 8) rows_avx512(Sj, dk, x.q, x.k, mode, kt, d, decv, x.v, x.beta, x.o, 8);
                else if (NR == 4) rows_avx512(Sj, dk, x.q, x.k, mode, kt, d, decv, x.v, x.beta, x.o, 4);
                else rows_avx512(Sj, dk, x.q, x.k, mode, kt, d, decv, x.v, x.beta, x.o, 1);
            }
            j += NR;
        }
    }
}

TK_TARGET_AVX512 void tk_kda_recurrent_avx512(const tk_gdn_head * h) { recurrent_avx512(h, NULL, REC_KDA); }

TK_TARGET_AVX512 void tk_lightning_recurrent_avx512(const tk_lightning_head * h) {
    recurrent_avx512(NULL, h, REC_LIGHTNING);
}

TK_TARGET_AVX512 void tk_kda_dot2_avx512(const float * p, const float * e, const float * a, const float * b, int32_t n,
                                       float * sa, float * sb) {
    __m512 x = _mm512_setzero_ps(), y = _mm512_setzero_ps();
    for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 m = tk_mask16_avx512(n - i);
        const __m512 pe = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), _mm512_maskz_loadu_ps(m, e + i));
        x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), pe, x);
        y = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, b + i), pe, y);
    }
    *sa = _mm512_reduce_add_ps(x);
    *sb = _mm512_reduce_add_ps(y);
}
#endif
