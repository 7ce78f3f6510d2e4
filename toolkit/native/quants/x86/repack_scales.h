/* repack_scales.h: the 6-bit scales of a re-laid Q5_K / IQ4_XS group (repack.h: the file's
 * packed bytes, byte k of the 16 rows side by side) unpacked for the 16 rows at once, with
 * SSE2 byte operations (x86-64's base set: inlined into the AVX2, AVX-VNNI and AVX-512 tiles).
 * The same values as repack.c's scalar tiles (tk_scales_k4; IQ4_XS's ls). */
#ifndef TK_REPACK_SCALES_H
#define TK_REPACK_SCALES_H

#include <emmintrin.h>
#include <stdint.h>

/* Q5_K: sc[j][r] the scale of sub-block j, mn[k][r][0..1] the mins of sub-blocks 2k, 2k + 1
 * (tk_scales_k4: j < 4: sc = b[j] & 63, m = b[j + 4] & 63; j >= 4: sc = (b[j + 4] & 15) |
 * (b[j - 4] >> 6) << 4, m = (b[j + 4] >> 4) | (b[j] >> 6) << 4) */
static inline __attribute__((always_inline)) void tk_rp_q5k_scales(const uint8_t s12[12][16], uint8_t sc[8][16],
                                                                   uint8_t mn[4][16][2]) {
    const __m128i m63 = _mm_set1_epi8(63), m15 = _mm_set1_epi8(15), m48 = _mm_set1_epi8(48);
    __m128i b[12], m[8];
    for (int k = 0; k < 12; k++) b[k] = _mm_loadu_si128((const __m128i *) (const void *) s12[k]);
    for (int j = 0; j < 4; j++) {
        _mm_storeu_si128((__m128i *) (void *) sc[j], _mm_and_si128(b[j], m63));
        _mm_storeu_si128((__m128i *) (void *) sc[j + 4],
                         _mm_or_si128(_mm_and_si128(b[j + 8], m15), _mm_and_si128(_mm_srli_epi16(b[j], 2), m48)));
        m[j] = _mm_and_si128(b[j + 4], m63);
        m[j + 4] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b[j + 8], 4), m15), _mm_and_si128(_mm_srli_epi16(b[j + 4], 2), m48));
    }
    for (int k = 0; k < 4; k++) {
        _mm_storeu_si128((__m128i *) (void *) mn[k][0], _mm_unpacklo_epi8(m[2 * k], m[2 * k + 1]));
        _mm_storeu_si128((__m128i *) (void *) mn[k][8], _mm_unpackhi_epi8(m[2 * k], m[2 * k + 1]));
    }
}

/* IQ4_XS: ls[j][r] = the 6-bit scale of sub-block j - 32 (low 4 bits: nibble j % 2 of
 * scales_l[j / 2]; high 2: bits 2j, 2j + 1 of scales_h, byte j / 4) */
static inline __attribute__((always_inline)) void tk_rp_iq4xs_scales(const uint8_t sh[2][16], const uint8_t sl[4][16],
                                                                     int8_t ls[8][16]) {
    const __m128i m15 = _mm_set1_epi8(15), m48 = _mm_set1_epi8(48), c32 = _mm_set1_epi8(32);
    const __m128i h0 = _mm_loadu_si128((const __m128i *) (const void *) sh[0]);
    const __m128i h1 = _mm_loadu_si128((const __m128i *) (const void *) sh[1]);
    /* bits 2j', 2j' + 1 (j' = j % 4) moved to 4, 5 */
    const __m128i hi[4] = {_mm_slli_epi16(h0, 4), _mm_slli_epi16(h0, 2), h0, _mm_srli_epi16(h0, 2)};
    const __m128i hi1[4] = {_mm_slli_epi16(h1, 4), _mm_slli_epi16(h1, 2), h1, _mm_srli_epi16(h1, 2)};
    for (int j = 0; j < 8; j += 2) {
        const __m128i l = _mm_loadu_si128((const __m128i *) (const void *) sl[j / 2]);
        const __m128i lo0 = _mm_and_si128(l, m15), lo1 = _mm_and_si128(_mm_srli_epi16(l, 4), m15);
        const __m128i x0 = j < 4 ? hi[j % 4] : hi1[j % 4], x1 = j < 4 ? hi[j % 4 + 1] : hi1[j % 4 + 1];
        _mm_storeu_si128((__m128i *) (void *) ls[j], _mm_sub_epi8(_mm_or_si128(lo0, _mm_and_si128(x0, m48)), c32));
        _mm_storeu_si128((__m128i *) (void *) ls[j + 1], _mm_sub_epi8(_mm_or_si128(lo1, _mm_and_si128(x1, m48)), c32));
    }
}

#endif
