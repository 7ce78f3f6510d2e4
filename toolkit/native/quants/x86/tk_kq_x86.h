/* tk_kq_x86.h: the 256-bit pieces of the k-quant prompt tiles that qdot_kquants_avx512.c and
 * qdot_avxvnni.c share: AVX2's scale layouts (qdot_kquants_avx2.c) and the float step per
 * super-block, whose order of operations keeps both kernels' outputs bit-identical to AVX2's.
 *
 * Include after tk_avx512.h or tk_avxvnni.h, with TK_KQX_INLINE defined as the includer's
 * inline-and-target prefix (its intrinsics need the AVX2 set; under -DTK_EMULATE_AVX512 they
 * are SIMDe's).  The isum arguments are AVX2's 8 int32 lanes of the super-block (exact).
 */
#ifndef TK_KQ_X86_H
#define TK_KQ_X86_H

#ifndef TK_KQX_INLINE
#error "define TK_KQX_INLINE (the includer's target and inline attributes) before including tk_kq_x86.h"
#endif

enum { TK_KQX_Q6, TK_KQX_Q3, TK_KQX_Q2 };   /* the types with 16 scales of 16 values */

/* Q4_K / Q5_K scales (qdot.h tk_scales_k4) -> the bytes s0..s7 m0..m7; mns: the mins as
 * int16, each twice (m0 m0 m1 m1 ...), to madd with the 16 bsums (AVX2's msum lanes) */
TK_KQX_INLINE __m128i tk_kqx_scales_k4(const uint8_t * s12, __m256i * mns) {
    uint32_t u[4];
    tk_scales_k4(s12, u);
    const __m128i sm = _mm_loadu_si128((const __m128i *) (const void *) u);
    *mns = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
    return sm;
}

/* Q6_K / Q3_K / Q2_K super-block x -> sc16: AVX2's 16 int16 scales (Q3_K: minus 32); mn16:
 * Q2_K's 16 mins (else zero) */
TK_KQX_INLINE void tk_kqx_scales_s16(const int kind, const uint8_t * x, __m256i * sc16, __m256i * mn16) {
    *mn16 = _mm256_setzero_si256();
    if (kind == TK_KQX_Q6) {
        *sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (const void *) ((const blk_q6_K *) (const void *) x)->scales));
    } else if (kind == TK_KQX_Q3) {
        uint32_t u[4];
        tk_scales_q3(((const blk_q3_K *) (const void *) x)->scales, u);
        *sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_loadu_si128((const __m128i *) (const void *) u), _mm_set1_epi8(32)));
    } else {
        const __m128i sm = _mm_loadu_si128((const __m128i *) (const void *) ((const blk_q2_K *) (const void *) x)->scales);
        *sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F)));
        *mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
    }
}

/* the float step of the types with mins (Q4_K, Q5_K, Q2_K), AVX2's order:
 * acc = fma(d8 * d, isum, acc); acc = fnma(d8 * dmin, madd(mins, bsums), acc) */
TK_KQX_INLINE __m256 tk_kqx_acc_min(__m256 acc, __m256i isum, __m256i mins, const blk_q8_K * q, __m256 xd, __m256 xm) {
    const __m256i msum = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *) (const void *) q->bsums));
    const __m256 d8 = _mm256_broadcast_ss(&q->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d8, xd), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(d8, xm), _mm256_cvtepi32_ps(msum), acc);
}

/* The f16 d and dmin of super-block x (Q4_K / Q5_K: q45; Q2_K) or its d (Q6_K / Q3_K; xm
 * then unused) in 8 float lanes each (exact conversions) */
TK_KQX_INLINE void tk_kqx_d(const int q45, const int kind, const uint8_t * x, __m256 * xd, __m256 * xm) {
    tk_half hd, hm = 0;
    if (q45 || kind == TK_KQX_Q2) {
        const size_t o = q45 ? 0 : offsetof(blk_q2_K, d);
        memcpy(&hd, x + o, 2);
        memcpy(&hm, x + o + 2, 2);   /* dmin follows d in Q4_K, Q5_K and Q2_K */
    } else {
        memcpy(&hd, x + (kind == TK_KQX_Q3 ? offsetof(blk_q3_K, d) : offsetof(blk_q6_K, d)), 2);
    }
    *xd = _mm256_set1_ps(_cvtsh_ss(hd));
    *xm = _mm256_set1_ps(_cvtsh_ss(hm));
}

/* One token's float step per super-block, AVX2's order: Q4_K / Q5_K (q45) and Q2_K through
 * tk_kqx_acc_min (s16: the mins); Q6_K / Q3_K: acc = fma(d8 * d, isum - off * madd(bsums,
 * s16), acc), s16 the scales, off = 32 / 4 (the offset of the stored quants). */
TK_KQX_INLINE __m256 tk_kqx_step(const int q45, const int kind, __m256 acc, __m256i isum, __m256i s16,
                                 const blk_q8_K * q, __m256 xd, __m256 xm) {
    if (q45 || kind == TK_KQX_Q2) return tk_kqx_acc_min(acc, isum, s16, q, xd, xm);
    const __m256i msc = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *) (const void *) q->bsums), s16);
    const __m256i corr = kind == TK_KQX_Q3 ? _mm256_slli_epi32(msc, 2) : _mm256_slli_epi32(msc, 5);
    const __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&q->d), xd);
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, corr)), acc);
}

#endif
