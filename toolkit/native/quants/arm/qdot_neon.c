/* qdot_neon.c: aarch64 Advanced SIMD (NEON) integer dot kernels, the TK_CPU_NEON level
 * (cpu.c): the Q8_0 weight x Q8_0 activation row kernel (the type table's NEON slot of Q8_0,
 * quants/ggml_types.c).  The other quantized types run their scalar kernels at this level.
 * Compiled everywhere; empty unless the target is aarch64 with NEON.
 *
 * Per output, the same operations whatever the batch, the rows or the thread split (each
 * output is computed alone, in one fixed order).  Per block, the 32 int8 products are summed
 * exactly in 4 int32 lanes (vmull_s8 / vmlal_s8 pairs, then pairwise long adds), converted to
 * float and accumulated with one FMA by d_w * d_a (one float product); at the end
 * (l0+l2) + (l1+l3).
 * No int16 overflow: a lane of vmlal_s8 adds two products w * a with |a| <= 127 (the Q8_0
 * activation quantizer's range) and |w| <= 128, at most 32512.
 * ref: ggml-org/llama.cpp ggml/src/ggml-cpu/arch/arm/quants.c ggml_vec_dot_q8_0_q8_0 (its
 * non-dotprod NEON branch: vmull_s8 / vmlal_s8 / vpaddlq_s16).
 * Checked by cross-compiling and running under qemu-aarch64 against the scalar level and a
 * double reference (tests/native/aarch64_smoke.c).
 */
#include <stdint.h>

#include "tk_cpu.h"
#include "quants/qdot.h"

#ifdef TK_HAVE_NEON
#include <arm_neon.h>

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
