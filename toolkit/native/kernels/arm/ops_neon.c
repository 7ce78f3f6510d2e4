/* ops_neon.c: aarch64 Advanced SIMD (NEON) float kernels, the TK_CPU_NEON level (cpu.c):
 * the float mat-mul (F32 / F16 / BF16 weights).  The quantized row kernel of this level
 * (Q8_0) is quants/arm/qdot_neon.c; the other quantized types run their scalar kernels at
 * this level (the type table's NEON slots, quants/ggml_types.c, are empty for them).
 * Compiled everywhere; empty unless the target is aarch64 with NEON.
 *
 * Per output, the same operations whatever the batch, the rows or the thread split (each
 * output is computed alone, in one fixed order), so a token's result does not depend on
 * the ubatch it shares.  Against the scalar kernels the difference is float reordering:
 * acc[8] lanes (i mod 8, two 4-lane FMA accumulators), summed ((l0+l4)+(l1+l5)) +
 * ((l2+l6)+(l3+l7)) -- the scalar dot_f32's tree -- then the K % 8 tail in order.
 * Checked here by cross-compiling and running under qemu-aarch64 against the scalar level
 * and a double reference (tests/native/aarch64_smoke.c); no aarch64 hardware was at hand,
 * so its speed is unmeasured.
 */
#include <stdint.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

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

#endif /* TK_HAVE_NEON */
