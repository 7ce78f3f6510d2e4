/* kernels_neon.c: aarch64 Advanced SIMD (NEON) kernels, the TK_CPU_NEON level (cpu.c):
 * the float mat-mul (F32 / F16 / BF16 weights) and the Q8_0 weight x Q8_0 activation row
 * kernel.  The other quantized types run their scalar kernels at this level (the type
 * table's NEON slots, ggml_types.c, are empty for them).
 * Compiled everywhere; empty unless the target is aarch64 with NEON.
 *
 * Per output, the same operations whatever the batch, the rows or the thread split (each
 * output is computed alone, in one fixed order), so a token's result does not depend on
 * the ubatch it shares.  Against the scalar kernels the difference is float reordering:
 *   float:  acc[8] lanes (i mod 8, two 4-lane FMA accumulators), summed
 *           ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)) -- the scalar dot_f32's tree -- then the
 *           K % 8 tail in order;
 *   Q8_0:   per block, the 32 int8 products summed exactly in 4 int32 lanes (vmull_s8 /
 *           vmlal_s8 pairs, then pairwise long adds), converted to float and accumulated
 *           with one FMA by d_w * d_a (one float product); at the end (l0+l2) + (l1+l3).
 * No int16 overflow: a lane of vmlal_s8 adds two products w * a with |a| <= 127 (the Q8_0
 * activation quantizer's range) and |w| <= 128, at most 32512.
 * ref: ggml-org/llama.cpp ggml/src/ggml-cpu/arch/arm/quants.c ggml_vec_dot_q8_0_q8_0 (its
 * non-dotprod NEON branch: vmull_s8 / vmlal_s8 / vpaddlq_s16).
 * Checked here by cross-compiling and running under qemu-aarch64 against the scalar level
 * and a double reference (tests/native/aarch64_smoke.c); no aarch64 hardware was at hand,
 * so its speed is unmeasured.
 */
#include <stdint.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"
#include "qdot.h"

#ifdef TK_HAVE_NEON
#include <arm_neon.h>

/* the float dot of one weight row and one activation row, K floats */
static inline float dot_f32_neon(const float * w, const float * x, int64_t K) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) {
        a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, vld1q_f32(w + i + 4), vld1q_f32(x + i + 4));
    }
    float l[8];
    vst1q_f32(l, a0);
    vst1q_f32(l + 4, a1);
    float s = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    for (; i < K; i++) s += w[i] * x[i];
    return s;
}

/* One weight row as float32: F32 in place, F16 / BF16 expanded into dst (exact). */
static const float * row_f32_neon(int type, const uint8_t * row, int64_t K, float * dst) {
    if (type == TK_GGML_F32) return (const float *) (const void *) row;
    const uint16_t * h = (const uint16_t *) (const void *) row;
    int64_t i = 0;
    if (type == TK_GGML_F16) {
        for (; i + 4 <= K; i += 4) {
            uint16x4_t u = vld1_u16(h + i);
            vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(u)));
        }
        for (; i < K; i++) dst[i] = tk_fp16_to_fp32(h[i]);
    } else {   /* BF16: the high half of a float32 */
        for (; i + 4 <= K; i += 4) vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(h + i), 16)));
        for (; i < K; i++) dst[i] = tk_bf16_to_fp32(h[i]);
    }
    return dst;
}

void tk_matmul_rows_neon(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                         const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float * wr = row_f32_neon(type, base + (size_t) r * row_bytes, K, scratch);
        for (int64_t t = 0; t < n_tok; t++) y[t * M + r] = dot_f32_neon(wr, x + t * K, K);
    }
}

/* one Q8_0 weight row . one Q8_0 activation row, nb blocks */
static inline float dot_q8_0_neon(const blk_q8_0 * w, const blk_q8_0 * a, int64_t nb) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const int8x16_t w0 = vld1q_s8(w[b].qs), w1 = vld1q_s8(w[b].qs + 16);
        const int8x16_t x0 = vld1q_s8(a[b].qs), x1 = vld1q_s8(a[b].qs + 16);
        int16x8_t p0 = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
        p0 = vmlal_s8(p0, vget_high_s8(w0), vget_high_s8(x0));
        int16x8_t p1 = vmull_s8(vget_low_s8(w1), vget_low_s8(x1));
        p1 = vmlal_s8(p1, vget_high_s8(w1), vget_high_s8(x1));
        const int32x4_t s = vpadalq_s16(vpaddlq_s16(p0), p1);
        const float d = tkq_fp16_to_fp32(w[b].d) * tkq_fp16_to_fp32(a[b].d);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), d);
    }
    float l[4];
    vst1q_f32(l, acc);
    return (l[0] + l[2]) + (l[1] + l[3]);
}

/* tk_qdot_rows_fn (the type table's NEON slot of Q8_0): rows [r0, r1) x all tokens, each
 * output alone; a weight row stays in L1 while the tokens go by. */
void tk_qdot_rows_q8_0_neon(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                            int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1) {
    const int64_t nb = K / QK32;
    for (int64_t r = r0; r < r1; r++) {
        const blk_q8_0 * wr = (const blk_q8_0 *) (const void *) (w + (size_t) r * row_bytes);
        for (int64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] = dot_q8_0_neon(wr, (const blk_q8_0 *) (const void *) (a + (size_t) t * a_bytes), nb);
    }
}

#endif /* TK_HAVE_NEON */
