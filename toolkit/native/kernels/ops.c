/* ops.c: scalar reference kernels: type conversion, mat-vec/mat-mat, RMSNorm, RoPE.
 *
 * Every kernel is a plain loop with a fixed accumulation order, so a token's result does
 * not depend on how many other tokens share its micro-batch (chunked prefill is
 * bit-identical to one-shot prefill).  The SIMD paths (x86/ops_avx2.c, chosen at run time by
 * cpu.c) keep that property per level; see x86/ops_avx2.c for their accumulation order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"
#include "quants/qdot.h"
#include "quants/repack.h"

/* ==== type conversion ================================================================ */

/* IEEE half -> float, exact for every input (subnormals, inf, NaN), branch-free so the
 * dot loops vectorize.  ref: F. Giesen, "half_to_float_fast" (magic-number renormalisation
 * of subnormals); ggml keeps a 64k lookup table instead. */
static inline float fp16_to_fp32(uint16_t h) {
    union { uint32_t u; float f; } o, m = {(uint32_t) 113 << 23};
    const uint32_t shifted_exp = 0x7c00u << 13;
    o.u = (uint32_t) (h & 0x7fffu) << 13;
    const uint32_t exp = o.u & shifted_exp;
    const uint32_t inf_nan = exp == shifted_exp ? ~0u : 0u;   /* selects, not branches */
    const uint32_t sub = exp == 0 ? ~0u : 0u;
    o.u += (uint32_t) (127 - 15) << 23;
    o.u += inf_nan & ((uint32_t) (128 - 16) << 23);           /* Inf / NaN */
    o.u += sub & (1u << 23);                                  /* zero / subnormal: renormalise */
    m.u &= sub;                                               /* subtract 2^-14 only then */
    o.f -= m.f;
    o.u |= (uint32_t) (h & 0x8000u) << 16;
    return o.f;
}

static inline float bf16_to_fp32(uint16_t h) {
    union { uint32_t u; float f; } o = {(uint32_t) h << 16};
    return o.f;
}

float tk_fp16_to_fp32(uint16_t h) { return fp16_to_fp32(h); }
float tk_bf16_to_fp32(uint16_t h) { return bf16_to_fp32(h); }

/* ==== dot products per weight type =================================================== */
/* Eight independent float accumulators, summed pairwise at the end: a fixed order. */

static float hsum8(const float * a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

static float dot_f32(const float * w, const float * x, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += w[i + j] * x[i + j];
    float s = hsum8(acc);
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

/* One row of K elements of a float type as float32: F32 in place, F16 / BF16 expanded
 * into dst (exact). */
static const float * row_f32(int type, const uint8_t * p, float * dst, int64_t K) {
    if (type == TK_GGML_F32) return (const float *) (const void *) p;
    const uint16_t * h = (const uint16_t *) (const void *) p;
    if (type == TK_GGML_F16) for (int64_t i = 0; i < K; i++) dst[i] = fp16_to_fp32(h[i]);
    else for (int64_t i = 0; i < K; i++) dst[i] = bf16_to_fp32(h[i]);   /* BF16 */
    return dst;
}

/* ==== matmul ========================================================================= */
/* Contract:
 *   w: ggml [K, M(, E)] (K = ne0 per row), slice `mat` of ne[2]
 *   x: [n_tok, K] float32, y: [n_tok, M] float32
 *   y[t][r] = sum_k W[r][k] * x[t][k]
 * F32/F16/BF16 weights: float32 products (rows expanded once per call into the thread's
 * `row` scratch, or dotted in place).  Quantized weights: x quantized per block first
 * (qdot.h), integer block products.  Loop order: row outer (a weight row is read once per
 * call), token inner. */
typedef struct {
    const tk_weight * w;
    const uint8_t * base;      /* first row of the selected matrix */
    const float * x;
    int64_t n_tok;
    float * y;
    float * scratch;
    size_t scratch_stride;
    /* the kernels at tk_cpu_level() when the call started (type table, ggml_types.h) */
    tk_float_rows_fn frows;    /* float path (F32 / F16 / BF16) */
    tk_qdot_rows_fn qrows;     /* integer path: the row kernel, act its activations */
    tk_from_float_fn act_quant;  /* the activation quantizer */
    const uint8_t * act;
    size_t act_row;
    tk_rp_rows_fn rprows;      /* repacked weights (w->rp): the kernel, base its matrix; the
                                  parallel loop runs over groups of TK_RP_ROWS rows */
    uint8_t * prep;            /* its per-token terms (filled with the activations) */
} matmul_job;

/* The scalar float kernel (the type table's scalar slot of F32 / F16 / BF16).  F32 rows
 * are dotted in place; F16/BF16 rows are first expanded to a float32 row in `scratch`
 * (once for all tokens), then dotted: one kernel path whatever the number of tokens, so
 * splitting a batch never changes a result. */
void tk_matmul_rows_scalar(int type, const uint8_t * base, size_t row_bytes, int64_t K, int64_t M,
                           const float * x, int64_t n_tok, float * y, float * scratch, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float * wr = row_f32(type, base + (size_t) r * row_bytes, scratch, K);
        for (int64_t t = 0; t < n_tok; t++) y[t * M + r] = dot_f32(wr, x + t * K, K);
    }
}

/* rows [r0, r1) of the job with the kernel it resolved; `thread` picks the float scratch */
static void matmul_rows(void * arg, int64_t r0, int64_t r1, int thread) {
    const matmul_job * j = arg;
    const tk_weight * w = j->w;
    const int64_t K = w->ne[0], M = w->ne[1];
    if (j->rprows) {
        j->rprows(j->base, K, M, j->act, j->act_row, j->n_tok, j->prep, j->y, M, r0, r1);
        return;
    }
    if (j->qrows) {
        j->qrows(j->base, w->row_bytes, K, j->act, j->act_row, j->n_tok, j->y, M, r0, r1);
        return;
    }
    float * scratch = j->scratch + (size_t) thread * j->scratch_stride;
    j->frows(w->type, j->base, w->row_bytes, K, M, j->x, j->n_tok, j->y, scratch, r0, r1);
}

/* activation rows quantized in parallel over tokens */
static void quantize_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const matmul_job * j = arg;
    (void) thread;
    const int64_t K = j->w->ne[0];
    for (int64_t t = t0; t < t1; t++) j->act_quant(j->x + t * K, (uint8_t *) j->act + (size_t) t * j->act_row, K);
    if (j->rprows) tk_rp_prep(j->w->type, j->act, j->act_row, K, j->n_tok, t0, t1, j->prep);
}

size_t tk_mm_act_bytes(int64_t n_tok, int64_t K) {
    /* the widest activation row: Q8_K, 292 bytes per 256 values (Q8_1: 36 per 32); BF16,
     * 2 bytes per value, where this machine can run the BF16 kernel (tk_type_vec_dot_type) */
    const size_t q8k = (size_t) ((K + QK_K - 1) / QK_K) * sizeof(blk_q8_K);
    const size_t bf16 = tk_cpu_has_avx512bf16() ? (size_t) K * 2 : 0;
    return (size_t) n_tok * (q8k > bf16 ? q8k : bf16);
}

/* The job of y = W[mat] x for n_tok tokens at `level` (kernel, activation rows), without
 * quantizing: *quant set when the integer path runs (activations to quantize into wk->act). */
static tk_status matmul_prepare(const tk_weight * w, int64_t mat, const float * x, int64_t n_tok, float * y,
                                const tk_mm_work * wk, int level, matmul_job * j, int * quant) {
    const int64_t K = w->ne[0], M = w->ne[1];
    if (mat < 0 || mat >= w->ne[2]) return TK_FAIL(TK_ERR_INVALID, "matmul: matrix %lld of %lld", (long long) mat, (long long) w->ne[2]);
    const tk_type_traits * tt = tk_type_traits_get(w->type);
    const int vdt = tt ? tk_type_vec_dot_type(tt, level) : -1;
    const tk_type_traits * at = vdt > TK_GGML_F32 ? tk_type_traits_get(vdt) : NULL;
    *j = (matmul_job) {w, w->data + (size_t) mat * (size_t) M * w->row_bytes, x, n_tok, y, wk->row, wk->row_stride, NULL,
                       NULL, NULL, NULL, 0, NULL, NULL};
    *quant = at != NULL;
    if (w->rp && tk_repack_act_f32_with(w->type, level, w->rp_bf16dot) &&
        (j->rprows = tk_repack_rows(w->type, level, w->rp_bf16dot)) != NULL) {
        /* a repacked kernel on fp32 activations (BF16's FMA kernels): x as it is, nothing to quantize */
        *quant = 0;
        j->act = (const uint8_t *) x;
        j->act_row = (size_t) K * sizeof(float);
        j->base = w->rp + (size_t) mat * w->rp_mat;
        j->prep = wk->rp_prep;
        return TK_OK;
    }
    if (at) {
        j->act_row = (size_t) (K / at->blck_size) * (size_t) at->type_size;
        if ((size_t) n_tok * j->act_row > wk->act_bytes)
            return TK_FAIL(TK_ERR_INVALID, "matmul: %lld activation rows of %zu bytes > scratch of %zu", (long long) n_tok, j->act_row, wk->act_bytes);
        j->act = wk->act;
        j->qrows = tk_type_qdot_rows(tt, level);
        /* repacked: every n_tok at every level takes the repacked kernel (one order, repack.h) */
        if (w->rp && (j->rprows = tk_repack_rows(w->type, level, w->rp_bf16dot)) != NULL) {
            if (!wk->rp_prep || wk->rp_prep_bytes < tk_rp_prep_bytes(n_tok, K))
                return TK_FAIL(TK_ERR_INVALID, "matmul: repacked weights need %zu bytes of per-token scratch, have %zu",
                               tk_rp_prep_bytes(n_tok, K), wk->rp_prep_bytes);
            j->base = w->rp + (size_t) mat * w->rp_mat;
            j->prep = wk->rp_prep;
        }
        j->act_quant = tk_type_act_from_float(at, level);
    } else if (!tt || tt->vec_dot_type != TK_GGML_F32) {
        return TK_FAIL(TK_ERR_UNSUPPORTED, "matmul: no kernel for type %s", tk_type_name(w->type));
    } else if (wk->row_stride < (size_t) K) {
        return TK_FAIL(TK_ERR_INVALID, "matmul: scratch of %zu floats < row of %lld", wk->row_stride, (long long) K);
    } else {
        j->frows = tk_type_float_rows(tt, level);
    }
    return TK_OK;
}

/* the activations of a prepared integer job, quantized (in parallel over tokens past 8) */
static void matmul_quantize(tk_pool * pool, matmul_job * j, int small) {
    if (j->n_tok >= 8 && !small) tk_pool_run(pool, j->n_tok, quantize_rows, j);
    else quantize_rows(j, 0, j->n_tok, 0);
}

tk_status tk_matmul(const tk_weight * w, int64_t mat, const float * x, int64_t n_tok, float * y, const tk_mm_work * wk) {
    const int64_t K = w->ne[0], M = w->ne[1];
    matmul_job j;
    int quant;
    TK_CHECK(matmul_prepare(w, mat, x, n_tok, y, wk, tk_cpu_level(), &j, &quant));
    /* threads only pay off past ~64k multiply-adds */
    const int small = K * M * n_tok < 65536;
    if (quant) matmul_quantize(wk->pool, &j, small);
    tk_pool_run(small ? NULL : wk->pool, j.rprows ? (M + TK_RP_ROWS - 1) / TK_RP_ROWS : M, matmul_rows, &j);
    return TK_OK;
}

/* rows [r0, r1) of the pair: [0, M1) the first job's, [M1, M1 + M2) the second's */
typedef struct { matmul_job a, b; } matmul_pair;

static void matmul_pair_rows(void * arg, int64_t r0, int64_t r1, int thread) {
    matmul_pair * p = arg;
    /* repacked pairs: items are groups, [0, G1) the first job's */
    const int64_t M1 = p->a.rprows ? (p->a.w->ne[1] + TK_RP_ROWS - 1) / TK_RP_ROWS : p->a.w->ne[1];
    if (r0 < M1) matmul_rows(&p->a, r0, r1 < M1 ? r1 : M1, thread);
    if (r1 > M1) matmul_rows(&p->b, (r0 > M1 ? r0 : M1) - M1, r1 - M1, thread);
}

tk_status tk_matmul2(const tk_weight * w1, const tk_weight * w2, int64_t mat, const float * x, int64_t n_tok,
                     float * y1, float * y2, const tk_mm_work * wk) {
    const int level = tk_cpu_level();
    matmul_pair p;
    int q1, q2;
    TK_CHECK(matmul_prepare(w1, mat, x, n_tok, y1, wk, level, &p.a, &q1));
    TK_CHECK(matmul_prepare(w2, mat, x, n_tok, y2, wk, level, &p.b, &q2));
    const int64_t K = w1->ne[0], M = w1->ne[1] + w2->ne[1];
    /* one activation quantization serves both only for the same activation type and width */
    if (w2->ne[0] != K || q1 != q2 || (q1 && (p.a.act_quant != p.b.act_quant || p.a.act_row != p.b.act_row)) ||
        !p.a.rprows != !p.b.rprows) {
        TK_CHECK(tk_matmul(w1, mat, x, n_tok, y1, wk));
        return tk_matmul(w2, mat, x, n_tok, y2, wk);
    }
    const int small = K * M * n_tok < 65536;
    if (q1) matmul_quantize(wk->pool, &p.a, small);
    const int64_t items = p.a.rprows ? (w1->ne[1] + TK_RP_ROWS - 1) / TK_RP_ROWS + (w2->ne[1] + TK_RP_ROWS - 1) / TK_RP_ROWS : M;
    tk_pool_run(small ? NULL : wk->pool, items, matmul_pair_rows, &p);
    return TK_OK;
}

/* tk_mat_mul and tk_mat_mul_repacked: W is M rows of K elements of `type`, re-laid first
 * when `repack` (quants/repack.h). */
static tk_status mat_mul_test(int type, const void * w, int64_t K, int64_t M, const float * x, int64_t n_tok, float * y,
                              int repack) {
    int64_t blck, bytes;
    if (!w || !x || !y || K <= 0 || M <= 0 || n_tok < 0) return TK_FAIL(TK_ERR_INVALID, "tk_mat_mul: bad arguments");
    if (!tk_type_block(type, &blck, &bytes)) return TK_FAIL(TK_ERR_INVALID, "tk_mat_mul: unknown ggml type %d", type);
    if (K % blck) return TK_FAIL(TK_ERR_INVALID, "tk_mat_mul: K = %lld is not a multiple of the %s block", (long long) K, tk_type_name(type));
    tk_weight wt = {(const uint8_t *) w, type, {K, M, 1, 1}, (size_t) (K / blck * bytes), NULL, 0, tk_cpu_bf16dot()};
    uint8_t * rp = NULL;
    if (repack) {
        wt.rp_mat = tk_repack_matrix_bytes(type, K, M);
        if (!wt.rp_mat) return TK_FAIL(TK_ERR_UNSUPPORTED, "tk_mat_mul_repacked: no repacked form of %s", tk_type_name(type));
        rp = malloc(wt.rp_mat);
        if (!rp) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
        tk_repack_matrix(type, wt.data, wt.row_bytes, K, M, rp);
        wt.rp = rp;
    }
    tk_mm_work wk = {NULL, malloc((size_t) K * sizeof(float)), (size_t) K, NULL, tk_mm_act_bytes(n_tok, K), NULL, 0};
    wk.act = malloc(wk.act_bytes ? wk.act_bytes : 1);
    if (repack) {
        wk.rp_prep_bytes = tk_rp_prep_bytes(n_tok, K);
        wk.rp_prep = malloc(wk.rp_prep_bytes);
    }
    tk_status st = wk.row && wk.act && (!repack || wk.rp_prep) ? tk_matmul(&wt, 0, x, n_tok, y, &wk) : TK_FAIL(TK_ERR_NOMEM, "out of memory");
    free(wk.row);
    free(wk.act);
    free(wk.rp_prep);
    free(rp);
    return st;
}

/* Public form of tk_matmul for kernel tests: W is M rows of K elements of `type`. */
tk_status tk_mat_mul(int type, const void * w, int64_t K, int64_t M, const float * x, int64_t n_tok, float * y) {
    return mat_mul_test(type, w, K, M, x, n_tok, y, 0);
}

tk_status tk_mat_mul_repacked(int type, const void * w, int64_t K, int64_t M, const float * x, int64_t n_tok, float * y) {
    return mat_mul_test(type, w, K, M, x, n_tok, y, 1);
}

/* One row (of the flattened ne1*ne2*ne3 rows) as float32. */
tk_status tk_weight_row(const tk_weight * w, int64_t row, float * dst) {
    /* bound at load: the type has a to_float (model.c) */
    tk_type_traits_get(w->type)->to_float(w->data + (size_t) row * w->row_bytes, dst, w->ne[0]);
    return TK_OK;
}

/* ==== elementwise and norms ========================================================== */

/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w (w may be NULL).  x, y: [n]; y may alias x.
 * ref: transformers MambaRMSNorm / BambaRMSNorm (variance in float32; summed here in double). */
void tk_rms_norm(const float * x, const float * w, float eps, int64_t n, float * y) {
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { tk_rms_norm_avx2(x, w, eps, n, y); return; }
#endif
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double) x[i] * (double) x[i];
    const float scale = (float) (1.0 / sqrt(ss / (double) n + (double) eps));
    for (int64_t i = 0; i < n; i++) y[i] = w ? x[i] * scale * w[i] : x[i] * scale;
}

float tk_silu(float x) { return x / (1.0f + expf(-x)); }

float tk_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void tk_silu_row(float * y, int64_t n) {
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { tk_silu_row_avx2(y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = tk_silu(y[i]);
}

void tk_silu_mul_row(float * y, const float * a, int64_t n) {
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { tk_silu_mul_row_avx2(y, a, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = tk_silu(y[i]) * a[i];
}

void tk_mul_silu_row(float * y, const float * z, int64_t n) {
#ifdef TK_HAVE_X86
    if (tk_cpu_level() >= TK_CPU_AVX2) { tk_mul_silu_row_avx2(y, z, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] *= tk_silu(z[i]);
}

/* softplus with torch's threshold 20 (ref: torch.nn.functional.softplus; ggml ssm ops). */
float tk_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* RoPE scaling as llama.cpp runs rope.scaling.* (ggml rope_yarn, ggml_rope_yarn_corr_dims,
 * llama-context.cpp's yarn_attn_factor), which is HF's (modeling_rope_utils.py
 * _compute_linear_scaling_rope_parameters, _compute_yarn_parameters with truncate):
 *   linear: inv_freq_i = freq_scale * base^(-2i/n_rot)
 *   yarn:   inv_freq_i = base^(-2i/n_rot) (freq_scale (1 - r_i) + r_i), r_i = 1 - clamp((i - low) / max(high - low,
 *           0.001), 0, 1), low = max(0, floor(d(beta_fast))), high = min(n_rot - 1, ceil(d(beta_slow))),
 *           d(b) = n_rot ln(L / (2 pi b)) / (2 ln base); cos / sin * (0.1 ln(1/freq_scale) + 1 if freq_scale < 1)
 *   and any type (none too, as llama.cpp): cos / sin * attn_factor. */
static double rope_corr_dim(int32_t n_rot, int32_t n_ctx_orig, double n_turns, double base) {
    return (double) n_rot * log((double) n_ctx_orig / (n_turns * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

tk_rope_scaling tk_rope_scaling_of(const tk_hparams_attn * a, int32_t n_rot, double base, int with_mscale) {
    tk_rope_scaling s = { 0, 1.0, 0.0, 0.0, 1.0f };
    if (!a) return s;
    double ms = a->rope_attn_factor > 0 ? (double) a->rope_attn_factor : 1.0;   /* llama.cpp: whatever the type */
    s.type = a->rope_scaling_type > 0 ? a->rope_scaling_type : 0;
    s.freq_scale = s.type && a->rope_freq_scale > 0 ? (double) a->rope_freq_scale : 1.0;
    if (s.type == 2) {
        s.low = fmax(0.0, floor(rope_corr_dim(n_rot, a->rope_orig_ctx, a->rope_yarn_beta_fast, base)));
        s.high = fmin((double) n_rot - 1.0, ceil(rope_corr_dim(n_rot, a->rope_orig_ctx, a->rope_yarn_beta_slow, base)));
        if (s.freq_scale < 1.0) ms *= 0.1 * log(1.0 / s.freq_scale) + 1.0;
    }
    s.mscale = with_mscale ? (float) ms : 1.0f;
    return s;
}

/* the angle step of pair i (of n_rot / 2) under s (NULL: none) */
static inline double rope_freq(const tk_rope_scaling * s, int32_t i, int32_t n_rot, double base) {
    const double f = pow(base, -2.0 * (double) i / (double) n_rot);
    if (!s || s->type <= 0) return f;
    if (s->type == 1) return f * s->freq_scale;
    const double y = ((double) i - s->low) / fmax(0.001, s->high - s->low);
    const double r = 1.0 - fmin(1.0, fmax(0.0, y));            /* 1: extrapolate (unscaled), 0: interpolate */
    return f * (s->freq_scale * (1.0 - r) + r);
}

/* RoPE, NORM mode (adjacent pairs), on the first n_rot dims of each head; the rest of the
 * head passes through.  x: [n_head, head_dim] of one token at position `pos`.
 *   theta_i = pos * base^(-2i / n_rot),  (x[2i], x[2i+1]) <- rotation by theta_i
 * ref: ggml rope_f32 (mode 0); HF's rotate_half form after the converter's q/k row
 * permutation within the first n_rot dims. Angles in double, then cos/sin rounded. */
void tk_rope_norm(float * x, int32_t n_head, int32_t head_dim, int32_t n_rot, int32_t pos, float base) {
    tk_rope_norm_scaled(x, n_head, head_dim, n_rot, pos, base, NULL);
}

void tk_rope_norm_scaled(float * x, int32_t n_head, int32_t head_dim, int32_t n_rot, int32_t pos, float base,
                         const tk_rope_scaling * sc) {
    const double ms = sc ? (double) sc->mscale : 1.0;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        const double theta = (double) pos * rope_freq(sc, i, n_rot, (double) base);
        const float c = (float) (cos(theta) * ms), s = (float) (sin(theta) * ms);
        for (int32_t h = 0; h < n_head; h++) {
            float * p = x + (int64_t) h * head_dim + 2 * i;
            const float x0 = p[0], x1 = p[1];
            p[0] = x0 * c - x1 * s;
            p[1] = x0 * s + x1 * c;
        }
    }
}

/* RoPE, NEOX mode: pairs (x[i], x[i + n_rot/2]) for i < n_rot/2 on the first n_rot dims of each
 * head (head h at x + h * head_stride); the rest of the head passes through.
 *   theta_i = pos * base^(-2i / n_rot),  (x[i], x[i + n_rot/2]) <- rotation by theta_i
 * ref: ggml rope_f32 (mode NEOX); transformers rotate_half (apply_rotary_pos_emb with
 * partial_rotary_factor); llama.cpp's interleaved M-RoPE reduces to this for text (spec
 * gdn-family.md §2.2, B15).  Angles in double, then cos/sin rounded, as tk_rope_norm. */
void tk_rope_neox(float * x, int32_t n_head, int64_t head_stride, int32_t n_rot, int32_t pos, float base) {
    tk_rope_neox_pairs_scaled(x, n_head, head_stride, n_rot, n_rot / 2, pos, base, NULL);
}

void tk_rope_neox_pairs(float * x, int32_t n_head, int64_t head_stride, int32_t n_rot, int32_t n_pairs, int32_t pos, float base) {
    tk_rope_neox_pairs_scaled(x, n_head, head_stride, n_rot, n_pairs, pos, base, NULL);
}

void tk_rope_neox_pairs_scaled(float * x, int32_t n_head, int64_t head_stride, int32_t n_rot, int32_t n_pairs,
                               int32_t pos, float base, const tk_rope_scaling * sc) {
    const int32_t half = n_rot / 2;
    const double ms = sc ? (double) sc->mscale : 1.0;
    for (int32_t i = 0; i < n_pairs && i < half; i++) {
        const double theta = (double) pos * rope_freq(sc, i, n_rot, (double) base);
        const float c = (float) (cos(theta) * ms), s = (float) (sin(theta) * ms);
        for (int32_t h = 0; h < n_head; h++) {
            float * p = x + (int64_t) h * head_stride + i;
            const float x0 = p[0], x1 = p[half];
            p[0] = x0 * c - x1 * s;
            p[half] = x0 * s + x1 * c;
        }
    }
}
