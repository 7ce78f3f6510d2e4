/* tk_internal.h: helpers shared by the C files (not part of the public API). */
#ifndef TK_INTERNAL_H
#define TK_INTERNAL_H

#include "toolkit.h"
#include "tk_testing.h"   /* kernels the runtime calls too, CPU levels */

/* Record an error for tk_last_error() and return its status. */
tk_status tk_set_error(const char * file, int line, tk_status st, const char * fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define TK_FAIL(st, ...) tk_set_error(__FILE__, __LINE__, (st), __VA_ARGS__)
#define TK_CHECK(expr) do { tk_status _s = (expr); if (_s != TK_OK) return _s; } while (0)

/* a * b and a + b saturating at UINT64_MAX: memory estimates of absurd requests stay ordered */
static inline uint64_t tk_sat_mul(uint64_t a, uint64_t b) { uint64_t r; return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r; }
static inline uint64_t tk_sat_add(uint64_t a, uint64_t b) { uint64_t r; return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r; }

/* ==== runtime internals (model.c, ops.c, ssm.c, memory_*.c, forward.c, context.c) ==== */
#include <stdbool.h>

/* ggml type ids (TK_GGML_*), the type table (tk_type_traits_get) and its shorthands
 * tk_type_block / tk_type_name: ggml_types.h. */
#include "quants/ggml_types.h"

/* A 2-D view of weights in the mmap: rows of ne0 elements, ne1 rows (a 3-D expert tensor
 * is ne2 such matrices, `mat_stride` bytes apart). */
typedef struct {
    const uint8_t * data;      /* first byte in the mmap; NULL = absent */
    int32_t type;              /* ggml type */
    int64_t ne[4];             /* ggml order */
    size_t  row_bytes;         /* bytes of one row of ne[0] elements */
    /* the matrices re-laid for the GEMM kernels (quants/repack.h; model.c, tk_model_params.repack),
     * rp_mat bytes apart, or NULL: then the mat-muls read `data` */
    const uint8_t * rp;
    size_t  rp_mat;
    int32_t rp_bf16dot;        /* BF16 re-laid: 1 the VDPBF16PS kernel reads it, 0 the FMA one */
} tk_weight;

typedef struct {
    /* small tensors are copied to owned float32 arrays at load (any source type) */
    float * attn_norm;         /* [D] */
    /* recurrent (LFM2's short conv: ssm_in = shortconv.in_proj [D, 3D], ssm_conv1d =
     * shortconv.conv [D][K], ssm_out = shortconv.out_proj [D, D]) */
    tk_weight ssm_in;          /* M1: [D, 2*d_inner]; M2: [D, 2*d_inner + 2*G*N + H] */
    float * ssm_conv1d;        /* [conv_dim][d_conv]  (ggml [d_conv, conv_dim]) */
    float * ssm_conv1d_b;      /* [conv_dim] or NULL */
    tk_weight ssm_x;           /* M1: [d_inner, dt_rank + 2N] */
    tk_weight ssm_dt;          /* M1: [dt_rank, d_inner] */
    float * ssm_dt_b;          /* M1: [d_inner]; M2: [H]; GDN: [Hv] */
    float * ssm_a;             /* M1: [d_inner][N]; M2: [H]; GDN: [Hv]  (A = -exp(A_log)) */
    float * ssm_d;             /* M1: [d_inner]; M2: [H] */
    float * ssm_norm;          /* M2: [d_inner] (ggml [d_inner/G, G]); GDN: [Dv] */
    float * ssm_dt_norm;       /* Jamba: [dt_rank] or NULL */
    float * ssm_b_norm;        /* Jamba: [N] or NULL */
    float * ssm_c_norm;        /* Jamba: [N] or NULL */
    tk_weight ssm_out;         /* [d_inner, D] */
    /* gated delta net (C = 2 Hk Dk + Hv Dv conv channels) */
    tk_weight wqkv;            /* attn_qkv [D, C]: rows [q (Hk Dk) | k (Hk Dk) | v (Hv Dv)]; absent (OLMo-Hybrid):
                                  wq, wk, wv [D, Hk Dk], [D, Hk Dk], [D, Hv Dv] and the conv from ssm_conv1d_{q,k,v} */
    tk_weight wgate;           /* attn_gate [D, Hv Dv]: the output gate z */
    tk_weight ssm_beta, ssm_alpha;   /* [D, Hv] each (qwen35), or absent */
    tk_weight ssm_ba;          /* [D, 2 Hv], per K-head [b (Hv/Hk) | a (Hv/Hk)] (qwen3next), or absent */
    /* attention */
    tk_weight wq, wk, wv, wo;  /* [D, H*hd] ([D, 2*H*hd] with attn_q_gate), [D, Hkv*hd], [D, Hkv*hd], [H*hd, D] */
    float * attn_q_norm, * attn_k_norm;   /* [hd] each (attn_qk_norm), [H hd] / [Hkv hd] (attn_qk_norm_full), else NULL */
    /* ffn */
    float * ffn_norm;          /* [D] the FFN pre-norm (hp.block.ffn_norm names it); NULL: a post-norm block */
    /* the post-norms (hp.block.norm POST on attention layers, where attn_norm / ffn_norm are NULL; SANDWICH) */
    float * mixer_post_norm;   /* [D] post_attention_norm: x += rmsnorm(mixer(.)) * this */
    float * ffn_post_norm;     /* [D] post_ffw_norm: x += rmsnorm(ffn(.)) * this */
    float res_alpha, res_beta; /* hp.block.residual NORMED: the mixer branch's factors (by its kind: hp.res) */
    tk_weight ffn_gate, ffn_up, ffn_down;               /* [D, F], [D, F], [F, D] */
    tk_weight ffn_gate_inp;                             /* [D, E] */
    tk_weight ffn_gate_exps, ffn_up_exps, ffn_down_exps;/* [D, Fe, E], [D, Fe, E], [Fe, D, E] */
    tk_weight ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp; /* [D, Fs], [D, Fs], [Fs, D] */
    tk_weight ffn_latent_down, ffn_latent_up;   /* latent MoE (moe.latent_size Dl > 0): [D, Dl], [Dl, D] */
    float * ffn_gate_inp_shexp;                         /* [D]: shared expert * sigmoid(w . x), or NULL */
    float * ffn_exp_probs_b;                            /* [E]: expert choice bias (moe_sigmoid), or NULL */
    /* zamba2 hybrid layer (mixer_zamba2.c): the shared block's tensors (bound into every layer
     * that runs it; matrices stay in the mapping) and the layer's own adapters and projection */
    float * shared_attn_norm;  /* [2D] (the block's ffn pre-norm is ffn_norm; wq..wo, ffn_gate/up/down its matrices) */
    tk_weight lora_qa, lora_ka, lora_va;                /* [2D, r] each */
    tk_weight lora_qb, lora_kb, lora_vb;                /* [r, H hd], [r, Hkv hd], [r, Hkv hd] */
    tk_weight ffn_lora_a, ffn_gate_lora_b, ffn_up_lora_b;   /* [D, r], [r, F], [r, F] */
    tk_weight shared_linear;   /* [D, D] */
    /* qwen4exp: hyper-connections (residual_hc.c; hcD = hc_count D, R the low rank) */
    float * hc_attn_norm, * hc_ffn_norm;                 /* [hcD] (HF's (1 + w) folded in) */
    tk_weight hc_attn_down, hc_ffn_down;                 /* [hcD, R] */
    tk_weight hc_attn_up, hc_ffn_up;                     /* [R, hcD] */
    tk_weight hc_attn_inject, hc_ffn_inject;             /* [hcD, hc] */
    /* GLM-5-Next: mHC (residual_hc.c; hcD = hc_count D, M = hc (2 + hc)) */
    tk_weight hc_attn_fn, hc_ffn_fn;                     /* [hcD, M] */
    float * hc_attn_base, * hc_ffn_base;                 /* [M] */
    float * hc_attn_scale, * hc_ffn_scale;               /* [3] */
    /* qwen4exp: the QSA indexer (mixer_qsa.c) */
    tk_weight idx_q, idx_k;                              /* [D, Hi di], [D, di] */
    float * idx_q_norm, * idx_k_norm;                    /* [di] */
    /* GLM-5-Next: the DSA indexer (dsa.c; idx_q is indexer.attn_q_b [rq, nI dI], idx_k indexer.attn_k
     * [D, dI], idx_k_norm the LayerNorm's weight) */
    float * idx_k_norm_b;                                /* [dI] the LayerNorm's bias */
    tk_weight idx_proj, idx_gate;                        /* [D, nI], [D, dI] */
    float * idx_ape;                                     /* [kp][dI] */
    /* qwen4exp: the per-layer n-gram embedding (ple.c; Ep = NH dh) */
    tk_weight ple_key, ple_value;                        /* [Ep, hcD], [Ep, D] */
    tk_weight ple_table;                                 /* [dh, rows] the n-gram table (stays in the mapping) */
    float * ple_norm_key, * ple_norm_query, * ple_norm_conv;  /* [hcD] */
    float * ple_conv1d;                                  /* [hcD][Kp] (ggml [Kp, hcD]) */
    /* LFM3: the per-head output gate (absent elsewhere) */
    tk_weight w_head_gate;                               /* attn_gate [D, H] (hp.attn.head_gate) */
    /* RecurrentGemma (mixer_rglru.c, ffn_geglu.c, attention biases; lru = d_inner, bw = lru / n_head) */
    tk_weight rglru_x, rglru_y;                          /* linear_x, linear_y [D, lru] */
    float * rglru_x_b, * rglru_y_b;                      /* [lru] */
    float * rglru_gate_i, * rglru_gate_a;                /* [nh][bw in][bw out]: out_j = sum_i x_i W[h][i][j] (HF's layout) */
    float * rglru_gate_i_b, * rglru_gate_a_b;            /* [nh][bw] */
    float * rglru_neg8_sp;                               /* [lru]: -8 softplus(Lambda) (so log a = r * this) */
    float * ssm_out_b;                                   /* linear_out's bias [D] (LFM2: shortconv.out_proj's) */
    float * ssm_in_b;                                    /* LFM2 conv_bias: shortconv.in_proj's bias [3D], else NULL */
    float * attn_q_b, * attn_k_b, * attn_v_b, * attn_out_b;   /* [H hd], [Hkv hd], [Hkv hd], [D] (hp.attn.bias), else NULL */
    float * ffn_gate_b, * ffn_up_b, * ffn_down_b;        /* GeGLU biases [F], [F], [D] */
    /* KDA (mixer_kda.c; wq, wk, wv, wo, ssm_beta, ssm_a, ssm_dt_b, ssm_norm, ssm_conv1d as named there) */
    tk_weight ssm_f_a, ssm_f_b, ssm_g_a, ssm_g_b;       /* [D, r], [r, C] (or [D, C] and absent: full rank) */
    /* MLA (mixer_mla.c; wq = attn_q without q-LoRA, wo) */
    tk_weight wq_a, wq_b;                                /* [D, rq], [rq, h (dn + dr)] (q-LoRA) */
    float * q_a_norm;                                    /* [rq] */
    tk_weight wkv_a;                                     /* [D, rkv + dr] */
    float * kv_a_norm;                                   /* [rkv] */
    tk_weight wk_b, wv_b;                                /* [dn, rkv, h], [rkv, dv, h] */
    float * q_a_b, * kv_a_b;                             /* HF attention_bias: [rq], [rkv + dr] (with attn_out_b [D]), else NULL */
    int32_t kind;              /* tk_layer_kind */
    int32_t ffn_kind;          /* tk_ffn_kind */
    int32_t n_head_kv;
    int32_t n_ff;              /* dense width F (0 if none) */
    int32_t n_ff_exp;          /* expert width Fe */
    int32_t n_ff_shexp;        /* shared expert width Fs (0 if none) */
} tk_layer;

/* hyper-connections in force: qwen4exp's (hc_count > 1) or GLM-5-Next's mHC (hc_sinkhorn_iters > 0,
 * any count, 1 included: HF's mHC with one stream is not the plain residual) */
static inline int tk_hc_on(const tk_hparams * hp) { return hp->hc.count > 1 || hp->hc.sinkhorn_iters > 0; }

struct tk_model {
    tk_hparams hp;             /* layer_kinds/ffn_kinds/n_head_kv point into the arrays below */
    char ffn_norm_name[72], output_norm_name[72];   /* hp.block's names (the caller's strings are not kept) */
    int32_t * layer_kinds;     /* [n_layer] */
    int32_t * ffn_kinds;       /* [n_layer] */
    int32_t * n_head_kv;       /* [n_layer] */
    void *  map;               /* mmap of the whole file */
    size_t  map_size;
    tk_weight tok_embd;        /* [D, n_vocab] */
    float * output_norm;       /* [D] */
    tk_weight output;          /* [D, n_vocab] (tok_embd when tied) */
    tk_layer * layers;         /* [n_layer] */
    /* qwen4exp: the final mixer in place of output_norm (residual_hc.c), the copied arrays of hp */
    float * output_hc_norm;    /* [hcD] */
    tk_weight output_hc_down, output_hc_up;   /* [hcD, R], [R, hcD] */
    int32_t hc_rank;           /* largest low rank R of any mixer */
    int32_t ple_row_dim;       /* dh, the n-gram table's row width (0: no PLE) */
    int32_t * compress_ratios; /* [n_layer] or NULL */
    int32_t * ple_index;       /* [n_layer] or NULL */
    uint64_t * ple_consts;     /* or NULL */
    int32_t * swa_layers;      /* [n_layer] or NULL */
    int32_t * dsa_full;        /* [n_layer] or NULL */
    /* an MTP / NextN block run as a model of its own (layers/mtp.c; the table names them
     * nextn.eh_proj / nextn.enorm / nextn.hnorm): x = eh_proj [enorm(embd(token)); hnorm(h)] */
    tk_weight nextn_eh_proj;   /* [2D, D]; data NULL: not an MTP block */
    float * nextn_enorm, * nextn_hnorm;   /* [D] */
    int32_t conv_dim;          /* d_inner, or d_inner + 2*G*N with a Mamba-2 layer, 2 Hk Dk + Hv Dv with a GDN
                                  layer: only in the state fingerprint (state.c) */
    int32_t max_ff;            /* widest FFN hidden width of any layer */
    int embd_random;           /* token_embd is a large gather-only table (random-access advice) */
    float ** owned;            /* float arrays copied at load, freed with the model */
    int32_t n_owned, cap_owned;
    /* repacking (tk_model_params.repack, model.c): the mat-mul weights bound (candidates), the one
     * buffer of their re-laid matrices, what it cost */
    tk_weight ** bound;
    int32_t n_bound, cap_bound;
    uint8_t * rp_buf;
    tk_repack_info rp_info;
};

/* ---- model.c ----------------------------------------------------------------------- */
void tk_model_prefetch_rows(const tk_model * m, const int32_t * tokens, int32_t n);

/* ---- threads.c ---------------------------------------------------------------------- */
typedef struct tk_pool tk_pool;
/* Work on [i0, i1) of a parallel loop; `thread` in [0, tk_pool_size) indexes per-thread scratch.
 * A thread may be called several times per tk_pool_run, on disjoint ranges (claimed chunks,
 * threads.c); the ranges cover [0, n) once. */
typedef void (*tk_task_fn)(void * arg, int64_t i0, int64_t i1, int thread);
tk_status tk_pool_new(int n_threads, tk_pool ** out);
void tk_pool_free(tk_pool * pool);
int  tk_pool_size(const tk_pool * pool);        /* 1 for NULL */
void tk_pool_run(tk_pool * pool, int64_t n, tk_task_fn fn, void * arg);

/* ---- ops.c (fp16/bf16, rms_norm, rope_norm, mat_mul are in tk_testing.h) ---------- */
/* What a mat-mul works in: the pool, per-thread float rows (F32/F16/BF16 weights) and a
 * buffer for the quantized activations (integer path of the quantized types, qdot.h). */
typedef struct {
    tk_pool * pool;
    float * row;               /* tk_pool_size(pool) * row_stride floats */
    size_t row_stride;         /* >= ne0 of any weight */
    uint8_t * act;             /* act_bytes bytes: n_tok rows of the weight type's vec_dot_type */
    size_t act_bytes;
    uint8_t * rp_prep;         /* repacked weights only: the activations' per-token terms (quants/repack.h
                                  tk_rp_prep_bytes), else NULL */
    size_t rp_prep_bytes;
} tk_mm_work;
/* Bytes of `act` that n_tok rows of width K need, whatever the weight type. */
size_t tk_mm_act_bytes(int64_t n_tok, int64_t K);
/* y[t][r] = sum_k W[r][k] x[t][k] for t < n_tok, r < w->ne[1]; x: [n_tok, ne0], y: [n_tok, ne1].
 * `mat` selects the ne[2] slice (experts). Rows are split over the pool's threads.
 * Quantized weights (every type but F32/F16/BF16) take the integer path: x is first
 * quantized per block to the type's activation type (qdot.h), as ggml does. */
tk_status tk_matmul(const tk_weight * w, int64_t mat, const float * x, int64_t n_tok, float * y, const tk_mm_work * wk);
/* y1 = W1[mat] x and y2 = W2[mat] x (SwiGLU's gate and up): the bits of two tk_matmul calls; the
 * activations quantized once and one parallel loop over both weights' rows where their
 * activation types agree (else two tk_matmul calls) */
tk_status tk_matmul2(const tk_weight * w1, const tk_weight * w2, int64_t mat, const float * x, int64_t n_tok,
                     float * y1, float * y2, const tk_mm_work * wk);
/* One row of any supported type to float32 (embedding gather). */
tk_status tk_weight_row(const tk_weight * w, int64_t row, float * dst);
float tk_silu(float x);
float tk_sigmoid(float x);
/* Row forms of the gates (tk_silu_row: tk_testing.h): y = silu(y) * a;  y = y * silu(z). */
void tk_silu_mul_row(float * y, const float * a, int64_t n);
void tk_mul_silu_row(float * y, const float * z, int64_t n);
float tk_softplus(float x);
/* RoPE, NEOX mode: pairs (i, i + n_rot/2) on the first n_rot dims of each of n_head heads,
 * head h at x + h * head_stride; the rest of the head passes through (ops.c). */
void tk_rope_neox(float * x, int32_t n_head, int64_t head_stride, int32_t n_rot, int32_t pos, float base);
/* tk_rope_neox on the pairs i < n_pairs only (LFM3's proportional RoPE; n_pairs = n_rot/2: tk_rope_neox) */
void tk_rope_neox_pairs(float * x, int32_t n_head, int64_t head_stride, int32_t n_rot, int32_t n_pairs, int32_t pos, float base);
/* RoPE scaling of one call (llama.cpp's rope.scaling.*, ops.c tk_rope_scaling_of): pair i of n_rot turns
 * by pos * tk_rope_freq(s, i, ...) and its cos / sin are multiplied by mscale. */
typedef struct {
    int32_t type;              /* 0 none, 1 linear, 2 yarn (tk_hparams_attn.rope_scaling_type) */
    double freq_scale;         /* 1 / factor */
    double low, high;          /* yarn: the ramp's first and last pair (llama.cpp ggml_rope_yarn_corr_dims) */
    float mscale;              /* cos / sin * this */
} tk_rope_scaling;
/* The scaling of the attention hparams `a` for RoPE over n_rot dims at `base`; with_mscale 0: mscale 1
 * (the context shift re-rotates cached keys, which already carry it) */
tk_rope_scaling tk_rope_scaling_of(const tk_hparams_attn * a, int32_t n_rot, double base, int with_mscale);
/* tk_rope_norm / tk_rope_neox_pairs under the scaling s (NULL: none) */
void tk_rope_norm_scaled(float * x, int32_t n_head, int32_t head_dim, int32_t n_rot, int32_t pos, float base,
                         const tk_rope_scaling * s);
void tk_rope_neox_pairs_scaled(float * x, int32_t n_head, int64_t head_stride, int32_t n_rot, int32_t n_pairs,
                               int32_t pos, float base, const tk_rope_scaling * s);
/* RoPE of layer il (attention kinds) on n_head rows head_stride apart, at position pos: the model's
 * mode, base, rotated dims and scaling (rope.scaling.*), per layer for LFM3 (sliding: rope_freq_base_swa;
 * else proportional) */
void tk_attention_rope(const tk_hparams * hp, int il, float * x, int32_t n_head, int64_t head_stride, int32_t pos);
/* tk_attention_rope for the context shift: by pos = delta, the cos / sin not scaled (mscale 1) */
void tk_attention_rope_shift(const tk_hparams * hp, int il, float * x, int32_t n_head, int64_t head_stride, int32_t delta);

/* ---- ssm.c: tk_ssm_conv, tk_ssm_scan_mamba1/2 are declared in tk_testing.h ------- */
/* A chunk threshold parameter (tk_context_params.ssd_min, tk_gdn_head.min_chunk, ...) as the
 * run length from which the chunked form runs (0: never): 0 -> the process default `dflt`,
 * TK_CHUNK_NEVER (or any negative) -> 0 */
static inline int tk_chunk_min(int32_t p, int dflt) { return p == 0 ? dflt : p < 0 ? 0 : (int) p; }

/* Mamba-2 over n_tok tokens of one sequence (contract in ssm.c): the recurrence, or from
 * tk_chunk_min(min_chunk, tk_ssd_threshold()) tokens the chunked SSD (ssd.c, tk_ssd_scan) in
 * `ws` (ws_bytes, at least tk_ssd_workspace_bytes for n_tok and the pool's threads; smaller:
 * TK_ERR_INVALID). */
tk_status tk_ssm_mamba2_run(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                            int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                            int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride, void * ws,
                            size_t ws_bytes, int32_t min_chunk);
/* the same recurrence, never the SSD, with snap[t] (when not NULL) the state after token t (ssm.c) */
tk_status tk_ssm_mamba2_run_snap(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                                 int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                                 int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride,
                                 float * const * snap);
/* ---- ssd.c ---- */
/* Bytes of SSD workspace for runs of up to n_tok tokens on n_threads threads (0 if a size is <= 0). */
size_t tk_ssd_workspace_bytes(int32_t n_tok, int32_t n_head, int32_t head_dim, int32_t d_state, int32_t n_group,
                              int n_threads);
tk_status tk_ssd_scan(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                      int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                      int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride, void * ws,
                      size_t ws_bytes);

/* ---- memory: memory.h (the interface and its kv / rs / hybrid implementations) ---- */
#include "memory/memory.h"

/* ---- context / forward ---------------------------------------------------------- */
#define TK_TRACE_MAX 256     /* ubatches of one decode recorded for tk_context_ubatches */

struct tk_context {
    tk_model * model;
    tk_context_params params;
    tk_memory * mem;           /* kv, rs or hybrid (memory.h): the only way to the cached state */
    /* scratch, [n_ubatch, width] float32 each (allocated once in tk_context_new) */
    float * x;                 /* [U, D] residual stream */
    float * cur;               /* [U, D] normed input of a block */
    float * out;               /* [U, D] block output */
    /* the mixers' buffers, named by role; widths: tk_scratch (layers/layer.h), per kind in its file */
    float * proj;              /* [U, proj] in-projection (M1: 2 DI; M2: 2 DI + 2 G N + H; GDN: C; LFM2: 3 D;
                                  QSA: the indexer's queries and keys; Zamba2: the shared block's input) */
    float * conv;              /* [U, conv] conv rows (M1: DI; M2: DI + 2 G N; GDN: C; LFM2: D) */
    float * narrow;            /* [U, narrow] M1: dt_rank + 2N (x_proj); GDN: 2 Hv (b, a); Zamba2: LoRA rank */
    float * step;              /* [U, step] M1: dt_rank (dt's compact rows); GDN: 2 Hv (beta | g) */
    float * dt;                /* [U, DI] M1: dt after softplus */
    float * gate;              /* [U, Hv Dv] GDN: the output gate z */
    float * y;                 /* [U, y] the mixer's output before out_proj (DI; Zamba2: max(H hd, F)) */
    float * q;                 /* [U, H*hd] ([U, 2*H*hd] with attn_q_gate: q and gate per head) */
    float * k;                 /* [U, Hkv_max*hd] */
    float * v;                 /* [U, Hkv_max*hd] */
    float * att;               /* [U, H*hd] (sized like q) */
    float * mix;               /* [U, D] a parallel layer's second mixer output, or NULL (no such layer) */
    float * mtp_in;            /* [U, 2D] an MTP block's [enorm(e); hnorm(h)] (layers/mtp.c), or NULL (not one) */
    const float * embd_in;     /* during tk_decode: tk_batch.embd (rows by ubatch bidx), or NULL */
    float * hidden_out;        /* during tk_decode: tk_batch.hidden_out, or NULL */
    /* hyper-connections (hc_count > 1 only, else NULL): hcD = hc_count D */
    float * hx;                /* [U, hcD] the residual streams */
    float * hn;                /* [U, hcD] the normed streams (PLE: query, then the conv input) */
    float * hg;                /* [U, hcD] the mixing gates (PLE: key, then the gated value) */
    float * hl;                /* [U, max(R, hc)] the low-rank activations */
    float * hi;                /* [U, hc] the inject weights */
    float * pe;                /* [U, Ep] the gathered n-gram rows (PLE models) */
    float * pc;                /* [U, hcD] the PLE conv output (PLE models) */
    float * g;                 /* [U, max_ff] */
    float * u;                 /* [U, max_ff] */
    /* MoE models only (ffn_moe.c; else NULL), moe_w floats per ubatch token in all: */
    float * moe_x;             /* [U, D] one expert's gathered tokens */
    float * moe_y;             /* [U, D] their expert outputs; then the shared expert's for the ubatch */
    float * moe_r;             /* [U, n_expert] router logits, then scores */
    float * moe_xl, * moe_ol;  /* latent MoE only: [U, Dl] the tokens' latent inputs, their routed sums */
    float * moe_wt;            /* [U, n_expert_used] routing weights */
    int32_t * moe_sel;         /* [U, n_expert_used] the chosen experts */
    int32_t * moe_list;        /* [U n_expert_used] token * n_expert_used + slot, grouped by expert */
    float * row;               /* [n_threads, row_n] dequantized weight rows */
    uint8_t * act;             /* [U] quantized activation rows (tk_mm_act_bytes(U, row_n)) */
    tk_pool * pool;            /* worker threads (params.n_threads) */
    tk_mm_work mm;             /* pool, row, act: what tk_matmul works in */
    float * vec;               /* [n_threads, vec_n] per-token work (scores over cells, router logits) */
    float * attn;              /* [attn_n] the blocked attention's sequence cells and split-K partials (kernels/attn.h
                                  tk_attn_buffer_floats), or NULL (no attention layer) */
    size_t attn_n;
    size_t row_n, vec_n;
    void * work;               /* a kind's workspace (Mamba-2: the SSD's, tk_ssd_workspace_bytes for n_ubatch; GDN:
                                  tk_gdn_work_floats per thread), the largest over the layers, or NULL */
    size_t work_bytes;
    size_t scratch_bytes;      /* bytes of the float scratch above (memory report) */
    tk_ubatch ub;
    uint8_t * dsa_sel;         /* [U, n_cells] the last full DSA layer's selection (dsa.c; n_ubatch x n_ctx at
                                  creation, in scratch_bytes; grown if a view has more cells) */
    size_t dsa_sel_cap, dsa_sel_n;
    struct tk_dsa_pools * dsa_pools; /* [n_layer * n_seq_max] the pooled keys DSA layers keep across calls
                                  (dsa.c; NULL without DSA), in scratch_bytes */
    int64_t dsa_pooled;        /* pools pooled so far (tk_context_dsa_pooled) */
    volatile int abort_requested; /* set by tk_context_abort from another thread */
    int32_t n_keep_tail;       /* split rule: the last n tokens of a sequence in a batch share a ubatch (0: none; context.c) */
    int32_t n_trace;           /* ubatches of the last tk_decode */
    int32_t trace[TK_TRACE_MAX][2];   /* [min(n_trace, TK_TRACE_MAX)] their n_seqs, n_seq_tokens */
    int32_t spec_window;       /* speculative window k (tk_context_set_spec_window; 0: off) */
    uint32_t spec_flags;       /* TK_SPEC_NO_LAST, ... (tk_context_set_spec_window_ex) */
};

tk_status tk_forward_ubatch(tk_context * ctx, const tk_ubatch * ub, float * logits_out);
/* ctx not NULL and seq in [0, n_seq_max) (or -1, "every sequence", when allow_all) (context.c) */
tk_status tk_check_seq(const tk_context * ctx, int32_t seq, int allow_all);


#endif
