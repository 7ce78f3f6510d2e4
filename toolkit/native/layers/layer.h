/* layer.h: layer kinds.  A block is  x += rs * mixer(rmsnorm(x));  x += rs * ffn(rmsnorm(x)),
 * and the model says per layer which mixer kind and which FFN kind (tk_layer.kind /
 * ffn_kind, from the architecture table in toolkit/arch).  Each kind is one file:
 *
 *   mixer_mamba1.c     TK_LAYER_MAMBA1     selective scan, per-channel decay
 *   mixer_mamba2.c     TK_LAYER_MAMBA2     scalar decay per head, grouped B/C, SSD for long runs
 *   mixer_attention.c  TK_LAYER_ATTENTION  RoPE'd GQA over the KV cache (optionally gated, q/k-normed)
 *   mixer_gdn.c        TK_LAYER_GDN        gated delta net (conv, l2-normed q/k, delta rule, gated norm)
 *   mixer_shortconv.c  TK_LAYER_SHORTCONV  LFM2's gated short conv (C * conv(B * x))
 *   mixer_parallel.c   TK_LAYER_PARALLEL   attention + Mamba-2 on the same input, outputs summed (Falcon-H1)
 *   mixer_zamba2.c     TK_LAYER_ZAMBA2_SHARED  Zamba2 hybrid layer: shared attention block + LoRA, then Mamba-2
 *   mixer_zamba.c      TK_LAYER_ZAMBA_SHARED   Zamba (v1) hybrid layer: the same shared block, then multi-head Mamba-1
 *   ffn_dense.c        TK_FFN_DENSE        SwiGLU
 *   mixer_none.c       TK_LAYER_NONE       no mixer (forward NULL): the block is its FFN alone
 *   ffn_moe.c          TK_FFN_MOE          routed SwiGLU (or ReLU²) experts + optional shared expert
 *   ffn_relu2.c        TK_FFN_RELU2        down(act(up(x))), no gate (act hp.ffn.act: relu2 by default)
 *   mixer_lightning.c  TK_LAYER_LIGHTNING  MiniMax's lightning attention (decayed linear attention, gated norm)
 *   mixer_qsa.c        TK_LAYER_QSA        gated attention over the cells QSA's block indexer selects (qwen4exp)
 *   mixer_rglru.c      TK_LAYER_RGLRU      RecurrentGemma's recurrent block (conv, RG-LRU scan, GeLU branch)
 *   ffn_geglu.c        TK_FFN_GEGLU        down(act(gate x + bg) * (up x + bu)) + bd (RecurrentGemma; act hp.ffn.act)
 *   mixer_kda.c        TK_LAYER_KDA        Kimi Delta Attention (per-channel decay delta rule, low-rank gates)
 *   mixer_mla.c        TK_LAYER_MLA        multi-head latent attention, absorbed, the latent cached
 * Not kinds but per-model / per-layer add-ons of qwen4exp: residual_hc.c (hyper-connections:
 * the block skeleton of hc_count streams) and ple.c (the per-layer n-gram embedding).
 *
 * A new kind = a new file defining its tk_mixer_ops / tk_ffn_ops, one row in the tables in
 * forward.c, and its enum value (toolkit.h + toolkit/arch).  Row helpers the kinds share
 * (threaded row loops, norms, the causal conv) are in layer_rows.c.
 */
#ifndef TK_LAYER_H
#define TK_LAYER_H

#include "tk_internal.h"

/* ---- model.c: binding a layer's tensors ---------------------------------------------- */
/* The GGUF tensor table Python handed over, already validated (types, byte ranges). */
typedef struct {
    const tk_tensor_desc * t;
    int64_t n;
    size_t map_size;
    const uint8_t * base;
    const char * path;
    uint8_t * used;          /* [n]: set by tk_bind_weight for each entry it binds (NULL: not kept) */
} tk_table;
const tk_tensor_desc * tk_table_find(const tk_table * tab, const char * name);   /* NULL when absent */
/* Bind a matrix-like weight (stays in the mapping) of expected ggml shape exp[n_exp]; an
 * absent optional one leaves w->data NULL.  TK_ERR_INVALID names a missing or misshaped
 * tensor, TK_ERR_UNSUPPORTED a type. */
tk_status tk_bind_weight(tk_model * m, const tk_table * tab, const char * name, int n_exp, const int64_t * exp,
                         int required, tk_weight * w);
/* The same for a small tensor, copied to a float32 array the model owns (*out NULL when
 * absent and optional); non-finite values are refused. */
tk_status tk_bind_vec(tk_model * m, const tk_table * tab, const char * name, int n_exp, const int64_t * exp,
                      int required, float ** out);
/* n floats the model owns (freed with it); NULL when out of memory */
float * tk_model_alloc(tk_model * m, size_t n);
#define TK_SHAPE(...) (int) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
/* "blk.<il>.<suffix>" into buf */
const char * tk_blk_name(char * buf, size_t n, int il, const char * suffix);

/* The scratch a layer needs (tk_mixer_ops.scratch raises these to its own; the context
 * allocates the largest over the layers, context.c's scratch plan): floats per ubatch token of
 * the tk_context buffers named (by role: a kind uses a buffer for what its name says, and a
 * kind that needs a role none has adds a field), and bytes of the kind's workspace
 * (ctx->work) for n_ubatch tokens and n_threads. */
typedef struct {
    size_t proj;               /* the mixer's in-projection rows (or widened input: zamba2's [x | x0]) */
    size_t conv;               /* the causal conv's rows (its output; LFM2: its input B x) */
    size_t narrow;             /* narrow projections: Mamba-1 x_proj (dt | B | C), GDN b | a, Zamba2's LoRA rank */
    size_t step;               /* the scan's step inputs: Mamba-1 dt's rank rows, GDN beta | g */
    size_t dt;                 /* Mamba-1's dt, after softplus */
    size_t gate;               /* an output gate the in-projection does not hold: GDN's z, LFM3's per-head gate [H] */
    size_t y;                  /* the mixer's output before out_proj (scan output, adapter rows) */
    size_t q, kv;              /* attention: q (and att) width, k (and v) width */
    size_t mix;                /* a second mixer output (ctx->mix): D for a parallel layer, else 0 */
    size_t attn_part;          /* floats of one split-K partial of the blocked attention (kernels/attn.h
                                * tk_attn_part_floats; ctx->attn), 0: no attention layer */
    size_t work_bytes;
    /* input, set by the context's scratch plan: its run-length thresholds (tk_context_params:
     * 0 the process default, < 0 never), for the chunked forms' workspace (tk_chunked_work_bytes) */
    int32_t gdn_min, kda_min, lightning_min;
    int kv_typed;              /* input: the KV cache's K or V type is not float32 (the attention's chunk
                                * conversion workspace, kernels/attn.h tk_attn_conv_bytes) */
} tk_scratch;
static inline void tk_scratch_need(size_t * have, size_t need) { if (need > *have) *have = need; }

/* A chunked (or block) form's workspace for the scratch plan: n_threads x per_thread floats,
 * in bytes, when a run of up to n_ubatch tokens can reach the form's threshold thr (0 <
 * thr <= n_ubatch), else 0 (the recurrence, which needs none, takes every run). */
static inline size_t tk_chunked_work_bytes(int thr, int32_t n_ubatch, int n_threads, int64_t per_thread) {
    return thr > 0 && thr <= n_ubatch ? (size_t) n_threads * (size_t) per_thread * sizeof(float) : 0;
}

/* Thread `thread`'s part of the context's workspace, per_thread floats each, or NULL when
 * the context has none that large (tk_chunked_work_bytes gave 0 at its creation: the kernel
 * then runs its recurrence). */
static inline float * tk_chunked_work(const tk_context * ctx, int thread, int64_t per_thread) {
    const size_t need = (size_t) tk_pool_size(ctx->pool) * (size_t) per_thread * sizeof(float);
    return per_thread > 0 && ctx->work && ctx->work_bytes >= need ? (float *) ctx->work + (int64_t) thread * per_thread
                                                                  : NULL;
}

typedef struct {
    const char * name;
    /* hparams this kind needs, for layer il (at load, before any tensor is read) */
    tk_status (*check)(const tk_hparams * hp, int il);
    /* bind layer il's tensors ("blk.<il>.*") into l */
    tk_status (*bind)(tk_model * m, const tk_table * tab, int il, tk_layer * l);
    /* recurrent pieces of layer il (names and floats per sequence) into out[TK_RS_MAX_PIECES];
     * returns how many (NULL: the kind keeps no recurrent state) */
    int32_t (*rs_pieces)(const tk_model * m, int il, tk_rs_piece * out);
    /* floats per cell of layer il's K (and of V) in the KV cache (NULL: no KV cache) */
    int32_t (*kv_dim)(const tk_model * m, int il);
    /* raise `need` to what layer il's forward uses of the context's scratch */
    void (*scratch)(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need);
    /* out [U, D] = mixer(ctx->cur [U, D]) for the ubatch, updating the layer's memory
     * (NULL: no mixer, TK_LAYER_NONE; the block is its FFN alone) */
    tk_status (*forward)(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out);
    /* floats per cell of layer il's third KV-cache array, kept in the attention cells beside K
     * and V (QSA's raw indexer keys; NULL: none) */
    int32_t (*kv_idx_dim)(const tk_model * m, int il);
    /* floats per cell of layer il's V when they differ from kv_dim's (NULL: kv_dim); 0: no V
     * array (MLA caches one latent row per token) */
    int32_t (*kv_v_dim)(const tk_model * m, int il);
} tk_mixer_ops;

typedef struct {
    const char * name;
    /* bind layer il's FFN tensors into l (ffn_norm is bound by the block); widths from the tensors */
    tk_status (*bind)(tk_model * m, const tk_table * tab, int il, tk_layer * l);
    /* out [U, D] = ffn(ctx->cur [U, D]) */
    tk_status (*forward)(tk_context * ctx, const tk_layer * l, int32_t U, float * out);
} tk_ffn_ops;

extern const tk_mixer_ops tk_mixer_mamba1, tk_mixer_mamba2, tk_mixer_attention, tk_mixer_gdn, tk_mixer_none,
    tk_mixer_parallel, tk_mixer_shortconv, tk_mixer_zamba2, tk_mixer_qsa, tk_mixer_zamba, tk_mixer_lightning, tk_mixer_rglru,
    tk_mixer_kda, tk_mixer_mla;
/* mixer_zamba2.c: the shared attention + MLP block both Zamba hybrid kinds run.  tk_zamba_block:
 * the block layer il runs (its rank among the hybrid layers, mod n_shared_block);
 * tk_zamba_bind_shared: bind shared.<b>.* into l; tk_zamba_shared_block: t = shared_linear(block(x, E))
 * into ctx->cur [U, D] (LoRA adapters where l has them; out [U, D] is scratch) */
int32_t tk_zamba_block(const tk_hparams * hp, int il);
tk_status tk_zamba_bind_shared(tk_model * m, const tk_table * tab, int32_t b, tk_layer * l);
tk_status tk_zamba_shared_block(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out);
/* mixer_mamba2.c: bind layer il's Mamba-2 tensors; ssm_norm optional unless norm_required */
tk_status tk_mamba2_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l, int norm_required);
extern const tk_ffn_ops tk_ffn_dense, tk_ffn_moe, tk_ffn_relu2, tk_ffn_geglu;

/* forward.c: the kind tables; NULL for a kind without a mixer / for TK_FFN_NONE or unknown */
const tk_mixer_ops * tk_mixer_ops_of(int32_t kind);
const tk_ffn_ops * tk_ffn_ops_of(int32_t kind);

/* ---- layer_rows.c: row loops over the context's threads ------------------------------
 * Each token's (or channel's) result is computed by the same loop whichever thread runs
 * it, so results do not depend on the thread count.  Loops of fewer than TK_PAR_MIN
 * elements run on the calling thread (waking the workers costs more). */
#define TK_PAR_MIN 16384
typedef struct {
    const float * a;           /* input rows (or the gate z rows) */
    const float * b;           /* weights / second operand */
    float * y;                 /* output rows */
    int64_t a_stride, y_stride, n;  /* row strides (floats), row width */
    float f;                   /* eps or scale */
    int32_t groups;
    int32_t act;               /* tk_silu_mul_rows: the gate's tk_act (0: silu; left 0 by 8-value initialisers) */
} tk_rows_job;
void tk_par_rows(tk_pool * pool, int64_t n_rows, int64_t width, tk_task_fn fn, void * job);
/* y[t] = rmsnorm(x[t]) * w over U rows of width n */
void tk_rms_norm_rows(tk_context * ctx, const float * x, const float * w, float eps, int64_t n, int32_t U, float * y);
void tk_add_rows(void * arg, int64_t t0, int64_t t1, int thread);        /* y[t] += a[t] * f */
void tk_silu_mul_rows(void * arg, int64_t t0, int64_t t1, int thread);   /* y[t] = act(y[t]) * a[t] (act: j->act, 0 silu) */
/* HF ACT2FN activations (transformers 5.24 activations.py ACT2CLS) the FFN gate can take; the
 * numbers are hparams ffn.act's (toolkit/arch/fields.py ffn_act, GGUF {arch}.feed_forward.activation) and
 * ssm.act's (ssm_act, {arch}.ssm.activation: the mixers' conv) */
enum { TK_ACT_SILU = 0, TK_ACT_GELU = 1, TK_ACT_GELU_TANH = 2, TK_ACT_RELU = 3, TK_ACT_RELU2 = 4,
       TK_ACT_QUICK_GELU = 5, TK_ACT_SIGMOID = 6, TK_ACT_TANH = 7, TK_ACT_COUNT = 8 };
float tk_act(int32_t act, float x);
void tk_gated_norm_rows(void * arg, int64_t t0, int64_t t1, int thread); /* y *= silu(z); grouped RMSNorm */
/* causal conv (tk_ssm_conv) of one sequence's n_tok rows over `channels`, then act(.) (a TK_ACT_*:
 * the mixer's conv activation, hparams ssm.act, HF hidden_act; TK_ACT_SILU the vectorised SiLU), with
 * the carried window `state` [channels, d_conv-1] updated; channels split over the threads */
void tk_conv_act(tk_context * ctx, int32_t act, const float * x, int64_t x_stride, int32_t n_tok, int32_t channels,
                 int32_t d_conv, const float * w, const float * b, float * state, float * y, int64_t y_stride);
/* speculative window: before the conv of row s (n_tok rows of x) runs, write the snapshots
 * of its window piece k ([channels, d_conv-1], oldest first) after each token that keeps
 * one (tk_rs_snap): the last d_conv-1 columns of (state, x[0..i]); no-op without a window */
void tk_rs_snap_conv(const tk_rs_view * rv, int k, int32_t s, const float * x, int64_t x_stride, int32_t n_tok,
                     int32_t channels, int32_t d_conv);
/* the same causal conv without an activation (LFM2's short conv) */
void tk_conv_rows(tk_context * ctx, const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, int32_t d_conv,
                  const float * w, const float * b, float * state, float * y, int64_t y_stride);
/* y[t] += b (act 0), or y[t] = gelu_tanh(y[t] + b) (act 1), over U rows of width n (RecurrentGemma's biases) */
void tk_bias_rows(tk_context * ctx, float * y, const float * b, int64_t n, int32_t U, int act);
/* y[t] = act(y[t] + b) over U rows of width n, act a TK_ACT_* (RecurrentGemma's gate branch: hidden_activation) */
void tk_bias_act_rows(tk_context * ctx, float * y, const float * b, int64_t n, int32_t U, int32_t act);
/* gelu_pytorch_tanh: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (HF ACT2FN["gelu_pytorch_tanh"]) */
float tk_gelu_tanh(float x);
void tk_l2_norm(float * x, int32_t n, float eps, float scale);   /* x <- scale x / sqrt(|x|^2 + eps) */
/* mixer_attention.c: with q [U, H qs], k, v [U, Hkv hd] projected into ctx->q, k, v: per-head
 * q/k norm and RoPE (in place), K and V into layer il's cache cells, and softmax(q K^T scale) V
 * into ctx->att [U, H hd] (the attention mixer's formula between its projections) */
tk_status tk_attention_core(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub);
/* the same attending only the cells sel[t * n_cells + c] != 0 of token t (sel NULL: all);
 * tk_attention_forward_sel: the whole attention mixer (projections, core, gate, output) so */
tk_status tk_attention_core_sel(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, const uint8_t * sel);
tk_status tk_attention_forward_sel(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out,
                                   const uint8_t * sel);
/* the attention kind's check / bind / kv_dim / scratch, for kinds built on it (mixer_qsa.c) */
tk_status tk_attention_check(const tk_hparams * hp, int il);
tk_status tk_attention_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l);
int32_t tk_attention_kv_dim(const tk_model * m, int il);
void tk_attention_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need);
/* indexer_select.c: shared by the sparse indexers (mixer_qsa.c, dsa.c).  tk_kv_seq_cells: the
 * cells of sequence `bit` with 0 <= pos <= pmax into cells[] in position order, returns how many;
 * tk_topk_torch: keep[b] = 1 for the k best of score[0 .. n) as torch.topk on CPU picks them
 * (equal scores included); work [n] */
typedef struct { float v; int32_t i; } tk_topk_elem;
int32_t tk_kv_seq_cells(const tk_kv_view * kv, uint64_t bit, int32_t pmax, int32_t * cells);
void tk_topk_torch(const float * score, int32_t n, int32_t k, tk_topk_elem * work, uint8_t * keep);
/* dsa.c: GLM-5-Next's DSA k-pool indexer, for the attention kind that runs it (contract in dsa.c).
 * tk_dsa_check: its hparams for layer il; tk_dsa_bind: the indexer tensors of a full layer (rq the
 * q-LoRA rank); tk_dsa_idx_dim: floats per KV cell of layer il's third array (2 dI on full layers);
 * tk_dsa_selection: *sel [U, n_cells] the cells each ubatch token attends (x [U, D] the attention
 * input, qr [U, rq] the q-LoRA latent; a shared layer gets the last full layer's selection) */
tk_status tk_dsa_check(const tk_hparams * hp, int il);
/* the pooled-key cache of the DSA layers (dsa.c): tk_dsa_cache_bytes what tk_dsa_cache_alloc
 * allocates for n_ctx cells, n_seq sequences and n_ubatch tokens (the selection rows included;
 * 0 without DSA); tk_dsa_forget: the sequence ops that remove, move or rewrite cells drop the
 * pools they may change, sequence seq (-1: all) from position p0 on (p0 <= 0: all its pools) */
size_t tk_dsa_cache_bytes(const tk_model * m, int32_t n_ctx, int32_t n_seq, int32_t n_ubatch);
tk_status tk_dsa_cache_alloc(tk_context * ctx);
void tk_dsa_cache_free(tk_context * ctx);
void tk_dsa_forget(tk_context * ctx, int32_t seq, int32_t p0);
tk_status tk_dsa_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l, int64_t rq);
int32_t tk_dsa_idx_dim(const tk_model * m, int il);
tk_status tk_dsa_selection(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, const float * x,
                           const float * qr, const tk_kv_view * kv, const uint8_t ** sel);
/* residual_hc.c: hyper-connections (tk_hc_on(hp)): qwen4exp's, GLM-5-Next's mHC */
tk_status tk_hc_bind_layer(tk_model * m, const tk_table * tab, int il, tk_layer * l);
tk_status tk_hc_bind_output(tk_model * m, const tk_table * tab);
tk_status tk_forward_ubatch_hc(tk_context * ctx, const tk_ubatch * ub, float * logits_out);
/* mtp.c: an MTP / NextN block's input (m->nextn_eh_proj bound: the model is one).  tk_mtp_bind:
 * the optional nextn.eh_proj and, with it, nextn.enorm / nextn.hnorm; tk_mtp_input: ctx->x [U, D]
 * from embd(token) to eh_proj [enorm(e); hnorm(h)], h the ubatch's rows of ctx->embd_in */
tk_status tk_mtp_bind(tk_model * m, const tk_table * tab);
tk_status tk_mtp_input(tk_context * ctx, const tk_ubatch * ub);
/* ple.c: qwen4exp's per-layer n-gram embedding on layer il (hp.ple.index[il] >= 0) */
tk_status tk_ple_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l);
int32_t tk_ple_rs_pieces(const tk_model * m, int il, tk_rs_piece * out);   /* appended to the layer's own */
tk_status tk_ple_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, int first_piece);
/* ffn_dense.c: bind ffn_up [D, F], ffn_gate [D, F] (with_gate) and ffn_down [F, D], named
 * prefix + "ffn_*.weight" ("blk.<il>." or a shared block's prefix), into l (F: l->n_ff) */
tk_status tk_bind_ffn(tk_model * m, const tk_table * tab, const char * prefix, int with_gate, tk_layer * l);
/* ffn_dense.c: down(silu(gate(x)) * up(x)) for n rows of x [n, D] into y [n, D]; `mat`
 * selects the expert of 3-D weights */
tk_status tk_swiglu(tk_context * ctx, const tk_weight * gate, const tk_weight * up, const tk_weight * down,
                    int64_t mat, const float * x, int32_t n, float * y);
/* the same with GLM-5-Next's clamp (limit > 0): gate <- min(gate, limit), up <- clamp(up, -limit, limit) */
tk_status tk_swiglu_clamped(tk_context * ctx, const tk_weight * gate, const tk_weight * up, const tk_weight * down,
                            int64_t mat, const float * x, int32_t n, float limit, float * y);
/* ffn_relu2.c: down(act(up(x))) for n rows of x [n, D] into y [n, D] (act hp.ffn.act, relu2 by default; scratch ctx->u) */
tk_status tk_relu2_ffn(tk_context * ctx, const tk_weight * up, const tk_weight * down, int64_t mat,
                       const float * x, int32_t n, float * y);

#endif
