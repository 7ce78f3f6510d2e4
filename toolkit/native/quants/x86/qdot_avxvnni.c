/* qdot_avxvnni.c: AVX-VNNI (256-bit vpdpbusd / vpdpwssd) row kernels for prompts (n_tok >= 2):
 * Q8_0 weights x Q8_0 activations (vpdpbusd), Q4_K / Q5_K / Q6_K / Q3_K / Q2_K weights x Q8_K
 * activations (vpdpwssd): the types with AVX-512 prompt kernels.
 * Generation (n_tok == 1), K > 32768 (Q8_0) and Q4_K / Q5_K token groups of fewer than 5
 * tokens run the AVX2 kernels (x86-64 only; contract: qdot.h, tk_qdot_rows_fn).
 *
 * Compiled with the package's portable flags; every function here carries TK_AVXVNNI_TARGET
 * (tk_avxvnni.h: the AVX2 set + "avxvnni") and is handed out (the type table's AVXVNNI slot,
 * ggml_types.c) only at TK_CPU_AVX2 where cpu.c found AVX-VNNI (cpuid.(7,1):EAX bit 4, e.g.
 * Alder Lake and later Intel cores, Zen 5) and it is not turned off (TOOLKIT_CPU=avx2-novnni,
 * tk_cpu_set_avxvnni).  At TK_CPU_AVX512 the AVX-512 kernels run instead.  Tests build this
 * file under SIMDe too (-DTK_EMULATE_AVXVNNI, tests/unit/test_avx512_emulated.py).
 *
 * Bit-identical to the AVX2 kernels (qdot_legacy_avx2.c's Q8_0 prompt tile, qdot_kquants_avx2.c's
 * k-quant tiles), by construction: the tiles, the order of the float operations per
 * output and the reduction tree are theirs; only the integer lanes are formed with fewer
 * instructions, and they are exact integers in both, the same products in the same lane:
 *   Q8_0:  AVX2 p = madd(maddubs(|w|, sign(a, w)), 1); here p = vpdpbusd(0, |w|, sign(a, w))
 *          (the sign trick stays).  Lane l = the 4 products 4l..4l+3 in both.  maddubs never
 *          saturates on these inputs: |w| (u8) <= 128, sign(a, w) (s8) in [-128, 127], so a
 *          pair is in [-32768, 32512]; vpdpbusd does not saturate at all.
 *   k-quants: AVX2 isum += madd((sc, sc), maddubs(v, q8)) per 32 values (then the adds);
 *          here isum = vpdpwssd(isum, maddubs(v, q8), (sc, sc)): lane k gets
 *          sc * (pair 2k + pair 2k+1) = sc * (the 4 products 4k..4k+3), as madd gives it,
 *          accumulated in the same instruction (no saturation: a maddubs pair is at most
 *          2 * 63 * 128 = 16128 in magnitude, Q6_K's 0..63 weights; Q5_K 0..31, Q4_K 0..15,
 *          Q3_K 0..7, Q2_K 0..3).
 *          The sum over a super-block's sub-blocks is reassociated, which integers do not
 *          notice.  (A vpdpbusd here would need a zeroed accumulator per 32 values: one more
 *          instruction than maddubs.)
 *   Then, per output, the AVX2 float part unchanged: acc = fma(d_w * d_a, float(p), acc) per
 *   block (Q8_0), the k-quants' fma / fnma of d8 * d, d8 * dmin per super-block, and
 *   tk_hsum8_avx2.  Where the outputs could differ: nowhere while both kernels see the same
 *   bytes (a NaN / inf scale gives NaN or inf in both through the same float operations).
 *
 * Cost, by instruction count (NOT measured: written on a Zen 3 without AVX-VNNI, checked only
 * under emulation; counts from objdump of the gcc 12 -O3 objects, the hot loop of the largest
 * tile):
 *   Q8_0, per 32-value block and (row, token): AVX2 sign + maddubs + madd + cvt + broadcast +
 *   fma; here sign + vpdpbusd + cvt + broadcast + fma, plus a register move that zeroes
 *   vpdpbusd's accumulator (eliminated at rename on these cores, no execution port).  The
 *   4 x 2 tile's loop is 79 instructions per block in both, with 46 -> 38 vector ALU
 *   operations (the 8 madd gone): at most ~1.2x where those ports bound the tile.
 *   k-quants, per 32 values and token: AVX2 maddubs + madd + add (3); here maddubs +
 *   vpdpwssd (2).  Per row and super-block the scale vectors cost more than AVX2's (Q4_K /
 *   Q5_K: the 12 scale bytes unpacked with scalar operations, one vpermd per 32 values), so
 *   the gain needs tokens to share them.  The 1 x T tile's loop per super-block,
 *   instructions AVX2 -> here, T = 1 / 2 / 4 / 5 / 8:
 *     Q4_K  85 -> 95, 117 -> 125, 183 -> 184, 218 -> 212, 324 -> 301
 *     Q5_K  109 -> 132, 143 -> 160, 209 -> 217, 243 -> 246, 366 -> 343 (T = 6: 279 -> 277)
 *     Q6_K  94 -> 91, 127 -> 118, 189 -> 173, 223 -> 202, 329 -> 292
 *     Q3_K  127 -> 121, 158 -> 164, 224 -> 217, 259 -> 251, 367 -> 344
 *     Q2_K  78 -> 71, 114 -> 99, 179 -> 157, 214 -> 185, 322 -> 272
 *   so Q4_K / Q5_K token groups of fewer than 5 tokens (VN_MIN_Q45) and the others' single
 *   tokens run the AVX2 kernel (qdot.h tk_kq_drive), with the same bits.
 *   Generation (n_tok == 1) keeps the AVX2 kernels: Q8_0 there waits on memory, and of the
 *   k-quants only Q6_K / Q3_K / Q2_K would save 3-9% of the 1 x 1 tile's instructions, while
 *   the AVX2 1 x 1 tile carries the measured prefetch hints of the weight stream
 *   (qdot_kquants_avx2.c KQ_PF_BYTES); a second generation path is not worth it unmeasured.
 *
 * ref: Intel SDM vol. 2 VPDPBUSD, VPDPWSSD (VEX.256 forms, AVX-VNNI); ggml-org/llama.cpp
 * ggml/src/ggml-cpu/arch/x86/quants.c mul_sum_i8_pairs_float (its __AVXVNNI__ branch: the
 * sign trick with _mm256_dpbusd_avx_epi32), and ggml_vec_dot_{q2_K,q3_K,q4_K,q5_K,q6_K}_q8_K
 * (scale layouts).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quants/qdot.h"
#include "quants/x86/tk_avxvnni.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define VN TK_AVXVNNI_TARGET
#define VN_INLINE VN TK_AVXVNNI_INLINE
#define TK_KQX_INLINE VN_INLINE
#include "quants/x86/tk_kq_x86.h"   /* AVX2's scale layouts and float step (shared with qdot_kquants_avx512.c) */

/* keeps an accumulator in a register here (qdot_kquants_avx2.c's KQ_PIN); not under SIMDe */
#ifdef TK_EMULATE_AVX512
#define VN_PIN(v) ((void) 0)
#else
#define VN_PIN(v) __asm__("" : "+x"(v))
#endif

VN_INLINE __m256i vn_load(const void * p) { return _mm256_loadu_si256((const __m256i *) p); }

/* ---- Q8_0 x Q8_0 ------------------------------------------------------------------------ */


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

/* R (4 or 1) rows from wr against the n tokens of a token block, 2 tokens at a time, the
 * last odd one alone (qdot_legacy_avx2.c's lg_q8_rows) */
VN_INLINE void vn_q8_rows(int R, const uint8_t * wr, size_t row_bytes, const uint8_t * a, size_t a_bytes, int64_t nb,
                          const float * dwf, const float * daf, int64_t n, float * y, int64_t ldy) {
    int64_t t = 0;
    for (; t + 2 <= n; t += 2)
        vn_tile_q8(R, 2, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy);
    if (t < n) vn_tile_q8(R, 1, wr, row_bytes, a + (size_t) t * a_bytes, a_bytes, nb, dwf, daf + t * nb, y + t * ldy, ldy);
}

/* Rows [r0, r1) x all tokens (qdot.h tk_q8_drive): token blocks of about 192 KiB of
 * activations, an even number of tokens, in a block 4 rows at a time, then single rows */
TK_Q8_KERNEL(VN, tk_qdot_rows_q8_0_avxvnni, vn_q8_rows, 2)

/* ---- Q4_K / Q5_K / Q6_K / Q3_K / Q2_K x Q8_K ---------------------------------------------- */


/* every byte: ((v >> cnt) & mask) << up (cnt, up: constants after inlining; the bits a 16-bit
 * shift brings in from the next byte are masked off for every (cnt, mask) used here) */
VN_INLINE __m256i vn_field(__m256i v, int cnt, char mask, int up) {
    const __m256i f = _mm256_and_si256(_mm256_srli_epi16(v, cnt), _mm256_set1_epi8(mask));
    return up ? _mm256_slli_epi16(f, up) : f;
}

/* Q4_K / Q5_K: int32 lane k of v in the low 4 lanes, lane k2 in the high 4 (vpermd) */
VN_INLINE __m256i vn_pick32(__m256i v, int k, int k2) {
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(k, k, k, k, k2, k2, k2, k2));
}

/* Q6_K / Q3_K / Q2_K: v holds 8 int16 scales in each 128-bit lane -> element k of the low
 * lane in every int16 of the low lane, element k2 of the high lane in the high one (vpshufb;
 * the control a constant in memory, as AVX2's tables) */
VN_INLINE __m256i vn_pick16(__m256i v, int k, int k2) {
    return _mm256_shuffle_epi8(v, _mm256_set_m128i(_mm_set1_epi16((short) (((2 * k2 + 1) << 8) | (2 * k2))),
                                                   _mm_set1_epi16((short) (((2 * k + 1) << 8) | (2 * k)))));
}

/* isum + sc * the 4-product sums of v (32 unsigned weights) . q8 (32 quants), per int32 lane;
 * sc: (sc, sc) int16 pairs */
VN_INLINE __m256i vn_dot(__m256i isum, __m256i v, const int8_t * q8, __m256i sc) {
    return TK_DPWSSD256(isum, _mm256_maddubs_epi16(v, vn_load(q8)), sc);
}

/* 1 row x T tokens of Q4_K (five = 0) or Q5_K (five = 1): qdot_kquants_avx2.c's kq_tile_q45.
 * Sub-block 2c (c < 4) = low nibbles of qs[32c .. 32c+32), 2c+1 = their high nibbles; Q5_K's
 * 5th bit of sub-block j: bit j of qh[l]. */
VN_INLINE void vn_tile_q45(const int five, const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T,
                           float * y, int64_t ldy) {
    const size_t bw = five ? sizeof(blk_q5_K) : sizeof(blk_q4_K);
    const size_t qs_off = five ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs);
    __m256 acc[TK_KQ_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_K * q[TK_KQ_TMAX];
        const uint8_t * x = tk_kq_sb(w, bw, i, a, ab, T, q);
        __m256i mns;                                            /* d, dmin, scales[12], ... */
        const __m256i s32 = _mm256_cvtepu8_epi32(tk_kqx_scales_k4(x + 4, &mns));
        const __m256i scl = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));   /* (s, s) int16 pairs */
        __m256i isum[TK_KQ_TMAX];
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
            const __m256i sl = vn_pick32(scl, 2 * c, 2 * c), sh = vn_pick32(scl, 2 * c + 1, 2 * c + 1);
            for (int t = 0; t < T; t++) {
                isum[t] = vn_dot(vn_dot(isum[t], lo, q[t]->qs + 64 * c, sl), hi, q[t]->qs + 64 * c + 32, sh);
                VN_PIN(isum[t]);
            }
        }
        __m256 xd, xm;
        tk_kqx_d(1, 0, x, &xd, &xm);
        for (int t = 0; t < T; t++) acc[t] = tk_kqx_step(1, 0, acc[t], isum[t], mns, q[t], xd, xm);
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- Q6_K / Q3_K / Q2_K: 16 scales of 16 values (qdot_kquants_avx2.c's kq_tile_s16) ----------
 * Step (h, p) (h, p < 2) covers the 64 values 128h + 64p .. +64 as two vectors of 32,
 * v0 (values 128h + 32k + l, k = 2p) and v1 (k = 2p + 1), unsigned:
 *   Q6_K: nibble p of ql[64h + 32 (k & 1) + l], bits 2k..2k+1 of qh[32h + l] above it (0..63)
 *   Q3_K: bits 2k..2k+1 of qs[32h + l], bit 4h + k of hmask[l] as 4 (0..7)
 *   Q2_K: bits 2k..2k+1 of qs[32h + l] (0..3)
 * The 128-bit lane j of vector k holds 16 values of scale 8h + 2k + j.  Per output and
 * super-block: isum = sum_j sc_j (v . q8)_j; Q6_K / Q3_K (stored as q + 32 / q + 4) then
 * acc = fma(d8 * d, isum - off * madd(bsums, sc), acc); Q2_K acc = fma(d8 * d, isum, acc),
 * acc = fnma(d8 * dmin, madd(mins, bsums), acc). */
enum { VN_Q6 = TK_KQX_Q6, VN_Q3 = TK_KQX_Q3, VN_Q2 = TK_KQX_Q2 };

VN_INLINE void vn_vals_s16(const int kind, const uint8_t * blk, int h, int p, __m256i * v0, __m256i * v1) {
    if (kind == VN_Q6) {
        const blk_q6_K * x = (const blk_q6_K *) (const void *) blk;
        const __m256i bh = vn_load(x->qh + 32 * h);
        *v0 = _mm256_or_si256(vn_field(vn_load(x->ql + 64 * h), 4 * p, 0x0F, 0), vn_field(bh, 4 * p, 3, 4));
        *v1 = _mm256_or_si256(vn_field(vn_load(x->ql + 64 * h + 32), 4 * p, 0x0F, 0), vn_field(bh, 4 * p + 2, 3, 4));
    } else if (kind == VN_Q3) {
        const blk_q3_K * x = (const blk_q3_K *) (const void *) blk;
        const __m256i bits = vn_load(x->qs + 32 * h), hm = vn_load(x->hmask);
        *v0 = _mm256_or_si256(vn_field(bits, 4 * p, 3, 0), vn_field(hm, 4 * h + 2 * p, 1, 2));
        *v1 = _mm256_or_si256(vn_field(bits, 4 * p + 2, 3, 0), vn_field(hm, 4 * h + 2 * p + 1, 1, 2));
    } else {
        const __m256i bits = vn_load(((const blk_q2_K *) (const void *) blk)->qs + 32 * h);
        *v0 = vn_field(bits, 4 * p, 3, 0);
        *v1 = vn_field(bits, 4 * p + 2, 3, 0);
    }
}

/* 1 row x T tokens */
VN_INLINE void vn_tile_s16(const int kind, const uint8_t * w, const uint8_t * a, size_t ab, int64_t nb, const int T,
                           float * y, int64_t ldy) {
    const size_t bw = kind == VN_Q6 ? sizeof(blk_q6_K) : kind == VN_Q3 ? sizeof(blk_q3_K) : sizeof(blk_q2_K);
    __m256 acc[TK_KQ_TMAX];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_K * q[TK_KQ_TMAX];
        const uint8_t * x = tk_kq_sb(w, bw, i, a, ab, T, q);
        __m256i sc16, mn16;   /* AVX2's int16 scales (Q2_K: and mins) */
        tk_kqx_scales_s16(kind, x, &sc16, &mn16);
        /* the scales 8h .. 8h + 7 in both 128-bit lanes, h = 0, 1 (AVX2's layout) */
        const __m256i sch[2] = { _mm256_permute4x64_epi64(sc16, 0x44), _mm256_permute4x64_epi64(sc16, 0xEE) };
        __m256i isum[TK_KQ_TMAX];
        for (int t = 0; t < T; t++) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                __m256i v0, v1;
                vn_vals_s16(kind, x, h, p, &v0, &v1);
                const __m256i s0 = vn_pick16(sch[h], 4 * p, 4 * p + 1), s1 = vn_pick16(sch[h], 4 * p + 2, 4 * p + 3);
                for (int t = 0; t < T; t++) {
                    const int8_t * q8 = q[t]->qs + 128 * h + 64 * p;
                    isum[t] = vn_dot(vn_dot(isum[t], v0, q8, s0), v1, q8 + 32, s1);
                    VN_PIN(isum[t]);
                }
            }
        }
        __m256 xd, xm;
        tk_kqx_d(0, kind, x, &xd, &xm);
        const __m256i s16 = kind == VN_Q2 ? mn16 : sc16;
        for (int t = 0; t < T; t++) acc[t] = tk_kqx_step(0, kind, acc[t], isum[t], s16, q[t], xd, xm);
    }
    for (int t = 0; t < T; t++) y[t * ldy] = tk_hsum8_avx2(acc[t]);
}

/* ---- the row kernels of the type table's AVXVNNI slot (qdot.h) ----------------------------
 * Tiles 1 x T, T = 1..8, in chunks of 16 rows (qdot.h tk_kq_drive, the AVX2 driver's order);
 * generation (n_tok == 1) and token groups of fewer than VN_MIN_* tokens: the AVX2 kernel
 * (the thresholds: the instruction counts in the file's header). */
#define VN_MIN_Q45 5
#define VN_MIN_S16 2
TK_KQ_KERNELS(VN, avxvnni, vn_tile_q45, vn_tile_s16, VN_MIN_Q45, VN_MIN_S16)

#endif /* __x86_64__ && __GNUC__ */
