/* tk_testing.h: what the tests and benchmarks reach beyond the public API (toolkit.h):
 * kernel entry points (ops.c, ssm.c, ssd.c) and the run-time CPU-dispatch hooks (cpu.c).
 *
 * The block between CDEF-BEGIN and CDEF-END is plain declarations (no preprocessor lines):
 * the cffi builder (_build.py) feeds it to ffi.cdef() after toolkit.h's, so these names are
 * in the Python module's `lib` like the API's.  Not a stable interface. */
#ifndef TK_TESTING_H
#define TK_TESTING_H

#include <stdint.h>

#include "toolkit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF-BEGIN */
/* ==== kernels (scalar reference; exposed for kernel tests and benchmarks) ============ */
/* Contracts and formula sources in ops.c / ssm.c. All arrays float32, row-major.  The
 * runtime calls them too (tk_internal.h includes this header). */
float tk_fp16_to_fp32(uint16_t h);
float tk_bf16_to_fp32(uint16_t h);
/* y[t][r] = sum_k W[r][k] x[t][k]; W: M rows of K elements of ggml `type` at w; x: [n_tok, K]; y: [n_tok, M] */
tk_status tk_mat_mul(int type, const void * w, int64_t K, int64_t M, const float * x, int64_t n_tok, float * y);
/* tk_mat_mul with W re-laid first (quants/repack.h: Q8_0, Q4_K, Q6_K and BF16; another type:
 * TK_ERR_UNSUPPORTED), the repacked kernel of the current level (scalar: the reference) */
tk_status tk_mat_mul_repacked(int type, const void * w, int64_t K, int64_t M, const float * x, int64_t n_tok, float * y);
/* quants/repack.h: 1 when `level` has a repacked kernel for `type` (re-laid at load with
 * TK_REPACK_ALL), 1 when its re-laid form wins at that level (re-laid with TK_REPACK_AUTO),
 * and the bytes of one re-laid matrix of M rows of K values (0: no repacked form) */
int tk_repack_fast(int type, int level);
int tk_repack_auto(int type, int level);
size_t tk_repack_matrix_bytes(int type, int64_t K, int64_t M);
/* 1 when that level's repacked kernel of `type` reads fp32 activations (BF16's FMA kernels) */
int tk_repack_act_f32(int type, int level);
void tk_rms_norm(const float * x, const float * w, float eps, int64_t n, float * y);
/* y[i] = y[i] / (1 + exp(-y[i])) in place, n floats, at the current kernel level
 * (scalar: expf; AVX2: a vector exp within a few ulp of it). */
void tk_silu_row(float * y, int64_t n);
void tk_rope_norm(float * x, int32_t n_head, int32_t head_dim, int32_t n_rot, int32_t pos, float base);
void tk_ssm_conv(const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, int32_t d_conv,
                 const float * w, const float * b, float * state, float * y, int64_t y_stride);
void tk_ssm_scan_mamba1(float * s, const float * x, const float * dt, const float * A, const float * B,
                        const float * C, const float * D, const float * z, int32_t d_inner, int32_t d_state,
                        float * y);
void tk_ssm_scan_mamba2(float * s, const float * x, const float * dt, const float * A, const float * B,
                        const float * C, const float * D, int32_t n_head, int32_t head_dim, int32_t d_state,
                        int32_t n_group, float * y);

/* ==== run-time CPU dispatch (cpu.c) ================================================== */
/* Kernel levels.  On x86-64, lowest first: a level is used only if the CPU advertises its
 * instructions (cpuid) AND the OS saves the register state they need (xgetbv: XMM|YMM for
 * AVX2, plus opmask|ZMM for AVX-512).  AMX is never used.  On aarch64 the levels are
 * scalar and NEON (Advanced SIMD, part of every AArch64 CPU; checked in the auxiliary
 * vector's HWCAP_ASIMD).                                                                */
typedef enum {
    TK_CPU_SCALAR = 0,         /* plain C, every machine */
    TK_CPU_AVX2 = 1,           /* x86-64 AVX2 + FMA + F16C (with AVX-VNNI: Q8_0 / k-quant
                                  prompts in qdot_avxvnni.c, the same bits) */
    TK_CPU_AVX512 = 2,         /* x86-64 AVX-512 F + BW + VL + VNNI (kernels: the AVX2 ones but
                                  for Q8_0 / k-quant prompts, qdot_*avx512.c: the same bits;
                                  BF16 weights with AVX512_BF16: qdot_bf16_avx512.c) */
    TK_CPU_NEON = 3            /* aarch64 Advanced SIMD (kernels/arm/ops_neon.c, quants/arm/qdot_neon.c) */
} tk_cpu_level_t;

/* The level kernels run at now: the highest the machine supports, capped by tk_cpu_set_level
 * (the library reads no environment: toolkit.binding.cpu applies TOOLKIT_CPU through
 * tk_cpu_set_level and tk_cpu_set_avxvnni when it loads the library). */
int tk_cpu_level(void);
/* Highest level this machine supports (ignores tk_cpu_set_level). */
int tk_cpu_detected(void);
/* Cap the level (tests, benchmarks): returns the level now in force: on x86-64
 * min(level, detected) for an x86-64 level; on aarch64 NEON if asked for and detected;
 * scalar for any other level.
 * Not to be called while another thread is decoding. */
int tk_cpu_set_level(int level);
/* "scalar", "avx2", "avx512", "neon"; "?" for anything else. */
const char * tk_cpu_level_name(int level);
/* 1 when the machine has AVX512_BF16 with the OS's ZMM state (cpuid.(7,1):EAX bit 5; ignores
 * the level cap).  The BF16 x BF16 kernel (qdot_bf16_avx512.c) runs only at the level
 * TK_CPU_AVX512 on such a machine, so capping the level at avx2 turns it off with the rest. */
int tk_cpu_has_avx512bf16(void);
/* 1 when the machine has AVX-VNNI (cpuid.(7,1):EAX bit 4: VEX-encoded vpdpbusd / vpdpwssd on
 * 256 bits, e.g. Alder Lake, Zen 5) with the avx2 level (ignores the level cap).  A sub-feature
 * of the avx2 level: there the Q8_0 / k-quant prompt kernels of qdot_avxvnni.c replace
 * the AVX2 ones (the same bits).  In force while the level is TK_CPU_AVX2 and it is not
 * turned off by tk_cpu_set_avxvnni(0) (TOOLKIT_CPU=avx2-novnni); at avx512 the AVX-512
 * kernels run instead. */
int tk_cpu_has_avxvnni(void);
/* Turn the AVX-VNNI kernels on (on != 0, where the machine has them) or off (tests, A/B
 * benchmarks); returns 1 when they are now wanted.  Not while another thread decodes. */
int tk_cpu_set_avxvnni(int on);
/* 1 when the AVX-VNNI kernels are on (the machine has them, not turned off); they run while
 * the level is TK_CPU_AVX2. */
int tk_cpu_avxvnni(void);
/* The process default of the repacked BF16 GEMM's instruction (repack.h, BF16 weights at
 * avx512; a model loaded with tk_model_params.bf16_gemm TK_BF16_GEMM_DEFAULT takes it):
 * 1 = VDPBF16PS on bf16 activations (the machine's choice on AMD CPUs with AVX512_BF16), 0 =
 * FMA on the weights widened to fp32 against fp32 activations (elsewhere; also what avx2 runs).
 * tk_cpu_set_bf16dot sets it (tests; 1 only with AVX512_BF16), returning the choice now in
 * force.  Not while another thread decodes. */
int tk_cpu_set_bf16dot(int on);
int tk_cpu_bf16dot(void);
/* The activation type (ggml type id) a mat-mul with `type` weights uses at kernel level
 * `level` (ggml_types.c tk_type_vec_dot_type): F32 (0) for the float kernels, BF16 (30)
 * for BF16 weights at TK_CPU_AVX512 with AVX512_BF16, the integer types' Q8_*; -1: none. */
int tk_type_vec_dot_type_at(int type, int level);
/* Space-separated features found, e.g. "avx2 fma f16c avx512f avx512bw avx512vnni";
 * "os-ymm"/"os-zmm" when the OS saves those registers. */
const char * tk_cpu_features(void);

/* ==== Mamba-2 chunked scan (ssd.c) =================================================== */
/* Runs of at least this many tokens of one sequence in a ubatch take the chunked SSD form
 * (chunks of 64 tokens) instead of the token-by-token recurrence; 0 = never.  This is the
 * process default a context takes when its tk_context_params.ssd_min is 0: the measured
 * crossover (ssd.c TK_SSD_MIN_DEFAULT).  tk_ssd_set_threshold(n >= 0) overrides it; n < 0
 * goes back to TK_SSD_MIN_DEFAULT.  Returns the threshold in force.
 * The path changes float rounding: results are bit-identical across ubatch splits when
 * every split takes the same path (and, for SSD, splits at multiples of 64 tokens). */
int tk_ssd_threshold(void);
int tk_ssd_set_threshold(int n);
/* n_tok tokens of one sequence through the Mamba-2 scan (contract in ssm.c,
 * tk_ssm_mamba2_run), on n_threads threads (heads split between them); the SSD workspace
 * is allocated for the call. */
tk_status tk_ssm_mamba2_seq(float * s, const float * xBC, int64_t xbc_stride, const float * dt, int64_t dt_stride,
                            const float * A, const float * D, int32_t n_tok, int32_t n_head, int32_t head_dim,
                            int32_t d_state, int32_t n_group, float * y, int64_t y_stride, int n_threads);

/* ==== gated delta rule (gdn.c) ======================================================= */
/* One value head of one sequence over n_tok tokens (ref: Yang, Kautz, Hatamizadeh 2024,
 * "Gated Delta Networks", eq. (10); transformers modeling_qwen3_next.py
 * torch_recurrent_gated_delta_rule; llama.cpp ggml-cpu ops.cpp gated_delta_net):
 *   S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = S^T q_t
 * S is Dk x Dv (key index i, value index j), stored as llama.cpp stores it: value row j
 * holds S[:, j], i.e. element (i, j) at S[j * dk + i].  q must already be l2-normed and
 * scaled by 1/sqrt(Dk), k l2-normed (the caller does both).  g_t <= 0 is the log decay.
 * Rows: q + t*q_stride [dk], k + t*k_stride [dk], v + t*v_stride [dv], o + t*o_stride [dv];
 * g[t*gb_stride], beta[t*gb_stride].  o may be v itself (same pointer and stride: every
 * v_t[j] is read before o_t[j] is written); it must not overlap q, k or anything else.
 * work: tk_gdn_work_floats(dk, dv) floats, used by the chunked form only (NULL: tk_gdn_run
 * takes the recurrence whatever n_tok).
 *
 * Kimi Delta Attention (KDA: the per-key-channel decay; ref: transformers
 * modeling_kimi_linear.py recurrent_kimi_delta_attention, docs/specs/kda-family.md §2.1,
 * modeling_kimi_linear.py:449-462; llama.cpp ggml-cpu ops.cpp gated_delta_net, its KDA branch
 * ops.cpp:11231-11240): when gk != NULL, gk + t*gk_stride holds dk floats, the
 * log decay g_t[i] <= 0 of key channel i, and replaces the scalar g (then unread, may be
 * NULL):
 *   S <- Diag(exp(g_t)) S  (key row i of S scaled by exp(g_t[i]));  then as above
 * i.e. S_t = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T.  In the
 * stored layout every value row j is scaled element-wise: S[j*dk + i] *= exp(g_t[i]).
 * With gk, work is tk_kda_work_floats(dk, dv) floats, and the chunked form's threshold is
 * tk_kda_threshold().  An initialiser that leaves gk out (positional or designated) gets
 * NULL: the scalar-decay GDN, bit for bit as before these fields. */
typedef struct {
    int32_t n_tok, dk, dv;
    const float * q; int64_t q_stride;
    const float * k; int64_t k_stride;
    const float * v; int64_t v_stride;
    const float * g; const float * beta; int64_t gb_stride;
    float * S;
    float * o; int64_t o_stride;
    float * work;
    const float * gk; int64_t gk_stride;    /* KDA: [n_tok][dk] log decays at gk + t*gk_stride, or NULL */
    int32_t min_chunk;         /* tk_gdn_run's threshold: 0 the process default (tk_gdn_threshold(),
                                  tk_kda_threshold() with gk), TK_CHUNK_NEVER never, else n >= 1
                                  (the context's tk_context_params.gdn_min / kda_min) */
} tk_gdn_head;
/* The token-by-token recurrence at the current CPU level (scalar, AVX2+FMA; with gk also
 * AVX-512).  At a given level its bits do not depend on how a run is split over calls (n
 * calls of one token give the bits of one call of n). */
void tk_gdn_recurrent(const tk_gdn_head * h);
/* The chunked form (chunks of 64) when n_tok >= the threshold > 0 (tk_gdn_threshold(), or
 * tk_kda_threshold() with gk) and work is given, else tk_gdn_recurrent.  The two agree to
 * float rounding (GDN ~1e-7, KDA < 1e-6 relative); the chunked form's bits depend on where
 * its chunks start, so on how a run is split over calls. */
void tk_gdn_run(const tk_gdn_head * h);
/* floats of work the chunked form needs for heads of these dims (0 if dk or dv <= 0):
 * the state transposed, Dk x Dv, plus 64-token chunk buffers (257 KiB at Dk = Dv = 128) */
int64_t tk_gdn_work_floats(int32_t dk, int32_t dv);
/* Runs of at least this many tokens take the chunked form; 0 = never.  The process default
 * (a context with tk_context_params.gdn_min 0 takes it) is gdn.c's measured
 * TK_GDN_MIN_DEFAULT; tk_gdn_set_threshold(n >= 0) overrides it and returns n; (n < 0)
 * goes back to TK_GDN_MIN_DEFAULT and returns it.  Like tk_ssd_*. */
int tk_gdn_threshold(void);
int tk_gdn_set_threshold(int n);
/* KDA (gk != NULL): floats of work its chunked form needs for heads of these dims (0 if dk
 * or dv <= 0): the state transposed plus 64-token chunk buffers (404 KiB at Dk = Dv = 128).
 * Its own threshold: runs of at least tk_kda_threshold() tokens take the chunked form
 * (docs/specs/kda-family.md §2.2; transformers modeling_kimi_linear.py chunk_kimi_delta_attention);
 * 0 = never.  The process default (tk_context_params.kda_min 0) is gdn.c's measured
 * TK_KDA_MIN_DEFAULT (0: the chunked form never won on the machine measured);
 * tk_kda_set_threshold(n >= 0) overrides it and returns n; (n < 0) goes back to
 * TK_KDA_MIN_DEFAULT and returns it.  Independent of tk_gdn_threshold. */
int64_t tk_kda_work_floats(int32_t dk, int32_t dv);
int tk_kda_threshold(void);
int tk_kda_set_threshold(int n);

/* ==== lightning attention (lightning.c) ============================================== */
/* One head of one sequence over n_tok tokens (docs/specs/more-hybrids.md §5.4; transformers 5.24
 * modeling_minimax.py MiniMaxLightningAttention; llama.cpp minimax-01.cpp):
 *   S <- exp(-slope) S + k_t v_t^T;  o_t = S^T q_t        (no scaling, no softmax)
 * S is d x d (key index k, value index v), stored as llama.cpp stores it: element (k, v)
 * at S[v * d + k].  Rows: q + t*q_stride, k + t*k_stride, v + t*v_stride, o + t*o_stride
 * (d floats each); o must not overlap q, k, v or S.  slope: the head's s_h > 0 (HF's slope
 * rate).  work: tk_lightning_work_floats(d) floats, used by the block form only (NULL:
 * tk_lightning_run takes the recurrence whatever n_tok). */
typedef struct {
    int32_t n_tok, d;
    const float * q; int64_t q_stride;
    const float * k; int64_t k_stride;
    const float * v; int64_t v_stride;
    float slope;
    float * S;
    float * o; int64_t o_stride;
    float * work;
    int32_t min_chunk;         /* tk_lightning_run's threshold: 0 the process default
                                  (tk_lightning_threshold()), TK_CHUNK_NEVER never, else n >= 1 */
} tk_lightning_head;
/* The token-by-token recurrence at the current CPU level (scalar, AVX2+FMA, AVX-512).  At a
 * given level its bits do not depend on how a run is split over calls. */
void tk_lightning_recurrent(const tk_lightning_head * h);
/* HF's block form (blocks of 64: the masked intra-block product and the carried state),
 * whatever n_tok (the recurrence when work is NULL).  Agrees with the recurrence to float
 * rounding (~1e-7 relative). */
void tk_lightning_block(const tk_lightning_head * h);
/* The block form when n_tok >= tk_lightning_threshold() > 0 and work is given, else the
 * recurrence.  A run split over calls gives the bits of one call when every part takes the
 * recurrence, or every part the block form and the splits fall at multiples of 64 tokens
 * (as tk_ssd_*); otherwise they differ by float rounding (logits ~3e-7 apart measured). */
void tk_lightning_run(const tk_lightning_head * h);
/* floats of work the block form needs for heads of dim d (0 if d <= 0): the state
 * transposed, d x d, plus K^T (d x 64), the masked Q K^T (64 x 64) and 65 decay powers */
int64_t tk_lightning_work_floats(int32_t d);
/* Runs of at least this many tokens take the block form; 0 = never.  The process default
 * (tk_context_params.lightning_min 0) is lightning.c's measured TK_LIGHTNING_MIN_DEFAULT;
 * tk_lightning_set_threshold(n >= 0) overrides it and returns n; (n < 0) goes back to
 * TK_LIGHTNING_MIN_DEFAULT and returns it.  Like tk_gdn_*. */
int tk_lightning_threshold(void);
int tk_lightning_set_threshold(int n);

/* ==== attention over the KV cache (kernels/attn.c) ==================================== */
/* on = 1: the attention kinds (mixer_attention.c, mixer_mla.c) run their reference kernel (per
 * (token, head) pair, every cell, float scores; the form before the blocked one), 0: the
 * blocked kernel (kernels/attn.h), 2: the blocked kernel with a typed cache's rows converted to
 * floats before each chunk (not read directly: f16 / bf16 K and V are by default), -1: back to
 * the default, the blocked one. */
void tk_attn_set_reference(int on);
/* bytes of the context's workspace (ctx->work, which the chunked recurrent forms share: the
 * larger is planned) the blocked attention needs for H query heads over Hkv KV heads of key
 * width dk and value width dv on n_threads threads; 0 when H or Hkv <= 0 */
size_t tk_attn_work_bytes(int32_t H, int32_t Hkv, int32_t dk, int32_t dv, int n_threads);
/* the blocked attention's conversion of a typed cache's row of n values (a KV type: f16, bf16,
 * q8_0, q4_0) into floats at kernel level `level` (capped at the machine's), as a chunk converts
 * it (kernels/attn_body.h tk_attn_cvt_*, else the type's to_float); tests compare it with
 * tk_dequantize_row bit for bit */
void tk_attn_cvt_at(int level, int32_t type, const void * src, float * dst, int32_t n);

/* ==== RG-LRU (rglru.c) ================================================================ */
/* RecurrentGemma's RG-LRU gates for heads [h0, h1) of n_tok tokens: out[t][h bw + j] =
 * b[h bw + j] + sum_i x[t][h bw + i] W[(h bw + i) bw + j] (W [nh][bw in][bw out], HF's layout:
 * torch.baddbmm(b, x_h, W[h]), modeling_recurrent_gemma.py:312-316).  Rows of x / out at + t * x_stride / out_stride.
 * At a given level a token's bits do not depend on n_tok (each output one chain over i). */
void tk_rglru_gates(const float * x, int64_t x_stride, int32_t n_tok, const float * W, const float * b, int32_t h0,
                    int32_t h1, int32_t bw, float * out, int64_t out_stride);
/* The RG-LRU scan of one sequence's n_tok tokens over channels [c0, c1) at the current CPU
 * level (scalar, AVX2+FMA; docs/specs/more-hybrids.md §6.4, modeling_recurrent_gemma.py:301-366):
 *   r = sigmoid(ga), i = sigmoid(gi), log a = neg8sp * r (neg8sp = -8 softplus(Lambda)),
 *   a = exp(log a), m = sqrt(1 - exp(2 log a)); reset[t] != 0 (position 0): a = 0, m = 1;
 *   h <- a h + (x i) m;  y = h * yb
 * ga, gi (gate pre-activations) rows at + t * g_stride; x (the conv output), yb (the GeLU branch)
 * rows at + t * stride;
 * y at + t * y_stride (may be yb itself, same stride); h [>= c1] the state, updated; snap
 * (NULL, or n_tok pointers, each NULL or a [>= c1] row): h copied there after token t.
 * At a given level a channel's bits do not depend on c0 / c1 or on how a run is split over
 * calls. */
void tk_rglru_scan(const float * ga, const float * gi, int64_t g_stride, const float * x, const float * yb, int64_t stride,
                   const float * neg8sp, const uint8_t * reset, int32_t n_tok, int32_t c0, int32_t c1, float * h,
                   float * y, int64_t y_stride, float * const * snap);

/* ==== mHC, GLM-5-Next's hyper-connections (residual_hc.c) ============================ */
/* One token's coefficients from m = fn . f [hc (2 + hc)]: pre [hc], post [hc], comb [hc hc]
 * (row i, column j at i hc + j; Sinkhorn columns first, iters column passes); formula and
 * source in residual_hc.c. */
void tk_mhc_coeffs(const float * mix, const float * scale, const float * base, int32_t hc, float hc_eps, int32_t iters,
                   float * pre, float * post, float * comb);
/* The mix before a block for U tokens: X [U, hc D] the streams, fn [hc (2 + hc), hc D] row-major
 * float32, base [hc (2 + hc)], scale [3]; out xin [U, D], post [U, hc], comb [U, hc hc]. */
tk_status tk_mhc_pre_rows(const float * X, int32_t U, int32_t hc, int32_t D, const float * fn, const float * base,
                          const float * scale, float rms_eps, float hc_eps, int32_t iters, float * xin, float * post,
                          float * comb);
/* The combine after a block, in place: X_j <- post_j y + sum_i comb[i][j] X_i; y [U, D]. */
void tk_mhc_post_rows(float * X, const float * y, const float * post, const float * comb, int32_t U, int32_t hc, int32_t D);

/* ==== DSA k-pool selection, GLM-5-Next's indexer (layers/dsa.c) ======================= */
/* The keys of one sequence j = 0 .. n - 1 in position order: row j = [k_I (dI) | gamma (dI)] at
 * kg + rows[j] * stride (rows NULL: j); ape [kp][dI]; n_q queries: qI [n_q, nI dI], w [n_q, nI]
 * (already times nI^-1/2), n_vis[i] the keys query i sees (a prefix).  sel + i * sel_stride:
 * byte rows[j] = 1 for each selected key j, 0 for the other visible ones (formula in dsa.c).
 * TK_ERR_INVALID: kp or top_k <= 0, top_k not a multiple of kp, bad sizes. */
tk_status tk_dsa_select(const float * kg, const int32_t * rows, int64_t stride, int32_t n, const float * ape,
                        const float * qI, const float * w, const int32_t * n_vis, int32_t n_q, int32_t nI, int32_t dI,
                        int32_t kp, int32_t top_k, int32_t tail, uint8_t * sel, int64_t sel_stride);
/* pools the context's DSA layers have pooled since it was made (dsa.c keeps them across calls:
 * a decode pools only the pools completed since the last one); 0 without DSA */
int64_t tk_context_dsa_pooled(const tk_context * ctx);

/* ==== ggml type traits (ggml_types.c) ================================================ */
/* The type table's row of ggml type `type`: its name, block size (elements), bytes per
 * block, the activation type of its mat-mul (vec_dot_type: 0 = float32, 8 / 9 / 15 =
 * Q8_0 / Q8_1 / Q8_K, -1 = none) and flags: 1 dequantizes, 2 quantizes, 4 has an imatrix
 * quantizer, 8 has a mat-mul kernel, 16 is an activation type.  Returns 0 (outputs
 * untouched) for an id not in the table, else 1. */
int tk_type_traits_query(int type, const char ** name, int64_t * blck_size, int64_t * type_size, int * vec_dot_type,
                         int * flags);
/* ==== the batch split (context.c) ===================================================== */
/* The keep-tail rule (llama.cpp's n_keep_tail in split_equal): the last n tokens of each
 * sequence of a batch go into one ubatch.  0 (the default): no rule.  TK_ERR_INVALID unless
 * 0 <= n < n_ubatch.  For memories that keep per-token snapshots of the last n - 1 states. */
tk_status tk_context_set_keep_tail(tk_context * ctx, int32_t n);
/* The ubatches the last tk_decode ran: n_seqs[i], n_seq_tokens[i] for i < min(count, cap, 256);
 * returns count. */
int32_t tk_context_ubatches(const tk_context * ctx, int32_t * n_seqs, int32_t * n_seq_tokens, int32_t cap);
/* CDEF-END */

#ifdef __cplusplus
}
#endif
#endif /* TK_TESTING_H */
