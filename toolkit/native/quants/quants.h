/* quants.h: ggml block layouts, type numbers and fp16/bf16 conversions, and the row
 * converters of quants_legacy.c, quants_kquants.c, quants_iquants.c and quants.c, which the
 * type table (ggml_types.c) hands out (internal, not public API).
 *
 * ref: ggml-org/llama.cpp ggml/src/ggml-common.h (build 0c1e570). Type numbers are
 * enum ggml_type's; block layouts are byte-for-byte ggml's (all fields little-endian).
 */
#ifndef TK_QUANTS_H
#define TK_QUANTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quants/ggml_types.h"
#include "toolkit.h"

/* ggml_type numbers (a GGUF tensor's type field): ggml_types.h's, by their quants names */
#define TKQ_T_F32     TK_GGML_F32
#define TKQ_T_F16     TK_GGML_F16
#define TKQ_T_Q4_0    TK_GGML_Q4_0
#define TKQ_T_Q4_1    TK_GGML_Q4_1
#define TKQ_T_Q5_0    TK_GGML_Q5_0
#define TKQ_T_Q5_1    TK_GGML_Q5_1
#define TKQ_T_Q8_0    TK_GGML_Q8_0
#define TKQ_T_Q2_K    TK_GGML_Q2_K
#define TKQ_T_Q3_K    TK_GGML_Q3_K
#define TKQ_T_Q4_K    TK_GGML_Q4_K
#define TKQ_T_Q5_K    TK_GGML_Q5_K
#define TKQ_T_Q6_K    TK_GGML_Q6_K
#define TKQ_T_IQ4_NL  TK_GGML_IQ4_NL
#define TKQ_T_IQ4_XS  TK_GGML_IQ4_XS
#define TKQ_T_BF16    TK_GGML_BF16

#define QK32 32   /* block size of the legacy types and IQ4_NL */
#define QK_K 256  /* super-block size of the k-quants and IQ4_XS */

typedef uint16_t tk_half;  /* IEEE binary16 bits */

typedef struct { tk_half d; uint8_t qs[QK32/2]; } blk_q4_0;                    /* 18 bytes */
typedef struct { tk_half d; tk_half m; uint8_t qs[QK32/2]; } blk_q4_1;         /* 20 bytes */
typedef struct { tk_half d; uint8_t qh[4]; uint8_t qs[QK32/2]; } blk_q5_0;     /* 22 bytes */
typedef struct { tk_half d; tk_half m; uint8_t qh[4]; uint8_t qs[QK32/2]; } blk_q5_1; /* 24 */
typedef struct { tk_half d; int8_t qs[QK32]; } blk_q8_0;                       /* 34 bytes */
typedef struct {
    uint8_t scales[QK_K/16];  /* low nibble: scale, high nibble: min (4 bits each) */
    uint8_t qs[QK_K/4];       /* 2-bit quants */
    tk_half d;                /* super-block scale of the scales */
    tk_half dmin;             /* super-block scale of the mins */
} blk_q2_K;                   /* 84 bytes */
typedef struct {
    uint8_t hmask[QK_K/8];    /* high bit of each quant */
    uint8_t qs[QK_K/4];       /* low 2 bits */
    uint8_t scales[12];       /* 16 6-bit scales */
    tk_half d;
} blk_q3_K;                   /* 110 bytes */
typedef struct {
    tk_half d, dmin;
    uint8_t scales[12];       /* 8 6-bit scales + 8 6-bit mins */
    uint8_t qs[QK_K/2];       /* 4-bit quants */
} blk_q4_K;                   /* 144 bytes */
typedef struct {
    tk_half d, dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K/8];       /* 5th bit */
    uint8_t qs[QK_K/2];       /* low 4 bits */
} blk_q5_K;                   /* 176 bytes */
typedef struct {
    uint8_t ql[QK_K/2];       /* low 4 bits */
    uint8_t qh[QK_K/4];       /* high 2 bits */
    int8_t  scales[QK_K/16];  /* 8-bit scales */
    tk_half d;
} blk_q6_K;                   /* 210 bytes */
typedef struct { tk_half d; uint8_t qs[QK32/2]; } blk_iq4_nl;                  /* 18 bytes */
typedef struct {
    tk_half  d;
    uint16_t scales_h;        /* high 2 bits of the 8 6-bit scales */
    uint8_t  scales_l[QK_K/64];  /* low 4 bits */
    uint8_t  qs[QK_K/2];
} blk_iq4_xs;                 /* 136 bytes */

_Static_assert(sizeof(blk_q4_0) == 18 && sizeof(blk_q4_1) == 20 && sizeof(blk_q5_0) == 22 &&
               sizeof(blk_q5_1) == 24 && sizeof(blk_q8_0) == 34, "legacy block sizes");
_Static_assert(sizeof(blk_q2_K) == 84 && sizeof(blk_q3_K) == 110 && sizeof(blk_q4_K) == 144 &&
               sizeof(blk_q5_K) == 176 && sizeof(blk_q6_K) == 210, "k-quant block sizes");
_Static_assert(sizeof(blk_iq4_nl) == 18 && sizeof(blk_iq4_xs) == 136, "iq4 block sizes");

/* IQ4_NL / IQ4_XS non-linear code book (ggml-common.h kvalues_iq4nl), defined in
 * quants_iquants.c */
extern const int8_t tk_kvalues_iq4nl[16];

/* ---- row converters (the table's to_float / from_float / from_float_imatrix) ---------
 * tkq_quantize_<t>(x, y, n):             n floats -> n / block blocks (ggml quantize_row_*_ref;
 *                                        IQ4_NL / IQ4_XS: quantize_row_iq4_*_impl, no imatrix)
 * tkq_quantize_<t>_imatrix(x, y, n, qw): the same with an importance matrix qw[n] (ggml's
 *                                        quantize_row_*_impl; one row: n = n_per_row)
 * tkq_dequantize_<t>(x, y, n):           n / block blocks -> n floats (ggml dequantize_row_*) */
#define TKQ_DECLARE_ROWS(T)                                                              \
    void tkq_quantize_##T(const float * x, void * y, int64_t n);                         \
    void tkq_dequantize_##T(const void * x, float * y, int64_t n);
#define TKQ_DECLARE_IMATRIX(T)                                                           \
    void tkq_quantize_##T##_imatrix(const float * x, void * y, int64_t n, const float * qw);
/* quants.c: F32, F16, BF16 (no imatrix) */
TKQ_DECLARE_ROWS(f32) TKQ_DECLARE_ROWS(f16) TKQ_DECLARE_ROWS(bf16)
/* quants_legacy.c: Q8_0 (no imatrix), Q4_0, Q4_1, Q5_0, Q5_1 */
TKQ_DECLARE_ROWS(q8_0)
TKQ_DECLARE_ROWS(q4_0) TKQ_DECLARE_ROWS(q4_1) TKQ_DECLARE_ROWS(q5_0) TKQ_DECLARE_ROWS(q5_1)
TKQ_DECLARE_IMATRIX(q4_0) TKQ_DECLARE_IMATRIX(q4_1) TKQ_DECLARE_IMATRIX(q5_0) TKQ_DECLARE_IMATRIX(q5_1)
/* quants_kquants.c: Q2_K .. Q6_K */
TKQ_DECLARE_ROWS(q2_K) TKQ_DECLARE_ROWS(q3_K) TKQ_DECLARE_ROWS(q4_K) TKQ_DECLARE_ROWS(q5_K) TKQ_DECLARE_ROWS(q6_K)
TKQ_DECLARE_IMATRIX(q2_K) TKQ_DECLARE_IMATRIX(q3_K) TKQ_DECLARE_IMATRIX(q4_K) TKQ_DECLARE_IMATRIX(q5_K)
TKQ_DECLARE_IMATRIX(q6_K)
/* quants_iquants.c: IQ4_NL, IQ4_XS */
TKQ_DECLARE_ROWS(iq4_nl) TKQ_DECLARE_ROWS(iq4_xs)
TKQ_DECLARE_IMATRIX(iq4_nl) TKQ_DECLARE_IMATRIX(iq4_xs)

/* ---- fp16 / bf16 scalar conversions ------------------------------------------------
 * Bit-exact ports of ggml_compute_fp32_to_fp16 / fp16_to_fp32 / fp32_to_bf16
 * (ggml/src/ggml-impl.h): round to nearest even, NaN stays NaN (quiet).            */
static inline uint32_t tkq_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float tkq_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float tkq_fp16_to_fp32(tk_half h) {
    const uint32_t w = (uint32_t) h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = UINT32_C(0xE0) << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized_value = tkq_float((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = UINT32_C(126) << 23;
    const float magic_bias = 0.5f;
    const float denormalized_value = tkq_float((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
    const uint32_t result = sign |
        (two_w < denormalized_cutoff ? tkq_bits(denormalized_value) : tkq_bits(normalized_value));
    return tkq_float(result);
}

static inline tk_half tkq_fp32_to_fp16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = tkq_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & UINT32_C(0x80000000);
    uint32_t bias = shl1_w & UINT32_C(0xFF000000);
    if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
    base = tkq_float((bias >> 1) + UINT32_C(0x07800000)) + base;
    const uint32_t bits = tkq_bits(base);
    const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
    const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (tk_half) ((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

static inline float tkq_bf16_to_fp32(uint16_t h) { return tkq_float((uint32_t) h << 16); }

static inline uint16_t tkq_fp32_to_bf16(float f) {
    const uint32_t u = tkq_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t) ((u >> 16) | 64);  /* NaN: force quiet */
    return (uint16_t) ((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
