/* toolkit.h: the one public header of the toolkit C runtime (prefix tk_).
 *
 * C99. Nothing here knows about Python. Every fallible call returns a tk_status;
 * tk_last_error() gives "file:line: message" of the last failure on this thread.
 * The library never calls exit() or abort() on bad input.
 *
 * The block between CDEF-BEGIN and CDEF-END is plain declarations (no preprocessor
 * lines): the cffi builder (_build.py) feeds it to ffi.cdef(). Enums only grow at the end
 * (above a *_COUNT sentinel, where an enum has one).
 * Kernel entry points for tests and benchmarks, and the CPU-dispatch hooks, are not API:
 * they are in tk_testing.h.
 */
#ifndef TOOLKIT_H
#define TOOLKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF-BEGIN */

/* ---- status ------------------------------------------------------------------------ */
typedef enum {
    TK_OK = 0,
    TK_ERR_INVALID = 1,      /* bad argument or malformed input */
    TK_ERR_IO = 2,           /* open/mmap/read failed */
    TK_ERR_NOMEM = 3,        /* allocation failed or would exceed a limit */
    TK_ERR_UNSUPPORTED = 4,  /* valid input this build does not handle */
    TK_ERR_STATE = 5         /* operation refused in the current state (memory unchanged) */
} tk_status;

const char * tk_last_error(void);
const char * tk_version(void);

/* ==== quantization (quants.c) ======================================================== */
/* `type` is a ggml type number (F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8,
 * Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14, IQ4_NL 20, IQ4_XS 23, BF16 30).
 * Quantizers are bit-exact ports of ggml's reference path (ggml_quantize_chunk with no
 * imatrix, llama.cpp 0c1e570); rows are independent, so any split into row bands gives
 * the same bytes.                                                                         */

/* 1 if `type` can be quantized to and dequantized from here, else 0. */
int tk_quant_type_supported(int type);
/* Bytes of one row of n_per_row elements of `type`; -1 if unsupported or not a block multiple. */
int64_t tk_quant_row_size(int type, int64_t n_per_row);
/* src: n elements of `type` (n a multiple of its block size) -> dst: float32[n]. */
tk_status tk_dequantize_row(int type, const void * src, float * dst, int64_t n);
/* src: float32[n_rows, n_per_row] -> dst: n_rows rows of tk_quant_row_size(type, n_per_row)
 * bytes; n_threads pthreads over contiguous runs of rows. */
tk_status tk_quantize_rows(int type, const float * src, void * dst, int64_t n_rows, int64_t n_per_row, int n_threads);
/* src: n_rows rows of `type` -> dst: float32[n_rows, n_per_row]. */
tk_status tk_dequantize_rows(int type, const void * src, float * dst, int64_t n_rows, int64_t n_per_row, int n_threads);
/* src: n_rows rows of src_type -> dst: n_rows rows of dst_type, through a one-row float32
 * scratch per thread (no band-sized float32 buffer); bytes equal dequantize + quantize. */
tk_status tk_convert_rows(int src_type, const void * src, int dst_type, void * dst,
                          int64_t n_rows, int64_t n_per_row, int n_threads);
/* The same with an importance matrix imatrix[n_per_row] (llama.cpp's imatrix, already divided
 * by its counts; NULL = none): ggml's quantize_row_*_impl for the types that use it. */
tk_status tk_convert_rows_imatrix(int src_type, const void * src, int dst_type, void * dst,
                                  int64_t n_rows, int64_t n_per_row, const float * imatrix, int n_threads);

/* ==== runtime: model description (filled by Python from the GGUF) =================== */
/* Python (toolkit.gguf_io + toolkit.arch.HParams) is the GGUF parser; it hands C this
 * description, and C mmaps the file and validates every tensor before use.            */

typedef enum {                 /* == toolkit.arch.LayerKind */
    TK_LAYER_MAMBA1 = 0,
    TK_LAYER_MAMBA2 = 1,
    TK_LAYER_ATTENTION = 2,
    TK_LAYER_GDN = 3,          /* gated delta net (mixer_gdn.c) */
    TK_LAYER_SHORTCONV = 4,    /* LFM2's double-gated short conv (mixer_shortconv.c) */
    TK_LAYER_NONE = 5,         /* no mixer: the block is x += ffn(attn_norm(x)) (Nemotron-H MLP / MoE layers) */
    TK_LAYER_PARALLEL = 6,     /* attention + Mamba-2 side by side on the same input (mixer_parallel.c, Falcon-H1) */
    TK_LAYER_ZAMBA2_SHARED = 7,/* Zamba2 hybrid layer: shared attention block + LoRA, then Mamba-2 (mixer_zamba2.c) */
    TK_LAYER_QSA = 8,          /* qwen4exp gated attention with the QSA block indexer (mixer_qsa.c) */
    TK_LAYER_ZAMBA_SHARED = 9, /* Zamba (v1) hybrid layer: shared attention block, then multi-head Mamba-1 (mixer_zamba.c) */
    TK_LAYER_LIGHTNING = 10,   /* MiniMax-Text-01's lightning attention (mixer_lightning.c) */
    TK_LAYER_RGLRU = 11,       /* RecurrentGemma's recurrent block: conv + RG-LRU, GeLU branch (mixer_rglru.c) */
    TK_LAYER_KDA = 12,         /* Kimi Delta Attention (mixer_kda.c) */
    TK_LAYER_MLA = 13,         /* multi-head latent attention, the latent cached (mixer_mla.c) */
    TK_LAYER_KIND_COUNT        /* not a kind: how many there are (a new kind goes above it) */
} tk_layer_kind;

typedef enum {                 /* == toolkit.arch.FFNKind */
    TK_FFN_NONE = 0,
    TK_FFN_DENSE = 1,
    TK_FFN_MOE = 2,
    TK_FFN_RELU2 = 3,          /* down(relu(up(x))^2), no gate (Nemotron-H MLP; ffn_relu2.c) */
    TK_FFN_GEGLU = 4,          /* down(gelu_tanh(gate x + bg) * (up x + bu)) + bd (RecurrentGemma; ffn_geglu.c) */
    TK_FFN_KIND_COUNT          /* not a kind: how many there are (a new kind goes above it) */
} tk_ffn_kind;

typedef enum {
    TK_ARCH_MAMBA = 0,
    TK_ARCH_MAMBA2 = 1,
    TK_ARCH_GRANITE_HYBRID = 2,
    TK_ARCH_JAMBA = 3,
    TK_ARCH_QWEN3NEXT = 4,
    TK_ARCH_QWEN35 = 5,
    TK_ARCH_QWEN35MOE = 6,
    TK_ARCH_LFM2 = 7,
    TK_ARCH_LFM2MOE = 8,
    TK_ARCH_NEMOTRON_H = 9,
    TK_ARCH_NEMOTRON_H_MOE = 10,
    TK_ARCH_FALCON_H1 = 11,
    TK_ARCH_ZAMBA2 = 12,
    TK_ARCH_QWEN4EXP = 13,
    TK_ARCH_ZAMBA = 14,
    TK_ARCH_OLMO_HYBRID = 15,
    TK_ARCH_LFM3 = 16,
    TK_ARCH_LARA_MINI = 17,
    TK_ARCH_MINIMAX_01 = 18,
    TK_ARCH_RECURRENT_GEMMA = 19,
    TK_ARCH_KIMI_LINEAR = 20,
    TK_ARCH_GLM5_NEXT = 21,
    TK_ARCH_BAILINGMOE3 = 22,
    TK_ARCH_COUNT              /* not an architecture: how many there are (a new one goes above it) */
} tk_arch;

typedef enum {                 /* == toolkit.arch.Norm: where a block's RMSNorms sit (tk_hparams.block.norm) */
    TK_NORM_PRE = 0,           /* x += f(norm(x)) */
    TK_NORM_POST = 1,          /* attention blocks x += norm(f(x)) (post_attention_norm, post_ffw_norm); others PRE */
    TK_NORM_SANDWICH = 2,      /* x += norm(f(norm(x))) */
    TK_NORM_HYPER = 3          /* hyper-connections (residual_hc.c): the block's mixers stand for the norms */
} tk_norm_place;

typedef enum {                 /* == toolkit.arch.Residual.c_id: how a branch joins (tk_hparams.block.residual) */
    TK_RESIDUAL_PLAIN = 0,     /* x += residual_scale f */
    TK_RESIDUAL_NORMED = 1,    /* x = alpha rmsnorm(x) + beta f(rmsnorm(x)), the factors per branch kind (hp.res) */
    TK_RESIDUAL_HC = 2         /* hyper-connection streams (residual_hc.c) */
} tk_residual;

/* HPARAMS-BEGIN: generated from toolkit/arch/fields.py by tools/gen_hparams.py; edit there */
/* tk_hparams.block: the block recipe (the architecture row's, toolkit/arch/table.py): where the norms sit,
 * how a branch joins the residual, the norm tensors' names (model.c binds, forward.c runs them) */
typedef struct {
    /* tk_norm_place: 0 pre-norm blocks; 1 attention blocks post-norm (x += norm(f(x)):
     * post_attention_norm, post_ffw_norm), the others pre-norm; 2 sandwich (both); 3 hyper-connections */
    int32_t norm;
    /* tk_residual: 0 x += residual_scale f(x); 1 alpha / beta per branch kind (res); 2 hyper-connections
     * (hc) [spec.c_residual] */
    int32_t residual;
    /* the FFN pre-norm's tensor after blk.N. (ffn_norm.weight; Qwen post_attention_norm.weight;
     * llama.cpp's falcon-h1 ffn_norm) [spec.ffn_norm] */
    const char * ffn_norm;
    /* the final RMSNorm's tensor (output_norm.weight; LFM2 token_embd_norm.weight) [spec.output_norm] */
    const char * output_norm;
} tk_hparams_block;

/* tk_hparams.ssm: recurrent sizes: Mamba-1/2, and the conv / width of the gated delta net, short conv,
 * RG-LRU and KDA (a GDN layer reads d_state = Dk, head_dim = Dv, n_group = Hk, n_head = Hv, d_inner = Hv
 * Dv, d_conv = K) */
typedef struct {
    int32_t d_conv;                /* causal conv kernel width K */
    int32_t d_inner;               /* recurrent width (expand * D) */
    int32_t d_state;               /* N, SSM state size */
    int32_t dt_rank;               /* Mamba-1 dt rank; Mamba-2 number of heads H */
    int32_t n_group;               /* G, Mamba-2 B/C groups */
    /* H (Mamba-2); Mamba-1: heads with their own x_proj / dt_proj (Zamba; 0 or 1: one) */
    int32_t n_head;
    int32_t head_dim;              /* P (Mamba-2) */
    int32_t dt_b_c_rms;            /* weightless RMS norm of dt, B, C (Falcon-Mamba) */
    /* epsilon of the Mamba-1 dt / B / C RMSNorms (dt_b_c_rms, dt_b_c_norms); 0: rms_eps */
    float dt_b_c_eps;
    /* Mamba-2 dt = min(max(softplus(dt + dt_bias), dt_min), dt_max) (HF's dt_limit: time_step_limit[0];
     * Zamba2 / Nemotron-H time_step_min); 0 = no floor */
    float dt_min;
    float dt_max;                  /* the Mamba-2 dt ceiling (HF time_step_limit[1]); 0 = none (HF's inf) */
    /* Mamba-2 gated norm: 1 y = rmsnorm(y) w * silu(z) (mamba_norm_before_gate); 0 y = rmsnorm(y *
     * silu(z)) w */
    int32_t norm_before_gate;
    /* act after the causal conv of the Mamba-1 / Mamba-2 / GDN / KDA mixers (HF hidden_act, Nemotron-H
     * mamba_hidden_act, Zamba hidden_mamba_act): TK_ACT_* as ffn_act, 0 silu (ssm.activation, ours) */
    int32_t act;
    /* Mamba-1 dt, B, C each through an RMSNorm with weights (Jamba; required tensors)
     * [spec.ssm_dt_b_c_norms] */
    int32_t dt_b_c_norms;
} tk_hparams_ssm;

/* tk_hparams.gdn: gated delta net (mixer_gdn.c) */
typedef struct {
    int32_t gate_act;              /* GDN gated norm's act(z): 0 silu, 1 sigmoid */
    float beta_scale;              /* GDN beta = sigmoid(b) * this (2: beta in (0, 2)); 0: 1 */
    float norm_eps;                /* epsilon of the GDN gated norm; 0: rms_eps */
    /* v-head h reads K-head h % Hk (tiled, qwen35 GGUFs); 0: h / (Hv/Hk) (grouped, qwen3next)
     * [spec.gdn_head_tiled] */
    int32_t head_tiled;
    /* GDN q / k / v from attn_q, attn_k, attn_v and ssm_conv1d_{q,k,v}; 0: attn_qkv, ssm_conv1d
     * [spec.gdn_qkv_apart] */
    int32_t qkv_apart;
} tk_hparams_gdn;

/* tk_hparams.attn: attention: heads, RoPE, gates, norms, sliding window (mixer_attention.c, memory_iswa.c) */
typedef struct {
    int32_t n_head;                /* query heads (also the RG-LRU gates' blocks and the lightning heads) */
    int32_t head_dim;              /* head dim */
    int32_t n_rot;                 /* rotated dims per head (NORM mode: adjacent pairs); 0 = none */
    float rope_freq_base;          /* RoPE base */
    int32_t use_rope;              /* RoPE on q / k */
    /* rope.scaling.type: 0 none, 1 linear (every pair's angle * freq_scale), 2 yarn (ramped between scaled
     * and unscaled over the pairs, cos/sin * 0.1 ln(1/freq_scale) + 1) */
    int32_t rope_scaling_type;
    float rope_freq_scale;         /* 1 / rope.scaling.factor (linear, yarn) */
    /* yarn: the pretraining context L (rope.scaling.original_context_length; absent: context_length) */
    int32_t rope_orig_ctx;
    /* yarn: the ramp starts at the pair turning beta_fast times over L (rope.scaling.yarn_beta_fast) */
    float rope_yarn_beta_fast;
    /* yarn: the ramp ends at the pair turning beta_slow times over L (rope.scaling.yarn_beta_slow) */
    float rope_yarn_beta_slow;
    /* the rotated dims' cos/sin * this (rope.scaling.attn_factor; HF's attention_factor over yarn's own
     * 0.1 ln(factor) + 1) */
    float rope_attn_factor;
    float scale;                   /* 0 -> 1/sqrt(head_dim) */
    /* W: a query at position i sees the keys j with i - W < j <= i on a sliding layer */
    int32_t n_swa;
    /* [n_layer] 1 = sliding (an attention layer; its KV cells keep only the window), or NULL */
    const int32_t * swa_layers;
    float rope_freq_base_swa;      /* RoPE base of the sliding-window layers; 0: rope_freq_base */
    /* > 0: the other attention layers' proportional NEOX RoPE rotates only the pairs (i, i + n_rot/2), i <
     * rope_prop_rot/2, at base^(-2i/n_rot); 0: every pair */
    int32_t rope_prop_rot;
    int32_t head_gate;             /* attn_gate [D, H]: head h's output * sigmoid(attn_gate x)_h (required) */
    /* RoPE on the sliding-window layers (swa_layers) only; the other attention layers NoPE
     * [spec.rope_swa_only] */
    int32_t rope_swa_only;
    int32_t rope_neox;             /* RoPE pairs (i, i + n_rot/2) (NEOX); 0: adjacent pairs (NORM) [spec.rope_neox] */
    /* attn_q rows per head [q_h (hd) | gate_h (hd)]; output * sigmoid(gate) [spec.attn_q_gate] */
    int32_t q_gate;
    /* attn_q_norm / attn_k_norm [hd] (required): RMSNorm of q, k per head [spec.attn_qk_norm] */
    int32_t qk_norm;
    /* with qk_norm: q / k RMSNorm over all heads at once (weights [H hd] / [Hkv hd])
     * [spec.attn_qk_norm_full] */
    int32_t qk_norm_full;
    /* attention layers have attn_output.bias (required) and attn_q/k/v.bias (optional, the three
     * together); 0: attention biases refused [spec.attn_bias] */
    int32_t bias;
} tk_hparams_attn;

/* tk_hparams.moe: routed experts (ffn_moe.c) */
typedef struct {
    int32_t n_expert;              /* experts */
    int32_t n_expert_used;         /* experts per token */
    /* routed experts' latent width Dl (HF moe_latent_size; 0: none): x -> ffn_latent_down [D, Dl] ->
     * experts in Dl -> ffn_latent_up [Dl, D] */
    int32_t latent_size;
    int32_t n_group;               /* expert groups (expert_group_count; <= 1: none) */
    int32_t topk_group;            /* groups kept per token (expert_group_used_count) */
    int32_t sigmoid;               /* s = sigmoid(logits); choose top-k of s + exp_probs_b; weights = s */
    /* with moe.sigmoid: weights / (sum of the k + weights_norm_eps) (expert_weights_norm) */
    int32_t weights_norm;
    /* with moe.softmax_topk: the k weights renormalised to sum 1 (the row's moe_renorm: Qwen, Lara-Mini,
     * MiniMax; off where expert_weights_norm is false: HF norm_topk_prob false) */
    int32_t renorm;
    /* added to the sum of the k weights before renormalising (HF: 1e-20 Nemotron-H, 1e-6 LFM2-MoE) */
    float weights_norm_eps;
    /* with moe.sigmoid: weights * this (expert_weights_scale, routed_scaling_factor) */
    float weights_scale;
    /* softmax over all experts then top-k, weights not renormalised (Jamba) unless moe.renorm; 0: top-k of
     * the logits then softmax over the k (Granite) [spec.moe_softmax_topk] */
    int32_t softmax_topk;
    /* experts and shared expert are down(relu(up(x))^2), no gate tensors [spec.moe_relu2] */
    int32_t relu2;
} tk_hparams_moe;

/* tk_hparams.ffn: SwiGLU clamps (GLM-5-Next; 0: none) */
typedef struct {
    float swiglu_clamp_exp;        /* routed experts (llama.cpp's per-layer swiglu_clamp_exp; HF swiglu_limit) */
    float swiglu_clamp_shexp;      /* shared experts and dense MLPs (swiglu_clamp_shexp) */
    /* act of the gate in act(gate x) * up x, dense MLPs and experts (HF hidden_act; the ungated
     * down(act(up x)) of Nemotron-H, the Zamba shared MLP, RecurrentGemma's MLP and y branch too): 0 silu,
     * 1 gelu (erf), 2 gelu_tanh, 3 relu, 4 relu2, 5 quick_gelu, 6 sigmoid, 7 tanh
     * (feed_forward.activation, ours; absent: the row's ffn_act) */
    int32_t act;
} tk_hparams_ffn;

/* tk_hparams.zamba: Zamba / Zamba2 shared blocks (mixer_zamba.c, mixer_zamba2.c) */
typedef struct {
    int32_t n_shared_block;        /* M shared blocks: the j-th hybrid layer runs shared.{j % M} */
} tk_hparams_zamba;

/* tk_hparams.idx: sparse attention indexer: QSA (mixer_qsa.c) and DSA (dsa.c) */
typedef struct {
    int32_t n_head;                /* indexer query heads (attention.indexer.head_count) */
    int32_t head_dim;              /* indexer head dim (attention.indexer.key_length) */
    int32_t top_k;                 /* indexer budget B in tokens (attention.indexer.top_k) */
    const int32_t * compress_ratios; /* [n_layer] QSA block size r per layer (attention.compress_ratios), or NULL */
} tk_hparams_idx;

/* tk_hparams.dsa: GLM-5-Next's DSA k-pool indexer (dsa.c); heads, head dim and budget are idx's */
typedef struct {
    int32_t kpool;                 /* kp tokens per pool (attention.indexer.kpool) */
    /* the incomplete tail pool is always attended (attention.indexer.kpool_select_tail) */
    int32_t select_tail;
    float k_norm_eps;              /* the indexer key LayerNorm's epsilon (attention.layer_norm_epsilon) */
    /* [n_layer] 1: the layer runs its own indexer, 0: it reuses the last one's (attention.indexer.types);
     * NULL: no DSA */
    const int32_t * full;
} tk_hparams_dsa;

/* tk_hparams.ple: qwen4exp's per-layer n-gram embedding (ple.c) */
typedef struct {
    /* [n_layer] PLE module of the layer (0, 1, ... in layer order) or -1; NULL: no PLE */
    const int32_t * index;
    int32_t ngram_size;            /* n (ple.ngram_size) */
    int32_t heads_per_ngram;       /* ple.heads_per_ngram; NH = (n - 1) heads_per_ngram table heads */
    int32_t conv_kernel;           /* Kp (ple.conv_kernel) */
    int32_t eos_token;             /* ple.eos_token_id: cuts the n-gram context */
    int32_t n_module;              /* PLE layers (modules) */
    const uint64_t * consts;       /* per module: multipliers [n], head offsets [NH], head vocab sizes [NH] */
} tk_hparams_ple;

/* tk_hparams.hc: hyper-connections (residual_hc.c): count > 1 qwen4exp's low-rank mix, sinkhorn_iters > 0
 * GLM-5-Next's mHC */
typedef struct {
    int32_t count;                 /* hyper-connection streams (0: the plain residual) */
    /* Sinkhorn iterations (hyper_connection.sinkhorn_iterations, HF hc_sinkhorn_iters) */
    int32_t sinkhorn_iters;
    float eps;                     /* HF hc_eps (hyper_connection.epsilon) */
} tk_hparams_hc;

/* tk_hparams.kda: Kimi Delta Attention (mixer_kda.c): n heads of D (key dim = value dim), C = n D
 * channels; d_conv is ssm's */
typedef struct {
    int32_t n_head;                /* n */
    int32_t head_dim;              /* D */
    float l2_eps;                  /* epsilon of the q / k l2-norm: x (sum x^2 + eps)^-1/2 (HF 1e-6) */
    /* 0: g = ssm_a softplus(u) (kimi; ssm_a = -exp(A_log)); < 0: the bounded gate g = lb sigmoid(-ssm_a u)
     * (glm5-next's storage of ssm_a) */
    float gate_lower_bound;
    int32_t a_positive;            /* ssm_a holds +exp(A_log) (bailingmoe3; kimi-linear, glm5-next: -exp) */
} tk_hparams_kda;

/* tk_hparams.mla: multi-head latent attention (mixer_mla.c), attn.n_head heads */
typedef struct {
    int32_t q_lora_rank;           /* rq: q = attn_q_b rmsnorm(attn_q_a x); 0: q = attn_q x */
    int32_t kv_lora_rank;          /* rkv: the latent c cached per token */
    int32_t dn;                    /* nope head dim */
    int32_t dr;                    /* rope head dim (the rope part shared by the heads) */
    int32_t dv;                    /* value head dim */
    float norm_eps;                /* epsilon of the q_a / kv_a RMSNorms */
    int32_t rope;                  /* RoPE on q_rot and k_rot (NORM: adjacent pairs, attn.rope_freq_base) */
} tk_hparams_mla;

/* tk_hparams.res: block.residual 1 (MiniMax-Text-01): x = alpha * rmsnorm(x) + beta * branch(rmsnorm(x)),
 * the factors per branch kind: a recurrent mixer (no KV cache), an attention mixer, the FFN */
typedef struct {
    float alpha_rec;               /* alpha of a recurrent mixer's branch (MiniMax: lightning) */
    float alpha_attn;              /* alpha of an attention mixer's branch */
    float alpha_ffn;               /* alpha of the FFN branch */
    float beta_rec;                /* beta of a recurrent mixer's branch */
    float beta_attn;               /* beta of an attention mixer's branch */
    float beta_ffn;                /* beta of the FFN branch */
} tk_hparams_res;

typedef struct {
    int32_t arch;                  /* tk_arch (the row's c_id) [spec.c_id] */
    int32_t n_vocab;               /* vocabulary size */
    int32_t n_embd;                /* D, model width */
    int32_t n_layer;               /* L, blocks run (block_count - nextn_predict_layers) */
    float rms_eps;                 /* epsilon of the RMSNorms */
    const int32_t * layer_kinds;   /* [n_layer] tk_layer_kind */
    const int32_t * ffn_kinds;     /* [n_layer] tk_ffn_kind */
    const int32_t * n_head_kv;     /* [n_layer] KV heads, 0 on recurrent layers */
    float embedding_scale;         /* embeddings * this */
    float residual_scale;          /* each branch * this before it joins the residual */
    float logit_scale;             /* logits are divided by this */
    float logit_softcap;           /* > 0: logits = cap tanh(logits / cap) (final_logit_softcapping); 0: none */
    tk_hparams_block block;
    tk_hparams_ssm ssm;
    tk_hparams_gdn gdn;
    tk_hparams_attn attn;
    tk_hparams_moe moe;
    tk_hparams_ffn ffn;
    tk_hparams_zamba zamba;
    tk_hparams_idx idx;
    tk_hparams_dsa dsa;
    tk_hparams_ple ple;
    tk_hparams_hc hc;
    tk_hparams_kda kda;
    tk_hparams_mla mla;
    tk_hparams_res res;
} tk_hparams;
/* HPARAMS-END */

typedef struct {
    const char * name;         /* GGUF tensor name, NUL-terminated */
    uint64_t offset;           /* absolute byte offset of the data in the file */
    int32_t  type;             /* ggml type id */
    int32_t  n_dims;           /* 1..4 */
    int64_t  ne[4];            /* ggml order: ne[0] fastest; unused dims 1 */
} tk_tensor_desc;

typedef struct tk_model tk_model;

/* tk_model_params.repack: which mat-mul weights tk_model_load re-lays for the repacked GEMM
 * kernels (quants/repack.h) */
typedef enum {
    TK_REPACK_OFF = 0,         /* none: every mat-mul reads the mapped file */
    TK_REPACK_AUTO = 1,        /* the types whose re-laid form wins at this kernel level, prompt and
                                  generation both (repack.c tk_repack_auto; `toolkit run`'s default) */
    TK_REPACK_ALL = 2,         /* every type with a repacked kernel at this level (tk_repack_fast) */
} tk_repack_mode;

/* tk_model_params.bf16_gemm: the instruction of the re-laid BF16 GEMM at the avx512 level */
typedef enum {
    TK_BF16_GEMM_DEFAULT = 0,  /* the process default: the machine's choice (cpu.c), or tk_cpu_set_bf16dot's */
    TK_BF16_GEMM_FMA = 1,      /* FMA on weights widened to fp32 */
    TK_BF16_GEMM_DPBF16 = 2,   /* VDPBF16PS (AVX512_BF16 machines; FMA elsewhere) */
} tk_bf16_gemm;

/* What a load does besides binding the tensors; all zero (or params NULL): no repacking. */
typedef struct {
    int32_t repack;            /* tk_repack_mode */
    int32_t bf16_gemm;         /* tk_bf16_gemm */
} tk_model_params;

/* mmap `path` read-only and bind/validate the tensors the architecture needs; then re-lay
 * the weights `params` asks for (NULL: none).
 * TK_ERR_INVALID names a missing/misshaped/out-of-range tensor or a bad parameter;
 * TK_ERR_UNSUPPORTED a type. */
tk_status tk_model_load(const char * path, const tk_hparams * hp, const tk_tensor_desc * tensors,
                        int64_t n_tensors, const tk_model_params * params, tk_model ** out);
void tk_model_free(tk_model * model);
/* Weights re-laid for the GEMM kernels at load (quants/repack.h; tk_model_params.repack): the
 * tensors re-laid, the bytes they take (heap, besides the mmap'd file), the milliseconds
 * re-laying took, and the bytes of the mapped file released after it (whole pages that only
 * re-laid tensors cover, MADV_DONTNEED).  All 0 without repacking. */
typedef struct {
    int32_t n_tensors;
    int64_t bytes;
    double  ms;
    int64_t released;
} tk_repack_info;
void tk_model_repack_info(const tk_model * model, tk_repack_info * out);
/* What a load would re-lay in repack `mode` (tk_repack_mode) at kernel `level` (tk_cpu_level()'s
 * values), whatever this model's load did: the tensors and their bytes (ms and released 0), by
 * the rule the load applies (model.c repack_plan, over the model's bound weights). */
void tk_model_repack_plan(const tk_model * model, int mode, int level, tk_repack_info * out);

/* ==== runtime: context, batches, decode ============================================== */

typedef struct {
    int32_t n_ctx;             /* KV cells (attention layers only) */
    int32_t n_seq_max;         /* sequences, 1..64 */
    int32_t n_ubatch;          /* max tokens per micro-batch */
    int32_t n_threads;         /* 0 = default */
    /* Tokens from which one sequence's run in a ubatch takes a chunked form instead of the
     * recurrence: Mamba-2's SSD (ssd.c), the gated delta rule (gdn.c), KDA (gdn.c) and
     * lightning attention (lightning.c).  0: the process default (tk_ssd_threshold() ...,
     * tk_testing.h); TK_CHUNK_NEVER: always the recurrence; else at least 1. */
    int32_t ssd_min, gdn_min, kda_min, lightning_min;
    /* The ggml type of the KV cache's K rows and V rows (llama.cpp's -ctk / -ctv, its block
     * layouts): TK_KV_F32 (0, the default: exact), TK_KV_F16, TK_KV_BF16, TK_KV_Q8_0, TK_KV_Q4_0.
     * A token's K and V are converted once as they are stored (ggml's from_float of the type:
     * fp32_to_fp16 / fp32_to_bf16 rounding, quantize_row_q8_0_ref / q4_0_ref); attention reads
     * the rows back per chunk.  TK_ERR_INVALID for another id; TK_ERR_UNSUPPORTED for a block
     * type on heads that are not a whole number of blocks.  MLA (Kimi-Linear, Ling 3, GLM-5-Next)
     * keeps one latent row [c | k_rot] of kv_lora_rank + rope values per cell in type_k (a block
     * type needs that width a multiple of 32) and no V rows: type_v stores nothing there.  DSA's
     * indexer keys (the cells' third array) stay float32. */
    int32_t type_k, type_v;
} tk_context_params;
enum { TK_KV_F32 = 0, TK_KV_F16 = 1, TK_KV_Q4_0 = 2, TK_KV_Q8_0 = 8, TK_KV_BF16 = 30 };   /* ggml_type ids */

enum { TK_CHUNK_NEVER = -1 };

typedef struct tk_context tk_context;

tk_status tk_context_new(tk_model * model, const tk_context_params * params, tk_context ** out);
void tk_context_free(tk_context * ctx);

typedef struct {
    int32_t n_tokens;
    const int32_t * token;     /* [n_tokens] */
    const int32_t * pos;       /* [n_tokens]; per sequence consecutive, starting at seq_pos_max+1 */
    const int32_t * seq_id;    /* [n_tokens] in [0, n_seq_max) */
    const int8_t  * logits;    /* [n_tokens] 1 = write this token's logits */
    int32_t flags;             /* TK_BATCH_SNAPSHOTS, or 0 */
    /* MTP / NextN drafts (layers/mtp.c).  embd: [n_tokens, n_embd] the hidden state h
     * each token's MTP step reads (required by an MTP block's model, refused by others);
     * hidden_out: [n_tokens, n_embd] or NULL, filled with each token's final hidden state, the
     * output_norm'd vector the output head reads (what an MTP step takes as h) */
    const float * embd;
    float * hidden_out;
} tk_batch;
/* With a speculative window (tk_context_set_spec_window): keep the per-token states of this
 * call's rows of at most k + 1 tokens (a verify call, a draft model's step), and take no
 * end-of-call checkpoint for them.  A call without it (a prompt chunk) keeps none, runs the
 * kernels and takes the checkpoints it would without a window. */
#define TK_BATCH_SNAPSHOTS 1

/* Run the batch; logits_out: [n_out, n_vocab] float32 for the flagged tokens in batch order.
 * The batch is checked whole before the memory changes; if the run then fails or is
 * aborted, every sequence of the batch is removed from the memory (restart at position 0). */
tk_status tk_decode(tk_context * ctx, const tk_batch * batch, float * logits_out);
/* Ask a running tk_decode (on another thread) to stop at the next layer: it returns
 * TK_ERR_STATE "decode aborted".  tk_decode clears the request when it starts. */
void tk_context_abort(tk_context * ctx);
int32_t tk_n_vocab(const tk_model * model);

/* ==== runtime: memory (kv / recurrent / hybrid) ====================================== */
/* p1 < 0 means "to the end"; seq < 0 means every sequence (seq_rm only).
 * seq_rm: *removed = 0 and nothing changes when a recurrent state would be cut: a tail
 * [p0, end) with no checkpoint before p0 (see below).  A range ending before the sequence's
 * last token is removed from the KV cache and leaves a recurrent state as it is (llama.cpp's
 * hybrid context shift; memory_rs.c).                                                  */
tk_status tk_memory_seq_rm(tk_context * ctx, int32_t seq, int32_t p0, int32_t p1, int32_t * removed);
tk_status tk_memory_seq_cp(tk_context * ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
tk_status tk_memory_seq_keep(tk_context * ctx, int32_t seq);
tk_status tk_memory_seq_pos_min(tk_context * ctx, int32_t seq, int32_t * pos);
tk_status tk_memory_seq_pos_max(tk_context * ctx, int32_t seq, int32_t * pos);
void      tk_memory_clear(tk_context * ctx);

/* ==== memory hierarchy: checkpoints, position shift, state files (state.c, memory_*.c) ==== */
/* Recurrent checkpoints: up to n_per_seq snapshots per sequence, taken at the end of every
 * decode call that feeds a sequence more than one token, whenever pos+1 is a multiple of
 * `every` (0: off; ubatches are cut there) and on tk_memory_checkpoint; when full, the one
 * whose removal leaves the smallest gap is replaced (ties: the oldest).  Changing the
 * setting drops existing snapshots.  With a snapshot at a
 * position < p0, tk_memory_seq_rm(seq, p0, -1) restores it (KV cells after it go too) and
 * the sequence ends at the snapshot: seq_pos_max tells the caller where to re-feed from. */
tk_status tk_memory_set_checkpoints(tk_context * ctx, int32_t n_per_seq, int32_t every);
tk_status tk_memory_checkpoint(tk_context * ctx, int32_t seq);
/* positions of seq's snapshots, ascending: the first min(n, cap) into pos; n = how many */
tk_status tk_memory_checkpoints(tk_context * ctx, int32_t seq, int32_t * pos, int32_t cap, int32_t * n);
/* positions [p0, p1) of seq += delta (cached K re-rotated by delta in the model's RoPE mode; a
 * recurrent state's position bookkeeping and its checkpoints in the range move); *done = 0 and
 * nothing changes when refused (a KV cell shared with another sequence, a negative or colliding
 * position, a state's last position before its first). */
tk_status tk_memory_seq_add(tk_context * ctx, int32_t seq, int32_t p0, int32_t p1, int32_t delta, int32_t * done);

typedef struct {
    uint64_t kv_bytes;         /* K and V of the attention layers, n_ctx cells */
    uint64_t recurrent_bytes;  /* conv + SSM states of the recurrent layers, n_seq_max cells */
    uint64_t checkpoint_bytes; /* n_seq_max x checkpoints x one state */
    uint64_t compute_bytes;    /* float scratch of the forward pass */
    uint64_t draft_bytes;      /* speculative window: n_seq_max x (K+1) x one state (tk_context_set_spec_window) */
    uint64_t kv_k_bytes, kv_v_bytes;   /* kv_bytes split: K rows (of type_k, and the float32 indexer keys), V rows (of type_v) */
} tk_memory_report;
tk_status tk_context_memory(tk_context * ctx, tk_memory_report * report);
/* Make the memory tk_context_memory reports resident now (KV cells, recurrent states,
 * checkpoints, the speculative window as set so far), contents unchanged: the cells are
 * allocated lazily (untouched pages), so RSS otherwise rises towards the report as sequences
 * first reach new cells.  `serve` calls it at start-up, as llama.cpp clears its KV buffer.
 * Not during a decode on ctx. */
tk_status tk_context_prefault(tk_context * ctx);
/* The report tk_context_memory would give for a context of `model` made with `params`, then
 * given n_checkpoints per sequence (tk_memory_set_checkpoints) and a speculative window of
 * draft_window tokens with spec_flags (tk_context_set_spec_window_ex), without allocating any of
 * it (context.c; the layer kinds and the memories give the sizes).  The arguments are refused as
 * those calls refuse them; the machine's RAM is not checked. */
tk_status tk_context_memory_estimate(const tk_model * model, const tk_context_params * params, int32_t n_checkpoints,
                                     int32_t draft_window, uint32_t spec_flags, tk_memory_report * report);

/* State blobs (layout in state.c): seq = -1 the whole context, else one sequence (read back
 * into any sequence id).  tk_state_read checks the whole blob first (magic, version, model
 * fingerprint, sizes, CRC-32, coherent positions, room) and changes nothing when it fails. */
tk_status tk_state_size(tk_context * ctx, int32_t seq, uint64_t * size);
tk_status tk_state_write(tk_context * ctx, int32_t seq, uint8_t * buf, uint64_t cap, uint64_t * written);
tk_status tk_state_read(tk_context * ctx, int32_t seq, const uint8_t * buf, uint64_t size);
/* Speculative decoding (partial rollback of recurrent state): with k > 0 the recurrent
 * cache keeps, per sequence, a snapshot of every recurrent piece after each of the last
 * k + 1 tokens decoded in ubatch rows of at most k + 1 tokens (a verify batch; a longer
 * run, such as a prompt, keeps none), in a ring of k + 1 slots per sequence (n_seq_max x
 * (k + 1) x one state, the report's draft_bytes).  tk_memory_seq_rm(seq, p, -1) with the
 * state after position p - 1 in the ring then restores it exactly (no re-feed: seq_pos_max
 * is p - 1) and drops the KV cells >= p; a p whose state is not kept falls back to the
 * checkpoints, else is refused as before.  Rows that keep snapshots run the token-by-token
 * recurrence (the same bits as one-token decodes).  The ring is not part of state blobs:
 * reading one, a context shift (seq_add) or a removal inside the history drops the ring of
 * the sequences it touches.  k = 0 frees it; TK_ERR_INVALID unless 0 <= k <= 256;
 * TK_ERR_UNSUPPORTED for a model with a recurrent piece its kind does not snapshot per token
 * (tk_rs_piece.snap 0).  A model without recurrent layers accepts any k and keeps nothing. */
tk_status tk_context_set_spec_window(tk_context * ctx, int32_t k);
/* tk_context_set_spec_window with flags.  TK_SPEC_NO_LAST: no snapshot of the state after the
 * last token a decode call gives a sequence (the sequence's cell holds that state), for a
 * verifying target, which rolls back only inside its latest call and keeps at least its first
 * token: a verify call of n tokens then copies n - 1 states, a call without drafts none.  A
 * seq_rm back to the end of an earlier call then falls back to the checkpoints; a draft
 * model's context, which rolls back to the end of earlier calls, keeps the default (0).  The
 * ring then holds k states per sequence, not k + 1 (the report's draft_bytes). */
#define TK_SPEC_NO_LAST 1
tk_status tk_context_set_spec_window_ex(tk_context * ctx, int32_t k, uint32_t flags);
/* ==== end memory hierarchy ==== */

/* CDEF-END */

#ifdef __cplusplus
}
#endif
#endif /* TOOLKIT_H */
