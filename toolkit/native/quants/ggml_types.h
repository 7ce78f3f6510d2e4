/* ggml_types.h: the ggml type ids and the one type-traits table (ggml_types.c): per type
 * its name, block, conversions to and from float32, and its mat-mul kernels per CPU level.
 * Internal, not public API.
 *
 * A new type is one row in ggml_types.c plus its functions: a quants_*.c file for the
 * conversions, a qdot*.c file for the dot products.
 * ref: ggml-org/llama.cpp ggml/src/ggml.c type_traits and ggml-cpu.c type_traits_cpu
 * (build 0c1e570): blck_size, type_size, to_float, from_float_ref, vec_dot, vec_dot_type.
 */
#ifndef TK_GGML_TYPES_H
#define TK_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* ggml_type numbers (ggml.h; a GGUF tensor's type field).  The ids this build knows:
 * every one has a row in the table, the others (4, 5, 31..33, 36..38, >= 40) are unknown. */
enum {
    TK_GGML_F32 = 0,     TK_GGML_F16 = 1,     TK_GGML_Q4_0 = 2,     TK_GGML_Q4_1 = 3,
    TK_GGML_Q5_0 = 6,    TK_GGML_Q5_1 = 7,    TK_GGML_Q8_0 = 8,     TK_GGML_Q8_1 = 9,
    TK_GGML_Q2_K = 10,   TK_GGML_Q3_K = 11,   TK_GGML_Q4_K = 12,    TK_GGML_Q5_K = 13,
    TK_GGML_Q6_K = 14,   TK_GGML_Q8_K = 15,   TK_GGML_IQ2_XXS = 16, TK_GGML_IQ2_XS = 17,
    TK_GGML_IQ3_XXS = 18, TK_GGML_IQ1_S = 19, TK_GGML_IQ4_NL = 20,  TK_GGML_IQ3_S = 21,
    TK_GGML_IQ2_S = 22,  TK_GGML_IQ4_XS = 23, TK_GGML_I8 = 24,      TK_GGML_I16 = 25,
    TK_GGML_I32 = 26,    TK_GGML_I64 = 27,    TK_GGML_F64 = 28,     TK_GGML_IQ1_M = 29,
    TK_GGML_BF16 = 30,   TK_GGML_TQ1_0 = 34,  TK_GGML_TQ2_0 = 35,   TK_GGML_MXFP4 = 39,
    TK_GGML_TYPE_COUNT = 40
};

/* ---- function types of the table ---------------------------------------------------- */
/* n values of a row of the type <-> float32 (n a multiple of the block size) */
typedef void (*tk_to_float_fn)(const void * x, float * y, int64_t n);
typedef void (*tk_from_float_fn)(const float * x, void * y, int64_t n);
/* one row of n values with its importance matrix qw[n] (ggml's quantize_row_*_impl) */
typedef void (*tk_from_float_imatrix_fn)(const float * x, void * y, int64_t n, const float * qw);
/* Scalar dot product of one weight row `w` of K values with one activation row `a` of the
 * weight type's vec_dot_type (qdot.h). */
typedef float (*tk_vec_dot_fn)(int64_t K, const void * w, const void * a);
/* Integer row kernel (quantized weights, contract in qdot.h): y[t * ldy + r] for weight
 * rows r in [r0, r1) and activation rows t in [0, n_tok). */
typedef void (*tk_qdot_rows_fn)(const uint8_t * w, size_t row_bytes, int64_t K, const uint8_t * a, size_t a_bytes,
                                int64_t n_tok, float * y, int64_t ldy, int64_t r0, int64_t r1);
/* Float row kernel (F32 / F16 / BF16 weights x float32 activations, contract in ops.c):
 * y[t * M + r] for r in [r0, r1), t < n_tok; scratch: K floats. */
typedef void (*tk_float_rows_fn)(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                                 const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1);

/* Kernel slots, one per kernel family: scalar (every machine), AVX2 (x86-64 levels AVX2 and
 * AVX512), NEON (aarch64), AVX512 (the x86-64 level AVX512 only), AVXVNNI (the level AVX2
 * where tk_cpu_avxvnni(): AVX-VNNI found and not turned off).  A NULL AVX512 or AVXVNNI slot
 * falls back to the AVX2 one; any other NULL slot to the scalar kernel. */
enum { TK_KSLOT_SCALAR = 0, TK_KSLOT_AVX2 = 1, TK_KSLOT_NEON = 2, TK_KSLOT_AVX512 = 3, TK_KSLOT_AVXVNNI = 4,
       TK_KSLOT_COUNT = 5 };

typedef struct {
    const char * name;                 /* ggml's name, "Q4_K"; NULL: the id is unknown */
    int64_t blck_size;                 /* elements per block */
    int64_t type_size;                 /* bytes per block */
    int64_t align;                     /* alignment (bytes) a tensor's data needs to be read in place */
    /* conversions (quants*.c); NULL where this build has none */
    tk_to_float_fn to_float;           /* dequantize a row (ggml dequantize_row_*) */
    tk_from_float_fn from_float;       /* quantize a row, no imatrix (ggml quantize_row_*_ref) */
    tk_from_float_imatrix_fn from_float_imatrix;  /* with an imatrix; NULL: the type ignores it */
    /* as a weight of a mat-mul: the activation type (TK_GGML_F32: the float kernels; Q8_0 /
     * Q8_1 / Q8_K: the integer dot; -1: no mat-mul; BF16's AVX512 slot: see
     * tk_type_vec_dot_type), and the kernels per slot */
    int vec_dot_type;
    tk_vec_dot_fn vec_dot;             /* scalar reference dot product (quantized weights) */
    tk_qdot_rows_fn qdot_rows[TK_KSLOT_COUNT];
    tk_float_rows_fn float_rows[TK_KSLOT_COUNT];
    /* as an activation type (Q8_0, Q8_1, Q8_K; BF16 in its AVX512 slot): its quantizer per
     * slot (qdot.h: the same bytes in every slot) */
    tk_from_float_fn act_from_float[TK_KSLOT_COUNT];
} tk_type_traits;

/* The traits of ggml type `type`; NULL for an unknown id. */
const tk_type_traits * tk_type_traits_get(int type);

/* The kernels of `tt` at kernel level `level` (tk_cpu_level_t, tk_cpu.h): the slot's, or
 * the scalar one where the slot is empty.  Resolve once per mat-mul call, outside every loop. */
tk_qdot_rows_fn tk_type_qdot_rows(const tk_type_traits * tt, int level);
tk_float_rows_fn tk_type_float_rows(const tk_type_traits * tt, int level);
tk_from_float_fn tk_type_act_from_float(const tk_type_traits * tt, int level);
/* The activation type of `tt`'s mat-mul at `level`: tt->vec_dot_type, except BF16 weights at
 * TK_CPU_AVX512 on a machine with AVX512_BF16: TK_GGML_BF16 (activations rounded to bf16
 * once per mat-mul, for every n_tok, so a token's result never depends on its ubatch;
 * kernel: qdot_bf16_avx512.c in the AVX512 slot of qdot_rows). */
int tk_type_vec_dot_type(const tk_type_traits * tt, int level);

/* Block size (elements) and bytes per block of a ggml type; 0 when the id is unknown. */
int tk_type_block(int type, int64_t * blck, int64_t * bytes);
/* ggml's name of the type; "unknown" for an unknown id. */
const char * tk_type_name(int type);

#endif
