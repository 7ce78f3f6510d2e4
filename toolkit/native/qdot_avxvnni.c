/* qdot_avxvnni.c: AVX-VNNI (256-bit vpdpbusd / vpdpwssd) row kernels for prompts (n_tok >= 2):
 * Q8_0 weights x Q8_0 activations, Q4_K / Q5_K / Q6_K weights x Q8_K activations.
 * Generation (n_tok == 1) and K > 32768 (Q8_0) run the AVX2 kernels (x86-64 only;
 * contract: qdot.h, tk_qdot_rows_fn).
 *
 * Compiled with the package's portable flags; every function here carries TK_AVXVNNI_TARGET
 * (tk_avxvnni.h: the AVX2 set + "avxvnni") and is handed out (the type table's AVXVNNI slot,
 * ggml_types.c) only at TK_CPU_AVX2 where cpu.c found AVX-VNNI (cpuid.(7,1):EAX bit 4, e.g.
 * Alder Lake and later Intel cores, Zen 5) and it is not turned off (TOOLKIT_CPU=avx2-novnni,
 * tk_cpu_set_avxvnni).  At TK_CPU_AVX512 the AVX-512 kernels run instead.  Tests build this
 * file under SIMDe too (-DTK_EMULATE_AVXVNNI, tests/unit/test_avxvnni_emulated.py).
 *
 * Bit-identical to the AVX2 kernels (qdot_legacy_avx2.c's Q8_0 prompt tile, qdot_kquants_avx2.c's
 * Q4_K / Q5_K / Q6_K tiles), by construction: the tiles, the order of the float operations per
 * output and the reduction tree are theirs; only the integer lanes are formed with fewer
 * instructions, and they are exact integers in both, the same products in the same lane:
 *   Q8_0:  AVX2 p = madd(maddubs(|w|, sign(a, w)), 1); here p = vpdpbusd(0, |w|, sign(a, w))
 *          (the sign trick stays).  Lane l = the 4 products 4l..4l+3 in both.  maddubs never
 *          saturates on these inputs: |w| (u8) <= 128, sign(a, w) (s8) in [-128, 127], so a
 *          pair is in [-32768, 32512]; vpdpbusd does not saturate at all.
 *   k-quants: AVX2 isum += madd((sc, sc), maddubs(v, q8)) per 32 values; here
 *          isum = vpdpwssd(isum, vpdpbusd(0, v, q8), (sc, 0)): the 4-product sum p of a lane
 *          fits int16 (|p| <= 4 * 63 * 128 = 32256, Q6_K's 0..63 weights; Q5_K 0..31, Q4_K
 *          0..15), so its low int16 is p and its high int16 (p's sign) meets the 0 of the
 *          (sc, 0) pair.  The sum over a super-block's sub-blocks is reassociated, which
 *          integers do not notice.
 *   Then, per output, the AVX2 float part unchanged: acc = fma(d_w * d_a, float(p), acc) per
 *   block (Q8_0), the k-quants' fma / fnma of d8 * d, d8 * dmin per super-block, and
 *   tk_hsum8_avx2.  Where the outputs could differ: nowhere while both kernels see the same
 *   bytes (a NaN / inf scale gives NaN or inf in both through the same float operations).
 *
 * Cost per output, by instruction count (NOT measured: written on a Zen 3 without AVX-VNNI,
 * checked only under emulation):
 *   Q8_0, per 32-value block and (row, token): AVX2 sign + maddubs + madd + cvt + broadcast +
 *   fma = 6 instructions; here sign + vpdpbusd + cvt + broadcast + fma = 5 (plus a zeroing
 *   move for vpdpbusd's accumulator, a register-renaming idiom on these cores).  About 1/6
 *   fewer, so at most ~15-20% on the tile where it is bound by these ports; the weight and
 *   activation loads and |w| per row are shared by the 4 x 2 tile as in AVX2.
 *   Q4_K / Q5_K / Q6_K, per 32 values and token: AVX2 maddubs + madd + add = 3; here
 *   vpdpbusd + vpdpwssd = 2 (plus the zeroing move); the unpacking of the weights and the
 *   scale vectors (one vpermd per 32 values) are per row and shared by the tile's T <= 8
 *   tokens.
 *   Generation keeps the AVX2 kernels: it reads each weight once and is bound by memory
 *   (Q8_0) or by the weight unpacking (k-quants), which VNNI does not shorten.
 *
 * ref: Intel SDM vol. 2 VPDPBUSD, VPDPWSSD (VEX.256 forms, AVX-VNNI); ggml-org/llama.cpp
 * ggml/src/ggml-cpu/arch/x86/quants.c mul_sum_i8_pairs_float / mul_sum_us8_pairs_float
 * (their __AVXVNNI__ branches: the sign trick with _mm256_dpbusd_avx_epi32), and
 * ggml_vec_dot_{q4_K,q5_K,q6_K}_q8_K (scale layouts).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qdot.h"
#include "tk_avxvnni.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define VN TK_AVXVNNI_TARGET
#define VN_INLINE VN TK_AVXVNNI_INLINE

/* keeps an accumulator in a register here (qdot_kquants_avx2.c's KQ_PIN); not under SIMDe */
#ifdef TK_EMULATE_AVX512
#define VN_PIN(v) ((void) 0)
#else
#define VN_PIN(v) __asm__("" : "+x"(v))
#endif

VN_INLINE __m256i vn_load(const void * p) { return _mm256_loadu_si256((const __m256i *) p); }

/* ---- Q8_0 x Q8_0 ------------------------------------------------------------------------ */

#define VN_Q8_TOK_FLOATS 6144   /* token scales of a token block (qdot_legacy_avx2.c's bound) */
#define VN_Q8_MAX_NB 1024       /* K <= 32768 (dwf: 16 KiB of stack); longer rows: the AVX2 kernel */

/* R (1..4) weight rows x T (1..2) tokens, nb blocks: qdot_legacy_avx2.c's lg_tile_q8_avx2 with
 * vpdpbusd.  dwf[4 b + i]: d_w of row i, block b; daf[t nb + b]: d_a of token t (exact
 * conversions of the f16 scales); y[t ldy + i]. */
VN_INLINE void vn_tile_q8(int R, int T, const uint8_t * w, size_t row_bytes, const uint8_t * a, size_t a_bytes,
                          int64_t nb, const float * dwf, const float * daf, float * y, int64_t ldy) {
    const size_t bs = sizeof(blk_q8_0);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) acc[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float sc[2][4] __attribute__((aligned(16)));
        const __m128 dw = _mm_loadu_ps(dwf + 4 * b);
        __m256i x[2];
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            _mm_store_ps(sc[t], _mm_mul_ps(dw, _mm_broadcast_ss(daf + t * nb + b)));
            x[t] = vn_load(a + (size_t) t * a_bytes + (size_t) b * bs + 2);
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const __m256i wv = vn_load(w + (size_t) i * row_bytes + (size_t) b * bs + 2);
            const __m256i u = _mm256_sign_epi8(wv, wv);
#pragma GCC unroll 2
            for (int t = 0; t < T; t++) {
                const __m256i p = TK_DPBUSD256(_mm256_setzero_si256(), u, _mm256_sign_epi8(x[t], wv));
                acc[i][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[t][i]), _mm256_cvtepi32_ps(p), acc[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) y[t * ldy + i] = tk_hsum8_avx2(acc[i][t]);
}

/* the f16 scales of n blocks `stride` bytes apart as floats, dst[k * step] */
VN_INLINE void vn_scales_f32(const uint8_t * blk, size_t stride, int64_t n, float * dst, int step) {
    for (int64_t k = 0; k < n; k++) {
        uint16_t h;
        memcpy(&h, blk + (size_t) k * stride, 2);
        dst[k * step] = _cvtsh_ss(h);
    }
}

/* R (4 or 1) rows from wr against the n tokens of a token block (daf: their scales), 2
 * tokens at a time, the last odd one alone */
VN_INLINE void vn_q8_rows(int R, const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb,
                          float * dwf, const float * daf, int64_t n, float * y, int64_t ldy) {
    for (int i = 0; i < R; i++) vn_scales_f32(wr + (size_t) i * row_bytes, sizeof(blk_q8_0), nb, dwf + i, 4);
    int64_t t = 0;
    for (; t + 2 <= n; t += 2)
        vn_tile_q8(R, 2, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy);
    if (t < n) vn_tile_q8(R, 1, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy);
}

/* Rows [r0, r1) x all tokens: token blocks of about 192 KiB of activations (the AVX2
 * kernel's), in a block 4 rows at a time, then single rows. */
VN void tk_qdot_rows_q8_0_avxvnni(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                                  int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = K / QK32;
    if (n_tok == 1 || nb > VN_Q8_MAX_NB) {
        tk_qdot_rows_q8_0_avx2(w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);
        return;
    }
    float daf[VN_Q8_TOK_FLOATS], dwf[4 * VN_Q8_MAX_NB];
    int64_t tb = (int64_t) 196608 / (a_bytes > 0 ? (int64_t) a_bytes : 1);
    tb = tb < 2 ? 2 : tb - tb % 2;
    if (tb * nb > VN_Q8_TOK_FLOATS) tb = (VN_Q8_TOK_FLOATS / nb) & ~(int64_t) 1;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t n = t0 + tb < n_tok ? tb : n_tok - t0;
        const uint8_t * at = a + (size_t) t0 * a_bytes;
        for (int64_t t = 0; t < n; t++) vn_scales_f32(at + (size_t) t * a_bytes, sizeof(blk_q8_0), nb, daf + t * nb, 1);
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4)
            vn_q8_rows(4, w + (size_t) r * row_bytes, row_bytes, at, a_bytes, nb, dwf, daf, n, y + t0 * ldy + r, ldy);
        for (; r < r1; r++)
            vn_q8_rows(1, w + (size_t) r * row_bytes, row_bytes, at, a_bytes, nb, dwf, daf, n, y + t0 * ldy + r, ldy);
    }
}

/* ---- Q4_K / Q5_K / Q6_K x Q8_K ----------------------------------------------------------- */

#define VN_TMAX 8          /* tokens per tile (qdot_kquants_avx2.c's KQ_TMAX) */
#define VN_RCHUNK 16       /* rows per chunk (its KQ_RCHUNK) */

/* every byte: ((v >> cnt) & mask) << up (cnt, up: constants after inlining; the bits a 16-bit
 * shift brings in from the next byte are masked off for every (cnt, mask) used here) */
VN_INLINE __m256i vn_field(__m256i v, int cnt, char mask, int up) {
    const __m256i f = _mm256_and_si256(_mm256_srli_epi16(v, cnt), _mm256_set1_epi8(mask));
    return up ? _mm256_slli_epi16(f, up) : f;
}

/* int32 lane k of v in the low 4 lanes, lane k2 in the high 4: the (sc, 0) int16 pairs of
 * 32 values whose two 16-value halves have the scales in lanes k, k2 */
VN_INLINE __m256i vn_pick(__m256i v, int k, int k2) {
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(k, k, k, k, k2, k2, k2, k2));
}

/* isum + the scaled 4-product sums of v (32 unsigned weights) . q8 (32 quants); sc: (sc, 0) */
VN_INLINE __m256i vn_dot(__m256i isum, __m256i v, const int8_t * q8, __m256i sc) {
    return TK_DPWSSD256(isum, TK_DPBUSD256(_mm256_setzero_si256(), v, vn_load(q8)), sc);
}

/* The 12 scale bytes of Q4_K / Q5_K (ggml's get_scale_min_k4 / kmask unpacking) -> sc8: the
 * scales s0..s7 as int32 (= (s, 0) int16 pairs); mns: the mins as int16, each twice
 * (m0 m0 m1 m1 ...), to madd with the 16 bsums (AVX2's msum lanes). */
VN_INLINE void vn_scales_k4(const uint8_t * s12, __m256i * sc8, __m256i * mns) {
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    uint32_t u[4], v[3];
    memcpy(v, s12, 12);
    u[0] = v[0] & k1;                                           /* s0..s3 */
    u[1] = (v[2] & k2) | (((v[0] >> 6) & k3) << 4);            /* s4..s7 */
    u[2] = v[1] & k1;                                           /* m0..m3 */
    u[3] = ((v[2] >> 4) & k2) | (((v[1] >> 6) & k3) << 4);     /* m4..m7 */
    const __m128i sm = _mm_loadu_si128((const __m128i *) (const void *) u);
    *sc8 = _mm256_cvtepu8_epi32(sm);
    *mns = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
}

/* the float step of the types with mins, AVX2's order:
 * acc = fma(d8 * d, isum, acc); acc = fnma(d8 * dmin, madd(mins, bsums), acc) */
VN_INLINE __m256 vn_acc_min(__m256 acc, __m256i isum, __m256i mns, const blk_q8_K * q, __m256 xd, __m256 xm) {
    const __m256i msum = _mm256_madd_epi16(mns, vn_load(q->bsums));
    const __m256 d8 = _mm256_broadcast_ss(&q->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d8, xd), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(d8, xm), _mm256_cvtepi32_ps(msum), acc);
}

/* 1 row x T tokens of Q4_K (five = 0) or Q5_K (five = 1): qdot_kquants_avx2.c's kq_tile_q45.
 * Sub-block 2c (c < 4) = low nibbles of qs[32c .. 32c+32), 2c+1 = their high nibbles; Q5_K's
 * 5th bit of sub-block j: bit j of qh[l]. */
VN_INLINE void vn_tile_q45(const int five, const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T,
                           float * y, int64_t ldy) {
    const size_t bw = five ? sizeof(blk_q5_K) : sizeof(blk_q4_K);
    const size_t qs_off = five ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs);
    __m256 acc[VN_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t * x = w + i * bw;
        const blk_q8_K * q[VN_TMAX];
        for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
        __m256i sc8, mns;
        vn_scales_k4(x + 4, &sc8, &mns);                        /* d, dmin, scales[12], ... */
        __m256i isum[VN_TMAX];
        for (int t = 0; t < T; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m256i bits = vn_load(x + qs_off + 32 * c);
            __m256i lo = vn_field(bits, 0, 0x0F, 0), hi = vn_field(bits, 4, 0x0F, 0);
            if (five) {
                const __m256i hb = vn_load(x + offsetof(blk_q5_K, qh));
                lo = _mm256_or_si256(lo, vn_field(hb, 2 * c, 1, 4));
                hi = _mm256_or_si256(hi, vn_field(hb, 2 * c + 1, 1, 4));
            }
            const __m256i sl = vn_pick(sc8, 2 * c, 2 * c), sh = vn_pick(sc8, 2 * c + 1, 2 * c + 1);
            for (int t = 0; t < T; t++) {
                isum[t] = vn_dot(vn_dot(isum[t], lo, q[t]->qs + 64 * c, sl), hi, q[t]->qs + 64 * c + 32, sh);
                VN_PIN(isum[t]);
            }
        }
        tk_half hd, hm;
        memcpy(&hd, x, 2);
        memcpy(&hm, x + 2, 2);
        const __m256 xd = _mm256_set1_ps(_cvtsh_ss(hd)), xm = _mm256_set1_ps(_cvtsh_ss(hm));
        for (int t = 0; t < T; t++) acc[t] = vn_acc_min(acc[t], isum[t], mns, q[t], xd, xm);
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* 1 row x T tokens of Q6_K: qdot_kquants_avx2.c's kq_tile_s16 for Q6_K.  Element
 * 128h + 32k + l (h < 2, k < 4, l < 32): nibble k / 2 of ql[64h + 32 (k & 1) + l], bits
 * 2k..2k+1 of qh[32h + l]; value 0..63 (the -32 offset: a bsums correction); scale j of
 * 16 values: signed int8. */
VN_INLINE void vn_tile_q6(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T, float * y,
                          int64_t ldy) {
    __m256 acc[VN_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q6_K * x = (const blk_q6_K *) (const void *) w + i;
        const blk_q8_K * q[VN_TMAX];
        for (int t = 0; t < T; t++) q[t] = (const blk_q8_K *) (const void *) (a + t * ab) + i;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) (const void *) x->scales));
        /* (sc, 0) int16 pairs: the 16-bit patterns zero-extended; scales 0..7, 8..15 */
        const __m256i sc32[2] = { _mm256_cvtepu16_epi32(_mm256_castsi256_si128(sc16)),
                                  _mm256_cvtepu16_epi32(_mm256_extracti128_si256(sc16, 1)) };
        __m256i isum[VN_TMAX];
        for (int t = 0; t < T; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i bh = vn_load(x->qh + 32 * h);
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {        /* k = 2p, 2p + 1: nibble p of the two ql halves */
                const __m256i v0 = _mm256_or_si256(vn_field(vn_load(x->ql + 64 * h), 4 * p, 0x0F, 0),
                                                   vn_field(bh, 4 * p, 3, 4));
                const __m256i v1 = _mm256_or_si256(vn_field(vn_load(x->ql + 64 * h + 32), 4 * p, 0x0F, 0),
                                                   vn_field(bh, 4 * p + 2, 3, 4));
                const __m256i s0 = vn_pick(sc32[h], 4 * p, 4 * p + 1), s1 = vn_pick(sc32[h], 4 * p + 2, 4 * p + 3);
                for (int t = 0; t < T; t++) {
                    const int8_t * q8 = q[t]->qs + 128 * h + 64 * p;
                    isum[t] = vn_dot(vn_dot(isum[t], v0, q8, s0), v1, q8 + 32, s1);
                    VN_PIN(isum[t]);
                }
            }
        }
        const __m256 xd = _mm256_set1_ps(_cvtsh_ss(x->d));
        for (int t = 0; t < T; t++) {
            const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(vn_load(q[t]->bsums), sc16), 5);
            const __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&q[t]->d), xd);
            acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], corr)), acc[t]);
        }
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- tile instances and the row driver ------------------------------------------------ */
typedef void (*vn_tile_fn)(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, float * y, int64_t ldy);

#define VN_INST(name, body, T)                                                                              \
    VN static void name##_##T(const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, float * y, int64_t ldy) { \
        body(T);                                                                                            \
    }
/* tiles 1 x T, T = 1..8 (T = 1: the last token of a group), and their table by T - 1 */
#define VN_INST_ALL(name, body)                                                                             \
    VN_INST(name, body, 1) VN_INST(name, body, 2) VN_INST(name, body, 3) VN_INST(name, body, 4)             \
    VN_INST(name, body, 5) VN_INST(name, body, 6) VN_INST(name, body, 7) VN_INST(name, body, 8)             \
    static const vn_tile_fn name##_toks[VN_TMAX] = { name##_1, name##_2, name##_3, name##_4,                \
                                                     name##_5, name##_6, name##_7, name##_8 };
#define VN_Q4(T) vn_tile_q45(0, w, a, ab, nb, T, y, ldy)
#define VN_Q5(T) vn_tile_q45(1, w, a, ab, nb, T, y, ldy)
#define VN_Q6(T) vn_tile_q6(w, a, ab, nb, T, y, ldy)
VN_INST_ALL(vn_q4k, VN_Q4)
VN_INST_ALL(vn_q5k, VN_Q5)
VN_INST_ALL(vn_q6k, VN_Q6)

/* Chunks of VN_RCHUNK rows; in a chunk, groups of up to VN_TMAX tokens, each row against the
 * whole group (the AVX2 driver's order).  Generation (n_tok == 1): the AVX2 kernel `gen`. */
static void vn_drive_kq(const vn_tile_fn toks[VN_TMAX], tk_qdot_rows_fn gen, const uint8_t * w, size_t row_bytes,
                        int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, float * y, int64_t ldy, int64_t r0,
                        int64_t r1) {
    if (n_tok == 1) {
        gen(w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);
        return;
    }
    const int64_t nb = K / QK_K;
    for (int64_t rc = r0; rc < r1; rc += VN_RCHUNK) {
        const int64_t rce = r1 - rc < VN_RCHUNK ? r1 : rc + VN_RCHUNK;
        for (int64_t t = 0; t < n_tok; t += VN_TMAX) {
            const int tn = (int) (n_tok - t < VN_TMAX ? n_tok - t : VN_TMAX);
            for (int64_t r = rc; r < rce; r++) toks[tn - 1](w + r * row_bytes, a + t * a_bytes, a_bytes, nb, y + t * ldy + r, ldy);
        }
    }
}

/* the row kernels of the type table's AVXVNNI slot (qdot.h) */
#define VN_ROWS_FN(kname, tiles, avx2)                                                                      \
    void kname(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes, int64_t n_tok, \
               float * y, int64_t ldy, int64_t r0, int64_t r1) {                                            \
        vn_drive_kq(tiles##_toks, avx2, w, row_bytes, K, a, a_bytes, n_tok, y, ldy, r0, r1);                \
    }
VN_ROWS_FN(tk_qdot_rows_q4_K_avxvnni, vn_q4k, tk_qdot_rows_q4_K_avx2)
VN_ROWS_FN(tk_qdot_rows_q5_K_avxvnni, vn_q5k, tk_qdot_rows_q5_K_avx2)
VN_ROWS_FN(tk_qdot_rows_q6_K_avxvnni, vn_q6k, tk_qdot_rows_q6_K_avx2)

#endif /* __x86_64__ && __GNUC__ */
