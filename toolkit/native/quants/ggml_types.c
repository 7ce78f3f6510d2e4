/* ggml_types.c: the one ggml type-traits table (ggml_types.h): per ggml type id its name,
 * block (elements, bytes), conversions to and from float32, and, as the weight of a
 * mat-mul, its activation type and kernels per CPU level; as an activation type, its
 * quantizers.  Everything that depends on a type (model.c's validation, quants.c's public
 * API, ops.c's mat-mul) looks it up here.
 *
 * Sizes: ggml/src/ggml.c type_traits (blck_size, type_size; build 0c1e570), checked against
 * gguf-py's GGML_QUANT_SIZES in tests/unit/test_type_traits.py.  Types this build only names
 * (IQ2_XXS ... MXFP4, the integer and F64 types) have no functions: a model holding one is
 * refused at load with the type's name.
 */
#include <stddef.h>

#include "quants/ggml_types.h"
#include "quants/qdot.h"
#include "quants/quants.h"
#include "tk_cpu.h"

/* the SIMD slots: the symbol where this target compiles the kernel, else NULL */
#ifdef TK_HAVE_X86
#define AVX2(f) f
#else
#define AVX2(f) NULL
#endif
#ifdef TK_HAVE_NEON
#define NEON(f) f
#else
#define NEON(f) NULL
#endif

/* a type with a name and a block only */
#define NAMED(T, NAME, BLCK, BYTES) [T] = { .name = NAME, .blck_size = BLCK, .type_size = BYTES, .align = 1, .vec_dot_type = -1 }

/* a float type: converted element by element, mat-mul with float32 activations */
#define FLOAT_TYPE(T, NAME, t, BYTES)                                                                           \
    [T] = { .name = NAME, .blck_size = 1, .type_size = BYTES, .align = BYTES,                                  \
            .to_float = tkq_dequantize_##t, .from_float = tkq_quantize_##t,                                    \
            .vec_dot_type = TK_GGML_F32,                                                                       \
            .float_rows = { tk_matmul_rows_scalar, AVX2(tk_matmul_rows_avx2), NEON(tk_matmul_rows_neon) } }

/* a quantized weight type: row converters (quants_*.c, IMATRIX: its imatrix quantizer or
 * NULL), the activation type ACT of its integer dot, the scalar dot product and the row
 * kernels per slot (qdot*.c here and in x86/, arm/) */
#define QUANT_TYPE(T, NAME, t, BLCK, BLK, IMATRIX, ACT, act, ROWS_AVX2, ROWS_NEON)                           \
    QUANT_TYPE_Z(T, NAME, t, BLCK, BLK, IMATRIX, ACT, act, ROWS_AVX2, ROWS_NEON, NULL, NULL)
/* the same with an AVX512 slot (qdot_avx512.c, qdot_kquants_avx512.c) and an AVXVNNI slot
 * (qdot_avxvnni.c) */
#define QUANT_TYPE_Z(T, NAME, t, BLCK, BLK, IMATRIX, ACT, act, ROWS_AVX2, ROWS_NEON, ROWS_AVX512, ROWS_AVXVNNI) \
    [T] = { .name = NAME, .blck_size = BLCK, .type_size = sizeof(BLK), .align = 1,                             \
            .to_float = tkq_dequantize_##t, .from_float = tkq_quantize_##t, .from_float_imatrix = IMATRIX,     \
            .vec_dot_type = ACT, .vec_dot = tk_vec_dot_##t##_##act,                                            \
            .qdot_rows = { tk_qdot_rows_##t##_scalar, ROWS_AVX2, ROWS_NEON, ROWS_AVX512, ROWS_AVXVNNI } }

/* an activation type of the integer dot: its quantizers per slot (qdot.c, qdot_avx2.c) */
#define ACT_TYPE(T, NAME, BLCK, BLK, Q_SCALAR, Q_AVX2)                                                         \
    [T] = { .name = NAME, .blck_size = BLCK, .type_size = sizeof(BLK), .align = 1, .vec_dot_type = -1,        \
            .act_from_float = { Q_SCALAR, Q_AVX2, NULL } }

static const tk_type_traits TYPES[TK_GGML_TYPE_COUNT] = {
    FLOAT_TYPE(TK_GGML_F32, "F32", f32, 4),
    FLOAT_TYPE(TK_GGML_F16, "F16", f16, 2),
    /* BF16: float kernels, and at TK_CPU_AVX512 with AVX512_BF16 the BF16 x BF16 kernel on
     * activations rounded to bf16 (tk_type_vec_dot_type) */
    [TK_GGML_BF16] = { .name = "BF16", .blck_size = 1, .type_size = 2, .align = 2,
                       .to_float = tkq_dequantize_bf16, .from_float = tkq_quantize_bf16, .vec_dot_type = TK_GGML_F32,
                       .float_rows = { tk_matmul_rows_scalar, AVX2(tk_matmul_rows_avx2), NEON(tk_matmul_rows_neon) },
                       .qdot_rows = { NULL, NULL, NULL, AVX2(tk_qdot_rows_bf16_avx512) },
                       .act_from_float = { NULL, NULL, NULL, tk_quantize_act_bf16 } },
    /* Q8_0 is a weight type (its file quantizer: ggml's _ref, which divides by d) and the
     * activation type of Q8_0 / Q4_0 / Q5_0 / IQ4_NL weights (qdot.c's quantizer: x * 127 / amax) */
    [TK_GGML_Q8_0] = { .name = "Q8_0", .blck_size = QK32, .type_size = sizeof(blk_q8_0), .align = 1,
                       .to_float = tkq_dequantize_q8_0, .from_float = tkq_quantize_q8_0,
                       .vec_dot_type = TK_GGML_Q8_0, .vec_dot = tk_vec_dot_q8_0_q8_0,
                       .qdot_rows = { tk_qdot_rows_q8_0_scalar, AVX2(tk_qdot_rows_q8_0_avx2), NEON(tk_qdot_rows_q8_0_neon),
                                      AVX2(tk_qdot_rows_q8_0_avx512), AVX2(tk_qdot_rows_q8_0_avxvnni) },
                       .act_from_float = { tk_quantize_act_q8_0, AVX2(tk_quantize_act_q8_0_avx2), NULL } },
    QUANT_TYPE(TK_GGML_Q4_0, "Q4_0", q4_0, QK32, blk_q4_0, tkq_quantize_q4_0_imatrix, TK_GGML_Q8_0, q8_0, AVX2(tk_qdot_rows_q4_0_avx2), NULL),
    QUANT_TYPE(TK_GGML_Q4_1, "Q4_1", q4_1, QK32, blk_q4_1, tkq_quantize_q4_1_imatrix, TK_GGML_Q8_1, q8_1, AVX2(tk_qdot_rows_q4_1_avx2), NULL),
    QUANT_TYPE(TK_GGML_Q5_0, "Q5_0", q5_0, QK32, blk_q5_0, tkq_quantize_q5_0_imatrix, TK_GGML_Q8_0, q8_0, AVX2(tk_qdot_rows_q5_0_avx2), NULL),
    QUANT_TYPE(TK_GGML_Q5_1, "Q5_1", q5_1, QK32, blk_q5_1, tkq_quantize_q5_1_imatrix, TK_GGML_Q8_1, q8_1, AVX2(tk_qdot_rows_q5_1_avx2), NULL),
    QUANT_TYPE_Z(TK_GGML_Q2_K, "Q2_K", q2_K, QK_K, blk_q2_K, tkq_quantize_q2_K_imatrix, TK_GGML_Q8_K, q8_K, AVX2(tk_qdot_rows_q2_K_avx2), NULL,
               AVX2(tk_qdot_rows_q2_K_avx512), AVX2(tk_qdot_rows_q2_K_avxvnni)),
    QUANT_TYPE_Z(TK_GGML_Q3_K, "Q3_K", q3_K, QK_K, blk_q3_K, tkq_quantize_q3_K_imatrix, TK_GGML_Q8_K, q8_K, AVX2(tk_qdot_rows_q3_K_avx2), NULL,
               AVX2(tk_qdot_rows_q3_K_avx512), AVX2(tk_qdot_rows_q3_K_avxvnni)),
    QUANT_TYPE_Z(TK_GGML_Q4_K, "Q4_K", q4_K, QK_K, blk_q4_K, tkq_quantize_q4_K_imatrix, TK_GGML_Q8_K, q8_K, AVX2(tk_qdot_rows_q4_K_avx2), NULL,
               AVX2(tk_qdot_rows_q4_K_avx512), AVX2(tk_qdot_rows_q4_K_avxvnni)),
    QUANT_TYPE_Z(TK_GGML_Q5_K, "Q5_K", q5_K, QK_K, blk_q5_K, tkq_quantize_q5_K_imatrix, TK_GGML_Q8_K, q8_K, AVX2(tk_qdot_rows_q5_K_avx2), NULL,
               AVX2(tk_qdot_rows_q5_K_avx512), AVX2(tk_qdot_rows_q5_K_avxvnni)),
    QUANT_TYPE_Z(TK_GGML_Q6_K, "Q6_K", q6_K, QK_K, blk_q6_K, tkq_quantize_q6_K_imatrix, TK_GGML_Q8_K, q8_K, AVX2(tk_qdot_rows_q6_K_avx2), NULL,
               AVX2(tk_qdot_rows_q6_K_avx512), AVX2(tk_qdot_rows_q6_K_avxvnni)),
    QUANT_TYPE(TK_GGML_IQ4_NL, "IQ4_NL", iq4_nl, QK32, blk_iq4_nl, tkq_quantize_iq4_nl_imatrix, TK_GGML_Q8_0, q8_0, AVX2(tk_qdot_rows_iq4_nl_avx2), NULL),
    QUANT_TYPE(TK_GGML_IQ4_XS, "IQ4_XS", iq4_xs, QK_K, blk_iq4_xs, tkq_quantize_iq4_xs_imatrix, TK_GGML_Q8_K, q8_K, AVX2(tk_qdot_rows_iq4_xs_avx2), NULL),
    /* activation types only (Q4_1 / Q5_1 weights: Q8_1; the k-quants and IQ4_XS: Q8_K) */
    ACT_TYPE(TK_GGML_Q8_1, "Q8_1", QK32, blk_q8_1, tk_quantize_act_q8_1, NULL),
    ACT_TYPE(TK_GGML_Q8_K, "Q8_K", QK_K, blk_q8_K, tk_quantize_act_q8_K, AVX2(tk_quantize_act_q8_K_avx2)),
    /* named only */
    NAMED(TK_GGML_IQ2_XXS, "IQ2_XXS", 256, 66), NAMED(TK_GGML_IQ2_XS, "IQ2_XS", 256, 74),
    NAMED(TK_GGML_IQ3_XXS, "IQ3_XXS", 256, 98), NAMED(TK_GGML_IQ1_S, "IQ1_S", 256, 50),
    NAMED(TK_GGML_IQ3_S, "IQ3_S", 256, 110),    NAMED(TK_GGML_IQ2_S, "IQ2_S", 256, 82),
    NAMED(TK_GGML_I8, "I8", 1, 1),              NAMED(TK_GGML_I16, "I16", 1, 2),
    NAMED(TK_GGML_I32, "I32", 1, 4),            NAMED(TK_GGML_I64, "I64", 1, 8),
    NAMED(TK_GGML_F64, "F64", 1, 8),            NAMED(TK_GGML_IQ1_M, "IQ1_M", 256, 56),
    NAMED(TK_GGML_TQ1_0, "TQ1_0", 256, 54),     NAMED(TK_GGML_TQ2_0, "TQ2_0", 256, 66),
    NAMED(TK_GGML_MXFP4, "MXFP4", 32, 17),
};

const tk_type_traits * tk_type_traits_get(int type) {
    if (type < 0 || type >= TK_GGML_TYPE_COUNT || !TYPES[type].name) return NULL;
    return &TYPES[type];
}

/* ---- kernels per level --------------------------------------------------------------- */

/* The slot of kernel level `level`: AVX2 for the x86-64 level AVX2 (AVXVNNI where
 * tk_cpu_avxvnni()), AVX512 for AVX512, NEON for the aarch64 one.  (A slot this target does
 * not compile is NULL: the scalar kernel runs.) */
static int kslot(int level) {
    if (level == TK_CPU_NEON) return TK_KSLOT_NEON;
    if (level == TK_CPU_AVX512) return TK_KSLOT_AVX512;
    if (level == TK_CPU_AVX2 && tk_cpu_avxvnni()) return TK_KSLOT_AVXVNNI;
    return level >= TK_CPU_AVX2 ? TK_KSLOT_AVX2 : TK_KSLOT_SCALAR;
}

/* slots[kslot(level)], else the AVX2 slot at AVX512 / AVXVNNI, else the scalar slot */
#define PICK(slots, level)                                                                           \
    do {                                                                                             \
        const int s_ = kslot(level);                                                                 \
        if ((slots)[s_]) return (slots)[s_];                                                         \
        if ((s_ == TK_KSLOT_AVX512 || s_ == TK_KSLOT_AVXVNNI) && (slots)[TK_KSLOT_AVX2])             \
            return (slots)[TK_KSLOT_AVX2];                                                           \
        return (slots)[TK_KSLOT_SCALAR];                                                             \
    } while (0)

tk_qdot_rows_fn tk_type_qdot_rows(const tk_type_traits * tt, int level) { PICK(tt->qdot_rows, level); }

tk_float_rows_fn tk_type_float_rows(const tk_type_traits * tt, int level) { PICK(tt->float_rows, level); }

tk_from_float_fn tk_type_act_from_float(const tk_type_traits * tt, int level) { PICK(tt->act_from_float, level); }

int tk_type_vec_dot_type(const tk_type_traits * tt, int level) {
    if (tt->qdot_rows[TK_KSLOT_AVX512] && tt->vec_dot_type == TK_GGML_F32 && level == TK_CPU_AVX512 &&
        tk_cpu_has_avx512bf16())
        return TK_GGML_BF16;   /* the one float type with an AVX512 slot */
    return tt->vec_dot_type;
}

/* test hook (tk_testing.h) */
int tk_type_vec_dot_type_at(int type, int level) {
    const tk_type_traits * tt = tk_type_traits_get(type);
    return tt ? tk_type_vec_dot_type(tt, level) : -1;
}

/* ---- shorthands ---------------------------------------------------------------------- */

int tk_type_block(int type, int64_t * blck, int64_t * bytes) {
    const tk_type_traits * tt = tk_type_traits_get(type);
    if (!tt) return 0;
    *blck = tt->blck_size;
    *bytes = tt->type_size;
    return 1;
}

const char * tk_type_name(int type) {
    const tk_type_traits * tt = tk_type_traits_get(type);
    return tt ? tt->name : "unknown";
}

/* test hook (tk_testing.h) */
int tk_type_traits_query(int type, const char ** name, int64_t * blck_size, int64_t * type_size, int * vec_dot_type,
                         int * flags) {
    const tk_type_traits * tt = tk_type_traits_get(type);
    if (!tt) return 0;
    *name = tt->name;
    *blck_size = tt->blck_size;
    *type_size = tt->type_size;
    *vec_dot_type = tt->vec_dot_type;
    *flags = (tt->to_float ? 1 : 0) | (tt->from_float ? 2 : 0) | (tt->from_float_imatrix ? 4 : 0) |
             (tt->qdot_rows[TK_KSLOT_SCALAR] || tt->float_rows[TK_KSLOT_SCALAR] ? 8 : 0) |
             (tt->act_from_float[TK_KSLOT_SCALAR] ? 16 : 0);
    return 1;
}
