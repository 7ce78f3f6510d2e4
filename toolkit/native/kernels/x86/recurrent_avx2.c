/* recurrent_avx2.c: the AVX2+FMA recurrences of the linear-attention kernels, one head of
 * one sequence: the gated delta rule, GDN (a scalar decay per token) and KDA (a decay per key
 * channel), and lightning attention (a fixed decay per head); and KDA's in-sub-block dot of
 * the chunked form (contracts: tk_testing.h, tk_gdn_head and tk_lightning_head;
 * kernels/kernels.h).  Reached only from gdn.c's, gdn_chunked.c's and lightning.c's dispatch
 * at the avx2 level or above.
 *
 * Per token and value row j, the scalar forms' arithmetic (gdn.c, lightning.c) with the
 * decay folded into the key for the dot: GDN kv = decay (S_j . k), KDA kv = S_j . kd with
 * kd[i] = dec[i] k[i] (dec = exp(g_t) per channel); u = beta (v_j - kv) (lightning: u = v_j,
 * no dot); then S_j <- dec S_j + k u_j (one multiply, one FMA) and o_j = S_j . q, the dots in
 * 8 lanes.  Its order of operations depends
 * on the token alone, not on where a call's run starts or ends, so that a run split over
 * several calls gives the same bits (DESIGN.md: chunked prefill == one-shot).  (A lazily
 * scaled state, S = c S', saves the multiply but rescales at each call's end: the bits then
 * depend on the split; not taken.)
 */
#include <math.h>
#include <stddef.h>

#include "kernels/kernels.h"

#ifdef TK_HAVE_X86
/* Pass 1 over NR (1..4) rows S_r = S + r*dk: S_r . k, 16 lanes at a time into two
 * accumulators per row (8 independent FMA chains for NR = 4: the FMA latency hidden), then
 * a[r] = their sum; dk % 16 lanes at the end as 8 and a masked 1..7. */
TK_TARGET_AVX2 TK_KINLINE void rows_dot_avx2(const float * S, int32_t dk, const float * k, __m256 * a, const int NR) {
    const int32_t d8 = dk & ~7;
    const __m256i tail = tk_mask8_avx2(dk - d8 > 0 ? dk - d8 : 1);
    __m256 b[4];
    for (int r = 0; r < NR; r++) a[r] = b[r] = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= dk; i += 16) {
        const __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
        for (int r = 0; r < NR; r++) {
            const float * Sr = S + (int64_t) r * dk + i;
            a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(Sr), k0, a[r]);
            b[r] = _mm256_fmadd_ps(_mm256_loadu_ps(Sr + 8), k1, b[r]);
        }
    }
    for (; i < dk; i += 8) {
        const int full = i < d8;
        const __m256 kk = full ? _mm256_loadu_ps(k + i) : _mm256_maskload_ps(k + i, tail);
        for (int r = 0; r < NR; r++) {
            const float * Sr = S + (int64_t) r * dk + i;
            a[r] = _mm256_fmadd_ps(full ? _mm256_loadu_ps(Sr) : _mm256_maskload_ps(Sr, tail), kk, a[r]);
        }
    }
    for (int r = 0; r < NR; r++) a[r] = _mm256_add_ps(a[r], b[r]);
}

/* Pass 2 over 8 lanes at S + i of NR rows: S_r <- k u_r + dd S_r, acc[r] += S_r q (lanes
 * under `tail` when not full); dd: the token's decay decv (GDN), or dec per lane (KDA). */
TK_TARGET_AVX2 TK_KINLINE void rows_upd8_avx2(float * S, int32_t dk, int32_t i, const float * q, const float * k,
                                              const int kda, const float * dec, __m256 decv, const __m256 * u,
                                              __m256 * acc, int full, __m256i tail, const int NR) {
    const __m256 kk = full ? _mm256_loadu_ps(k + i) : _mm256_maskload_ps(k + i, tail);
    const __m256 qq = full ? _mm256_loadu_ps(q + i) : _mm256_maskload_ps(q + i, tail);
    const __m256 dd = !kda ? decv : full ? _mm256_loadu_ps(dec + i) : _mm256_maskload_ps(dec + i, tail);
    for (int r = 0; r < NR; r++) {
        float * Sr = S + (int64_t) r * dk + i;
        __m256 s = full ? _mm256_loadu_ps(Sr) : _mm256_maskload_ps(Sr, tail);
        s = _mm256_fmadd_ps(kk, u[r], _mm256_mul_ps(s, dd));
        if (full) _mm256_storeu_ps(Sr, s); else _mm256_maskstore_ps(Sr, tail, s);
        acc[r] = _mm256_fmadd_ps(s, qq, acc[r]);
    }
}

enum { REC_GDN, REC_KDA, REC_LIGHTNING };

/* NR (1..4) value rows S_r = S + r*dk through one token; v and o at the rows' first value.
 * GDN: the dot over k, scaled by the token's decay; KDA: the dot over kd = dec * k;
 * lightning: no dot, u = v. */
TK_TARGET_AVX2 TK_KINLINE void rows_avx2(float * S, int32_t dk, const float * q, const float * k, const int mode,
                                         const float * kd, const float * dec, float decay, const float * v,
                                         float beta, float * o, const int NR) {
    const int32_t d8 = dk & ~7;
    const __m256i tail = tk_mask8_avx2(dk - d8 > 0 ? dk - d8 : 1);
    const int kda = mode == REC_KDA;
    __m256 a[4], b[4], u[4];
    if (mode != REC_LIGHTNING) rows_dot_avx2(S, dk, kda ? kd : k, a, NR);
    for (int r = 0; r < NR; r++) {
        if (mode == REC_LIGHTNING) u[r] = _mm256_set1_ps(v[r]);
        else u[r] = _mm256_set1_ps(kda ? beta * (v[r] - tk_hsum8_avx2(a[r])) : beta * (v[r] - decay * tk_hsum8_avx2(a[r])));
        a[r] = b[r] = _mm256_setzero_ps();
    }
    const __m256 decv = _mm256_set1_ps(decay);
    int32_t i = 0;
    for (; i + 16 <= dk; i += 16) {               /* two accumulators per row, as pass 1 */
        rows_upd8_avx2(S, dk, i, q, k, kda, dec, decv, u, a, 1, tail, NR);
        rows_upd8_avx2(S, dk, i + 8, q, k, kda, dec, decv, u, b, 1, tail, NR);
    }
    for (; i < dk; i += 8) rows_upd8_avx2(S, dk, i, q, k, kda, dec, decv, u, a, i < d8, tail, NR);
    for (int r = 0; r < NR; r++) o[r] = tk_hsum8_avx2(_mm256_add_ps(a[r], b[r]));
}

/* The whole run, in blocks of TK_REC_TOK_BLOCK tokens (KDA: fewer when the block's decays
 * would pass TK_KDA_SIMD_FLOATS): the value rows 4 at a time (then 1 at a time) through all
 * the block's tokens while they sit in L1.  The rows of S are independent (row j reads only
 * v_t[j]), so this is the token-major order's arithmetic; the state is read and written from
 * L2 once per block instead of once per token.  dec, kd: the block's decays (GDN: one per
 * token, in dec; lightning: the head's, in dec; KDA: tk_kda_block_decays). */
TK_TARGET_AVX2 TK_KINLINE void recurrent_avx2(const tk_gdn_head * h, const tk_lightning_head * lh, const int mode) {
    const int kda = mode == REC_KDA, lt = mode == REC_LIGHTNING;
    const int32_t dk = lt ? lh->d : h->dk, dv = lt ? lh->d : h->dv, n_tok = lt ? lh->n_tok : h->n_tok;
    const int32_t TB = kda && TK_KDA_SIMD_FLOATS / dk < TK_REC_TOK_BLOCK ? TK_KDA_SIMD_FLOATS / dk : TK_REC_TOK_BLOCK;
    float * S = lt ? lh->S : h->S;
    float dec[TK_KDA_SIMD_FLOATS], kd[TK_KDA_SIMD_FLOATS];
    const float lt_decay = lt ? expf(-lh->slope) : 0.0f;
    for (int32_t t0 = 0; t0 < n_tok; t0 += TB) {
        const int32_t T = n_tok - t0 < TB ? n_tok - t0 : TB;
        if (kda) tk_kda_block_decays(h, t0, T, dec, kd);
        else for (int32_t t = 0; t < T; t++) dec[t] = lt ? lt_decay : expf(h->g[(t0 + t) * h->gb_stride]);
        for (int32_t j = 0; j < dv;) {
            const int NR = dv - j >= 4 ? 4 : 1;
            float * Sj = S + (int64_t) j * dk;
            for (int32_t t = 0; t < T; t++) {
                const tk_rec_token x = lt ? tk_lightning_token(lh, t0 + t, j) : tk_gdn_token(h, t0 + t, j);
                const float * kt = kda ? kd + (int64_t) t * dk : NULL, * d = kda ? dec + (int64_t) t * dk : NULL;
                if (NR == 4) rows_avx2(Sj, dk, x.q, x.k, mode, kt, d, dec[t], x.v, x.beta, x.o, 4);
                else rows_avx2(Sj, dk, x.q, x.k, mode, kt, d, dec[t], x.v, x.beta, x.o, 1);
            }
            j += NR;
        }
    }
}

TK_TARGET_AVX2 void tk_gdn_recurrent_avx2(const tk_gdn_head * h) { recurrent_avx2(h, NULL, REC_GDN); }

TK_TARGET_AVX2 void tk_kda_recurrent_avx2(const tk_gdn_head * h) { recurrent_avx2(h, NULL, REC_KDA); }

TK_TARGET_AVX2 void tk_lightning_recurrent_avx2(const tk_lightning_head * h) { recurrent_avx2(NULL, h, REC_LIGHTNING); }

TK_TARGET_AVX2 void tk_kda_dot2_avx2(const float * p, const float * e, const float * a, const float * b, int32_t n,
                                     float * sa, float * sb) {
    __m256 x = _mm256_setzero_ps(), y = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 pe = _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_loadu_ps(e + i));
        x = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), pe, x);
        y = _mm256_fmadd_ps(_mm256_loadu_ps(b + i), pe, y);
    }
    if (i < n) {
        const __m256i m = tk_mask8_avx2(n - i);
        const __m256 pe = _mm256_mul_ps(_mm256_maskload_ps(p + i, m), _mm256_maskload_ps(e + i, m));
        x = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), pe, x);
        y = _mm256_fmadd_ps(_mm256_maskload_ps(b + i, m), pe, y);
    }
    *sa = tk_hsum8_avx2(x);
    *sb = tk_hsum8_avx2(y);
}
#endif
