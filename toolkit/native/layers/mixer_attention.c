/* mixer_attention.c: the attention mixer (TK_LAYER_ATTENTION: the attention layers of
 * granitehybrid, jamba, lfm2 / lfm2moe (q/k-normed, NEOX RoPE), and the gated attention of
 * qwen3next / qwen35 / qwen35moe).
 *
 * Shapes (U ubatch tokens, D n_embd, H heads, Hkv = n_head_kv[il] KV heads, hd head_dim,
 * kvd = Hkv hd, qs = hd, or 2 hd with attn_q_gate):
 *   in:  ctx->cur [U, D]            out: [U, D]
 *   wq [D, H qs]: with attn_q_gate, rows per head [q_h (hd) | gate_h (hd)]
 *   attn_q_norm, attn_k_norm [hd] (attn_qk_norm; Qwen's HF (1 + w) already folded in, LFM2's w as is),
 *     or [H hd], [Hkv hd] (attn_qk_norm_full: OLMo-Hybrid, one norm over all heads, as llama.cpp's olmo2)
 *   KV cache per cell: K [kvd] (stored after norm and RoPE), V [kvd]
 * Formula:
 *   q = wq cur, k = wk cur, v = wv cur
 *   attn_qk_norm: q_h = rmsnorm(q_h) * q_norm, k_g = rmsnorm(k_g) * k_norm (per head, rms_eps);
 *     attn_qk_norm_full: q = rmsnorm(q) * q_norm, k = rmsnorm(k) * k_norm over all heads
 *   (a post-norm block, hp.block.norm TK_NORM_POST, is forward.c's: this mixer is the same)
 *   RoPE on the first n_rot dims per head of q, k: NORM mode (adjacent pairs), or NEOX mode
 *     (pairs (i, i + n_rot/2)) with rope_neox
 *   o_h = softmax(q_h . K_g^T * scale) V_g over the cells of the token's sequence with
 *         pos <= its own (g = h / (H / Hkv), grouped-query);  scale = 1/sqrt(hd) unless set;
 *         on a sliding-window layer (swa_layers[il]) only the cells with pos > its own - n_swa
 *   attn_q_gate: o_h *= sigmoid(gate_h)
 *   attn_head_gate (LFM3): o_h *= sigmoid(attn_gate cur)_h, one scalar per head and token
 *   out = wo o
 * LFM3's RoPE per layer (tk_attention_rope): a sliding layer NEOX at rope_freq_base_swa; the
 *   others "proportional": NEOX pairs (i, i + n_rot/2) for i < rope_prop_rot/2 only, at
 *   rope_freq_base^(-2i/n_rot) (docs/specs/more-hybrids.md §4.4).
 * Lara-Mini (rope_swa_only): NEOX RoPE on the sliding layers, none on the full ones (modeling_lara_mini.py:258-260).
 * Biases, where the file has them (HF attention_bias; llama.cpp's optional bq / bk / bv / bo): q, k, v + theirs
 *   right after the projections (before q/k norm and RoPE), out = wo o + b_o.  RecurrentGemma (hp.attn.bias):
 *   o_proj's bias always (modeling_recurrent_gemma.py:217); its local attention is a sliding layer, NEOX RoPE on n_rot < hd dims.
 * ref: transformers modeling_bamba.py / modeling_jamba.py attention (eager),
 *      modeling_qwen3_next.py Qwen3NextAttention (gated; docs/specs/gdn-family.md §2.2),
 *      modeling_lfm2.py Lfm2Attention (q/k layernorm, no gate), modeling_lfm3.py Lfm3Attention,
 *      modeling_olmo_hybrid.py OlmoHybridAttention (q/k norm over all heads, NoPE or RoPE); llama.cpp
 *      build_attn, qwen3next.cpp / qwen35.cpp build_layer_attn.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/attn.h"
#include "layers/layer.h"
#include "tk_cpu.h"

static int32_t attn_kv_dim(const tk_model * m, int il) { return m->hp.n_head_kv[il] * m->hp.attn.head_dim; }

/* floats of one head's rows in q: hd, or [q_h | gate_h] with attn_q_gate */
static int32_t attn_q_stride(const tk_hparams * hp) { return hp->attn.q_gate ? 2 * hp->attn.head_dim : hp->attn.head_dim; }

/* q, att [H qs]; k, v [Hkv hd]; the blocked kernel's workspace */
static void attn_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    (void) n_ubatch;
    tk_scratch_need(&need->q, (size_t) m->hp.attn.n_head * (size_t) attn_q_stride(&m->hp));
    tk_scratch_need(&need->kv, (size_t) attn_kv_dim(m, il));
    if (m->hp.attn.head_gate) tk_scratch_need(&need->gate, (size_t) m->hp.attn.n_head);   /* the per-head gate */
    tk_scratch_need(&need->work_bytes, tk_attn_scratch_bytes(m->hp.attn.n_head, m->hp.n_head_kv[il], m->hp.attn.head_dim,
                                                              m->hp.attn.head_dim, n_threads, need->kv_typed));   /* the blocked kernel's */
    tk_scratch_need(&need->attn_part, tk_attn_part_floats(m->hp.attn.n_head, m->hp.n_head_kv[il], m->hp.attn.head_dim));
}

/* ---- load: hparams and tensors ---- */

static tk_status attn_check(const tk_hparams * hp, int il) {
    if (hp->n_head_kv[il] <= 0 || hp->attn.n_head <= 0 || hp->attn.n_head % hp->n_head_kv[il])
        return TK_FAIL(TK_ERR_INVALID, "layer %d: n_head_kv = %d must divide n_head = %d", il, hp->n_head_kv[il], hp->attn.n_head);
    if (hp->attn.head_dim <= 0 || hp->attn.head_dim > 4096) return TK_FAIL(TK_ERR_INVALID, "head_dim = %d out of range", hp->attn.head_dim);
    if (hp->attn.use_rope && (hp->attn.n_rot < 0 || hp->attn.n_rot > hp->attn.head_dim || hp->attn.n_rot % 2))
        return TK_FAIL(TK_ERR_INVALID, "n_rot = %d must be even and at most head_dim = %d", hp->attn.n_rot, hp->attn.head_dim);
    if (hp->attn.use_rope && !(hp->attn.rope_freq_base > 0)) return TK_FAIL(TK_ERR_INVALID, "rope_freq_base = %g must be > 0", hp->attn.rope_freq_base);
    if (hp->attn.use_rope && (hp->attn.rope_scaling_type < 0 || hp->attn.rope_scaling_type > 2 ||
                              (hp->attn.rope_scaling_type > 0 && !(hp->attn.rope_freq_scale > 0)) || (hp->attn.rope_scaling_type == 2 &&
                              (hp->attn.rope_orig_ctx <= 0 || !(hp->attn.rope_yarn_beta_fast > 0) || !(hp->attn.rope_yarn_beta_slow > 0)))))
        return TK_FAIL(TK_ERR_INVALID, "rope scaling type %d (freq_scale %g, attn_factor %g, original context %d) invalid",
                       hp->attn.rope_scaling_type, hp->attn.rope_freq_scale, hp->attn.rope_attn_factor, hp->attn.rope_orig_ctx);
    if (!(hp->attn.rope_freq_base_swa >= 0) || hp->attn.rope_prop_rot < 0 || hp->attn.rope_prop_rot > hp->attn.n_rot || hp->attn.rope_prop_rot % 2 ||
        (hp->attn.rope_prop_rot && !hp->attn.rope_neox))
        return TK_FAIL(TK_ERR_INVALID, "rope_freq_base_swa = %g / rope_prop_rot = %d invalid (n_rot %d)", hp->attn.rope_freq_base_swa,
                       hp->attn.rope_prop_rot, hp->attn.n_rot);
    if (hp->attn.qk_norm_full && (!hp->attn.qk_norm || hp->attn.q_gate))
        return TK_FAIL(TK_ERR_INVALID, "attn_qk_norm_full needs attn_qk_norm and no attn_q_gate");
    return TK_OK;
}

static tk_status attn_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    const int64_t HD = hp->attn.head_dim, Hq = hp->attn.n_head, Hkv = l->n_head_kv;
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_q.weight"), TK_SHAPE(D, Hq * attn_q_stride(hp)), 1, &l->wq));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_k.weight"), TK_SHAPE(D, Hkv * HD), 1, &l->wk));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_v.weight"), TK_SHAPE(D, Hkv * HD), 1, &l->wv));
    TK_CHECK(tk_bind_weight(m, tab, NAME("attn_output.weight"), TK_SHAPE(Hq * HD, D), 1, &l->wo));
    if (hp->attn.head_gate) TK_CHECK(tk_bind_weight(m, tab, NAME("attn_gate.weight"), TK_SHAPE(D, Hq), 1, &l->w_head_gate));
    if (hp->attn.qk_norm) {
        const int64_t nq = hp->attn.qk_norm_full ? Hq * HD : HD, nk = hp->attn.qk_norm_full ? Hkv * HD : HD;
        TK_CHECK(tk_bind_vec(m, tab, NAME("attn_q_norm.weight"), TK_SHAPE(nq), 1, &l->attn_q_norm));
        TK_CHECK(tk_bind_vec(m, tab, NAME("attn_k_norm.weight"), TK_SHAPE(nk), 1, &l->attn_k_norm));
    }
    /* q/k/v biases (HF attention_bias: the three together) and the output bias where the file has them
     * (llama.cpp's optional bq / bk / bv / bo); RecurrentGemma (hp.attn.bias) always has the output's */
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_output.bias"), TK_SHAPE(D), hp->attn.bias, &l->attn_out_b));
    const int qkv = tk_table_find(tab, NAME("attn_q.bias")) != NULL;
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_q.bias"), TK_SHAPE(Hq * attn_q_stride(hp)), qkv, &l->attn_q_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_k.bias"), TK_SHAPE(Hkv * HD), qkv, &l->attn_k_b));
    TK_CHECK(tk_bind_vec(m, tab, NAME("attn_v.bias"), TK_SHAPE(Hkv * HD), qkv, &l->attn_v_b));
#undef NAME
    return TK_OK;
}

typedef float v8f __attribute__((vector_size(32)));   /* 8 float lanes (GCC vector extension) */

typedef struct {
    tk_context * ctx;
    const tk_ubatch * ub;
    tk_kv_view kv;             /* the layer's K, V rows and cells */
    int32_t H, hd, kvd, grp;
    int32_t qs;                /* floats per head in q (attn_q_stride) */
    float scale;
    int level;                 /* tk_cpu_level() */
    const uint8_t * sel;       /* [U, n_cells] QSA's selected cells per token, or NULL */
    const tk_type_traits * tk, * tv;   /* a typed cache (tk_kv_view.type_k / type_v not f32): the rows' types, else NULL */
} attn_job;

/* One (token t = p / H, head h = p % H) pair: its query and output rows, its KV head's rows
 * in cell 0 (cell c at + c * kvd), and what selects the cells it attends. */
typedef struct {
    const float * q, * k, * v; /* k, v: a float32 cache's */
    float * o;
    int32_t kvo;               /* the KV head's first value in a cell's row */
    uint64_t sbit;             /* the token's sequence */
    int32_t pos;
    const uint8_t * sel;       /* [n_cells] the cells QSA selected for the token, or NULL (all) */
} attn_pair;

static inline __attribute__((always_inline)) attn_pair attn_pair_at(const attn_job * j, int64_t p) {
    const tk_context * ctx = j->ctx;
    const int32_t H = j->H, hd = j->hd, qs = j->qs, t = (int32_t) (p / H), h = (int32_t) (p % H);
    const size_t kvo = (size_t) (h / j->grp) * (size_t) hd, oo = (size_t) t * H * hd + (size_t) h * hd;
    const size_t qo = (size_t) t * H * qs + (size_t) h * qs;
    const attn_pair a = {ctx->q + qo, (const float *) j->kv.k + kvo, (const float *) j->kv.v + kvo, ctx->att + oo, (int32_t) kvo,
                         UINT64_C(1) << j->ub->seq[t / j->ub->n_seq_tokens], j->ub->pos[t],
                         j->sel ? j->sel + (size_t) t * (size_t) j->kv.n_cells : NULL};
    return a;
}

/* cell c is attended by the pair: its sequence, at or before its position, not empty */
static inline __attribute__((always_inline)) int attn_sees(const tk_kv_view * kv, int32_t c, const attn_pair * a) {
    return (kv->seqs[c] & a->sbit) && kv->pos[c] <= a->pos && kv->pos[c] >= 0 && (!a->sel || a->sel[c]) &&
           (!kv->window || kv->pos[c] > a->pos - kv->window);
}

/* score[c] <- exp(score[c] - mx) over the cells the pair sees; returns their sum, in
 * cell order, in double */
static inline __attribute__((always_inline)) double attn_exp(const tk_kv_view * kv, const attn_pair * a,
                                                             float * score, float mx) {
    double den = 0.0;
    for (int32_t c = 0; c < kv->n_cells; c++) {
        if (!attn_sees(kv, c, a)) continue;
        score[c] = expf(score[c] - mx);
        den += score[c];
    }
    return den;
}

/* cell c's key (K) or value row of the pair's KV head as floats: a float32 cache's row in
 * place, a typed cache's converted into buf [hd] */
static inline __attribute__((always_inline)) const float * attn_row(const attn_job * j, const attn_pair * a, int32_t c,
                                                                    int is_v, float * buf) {
    if (!j->tk) return (is_v ? a->v : a->k) + (size_t) c * j->kvd;
    const tk_type_traits * tt = is_v ? j->tv : j->tk;
    const size_t row = is_v ? j->kv.v_row : j->kv.k_row;
    const size_t off = tk_kv_row_bytes(is_v ? j->kv.type_v : j->kv.type_k, a->kvo);
    tt->to_float((const uint8_t *) (is_v ? j->kv.v : j->kv.k) + (size_t) c * row + off, buf, j->hd);
    return buf;
}

/* pairs [p0, p1) of (token t = p / H, head h = p % H): softmax(q.k * scale) v over the
 * cells of t's sequence with pos <= t's; scores in the thread's row of ctx->vec.  q.k keeps
 * 8 partial sums (i mod 8) added in a fixed tree, so the loops vectorize; a plain and an
 * AVX2+FMA instance, chosen by level.  Each pair's operations do not depend on the split. */
static inline __attribute__((always_inline)) void attn_heads_body(const attn_job * j, int64_t p0, int64_t p1, int thread) {
    tk_context * ctx = j->ctx;
    const tk_kv_view * kv = &j->kv;
    const int32_t hd = j->hd;
    float * score = ctx->vec + (size_t) thread * ctx->vec_n;   /* [n_cells] */
    float * buf = ctx->row + (size_t) thread * ctx->row_n;     /* a typed cache's row as floats [hd] (no mat-mul runs here) */
    for (int64_t p = p0; p < p1; p++) {
        const attn_pair a = attn_pair_at(j, p);
        const float * qh = a.q;
        float mx = -FLT_MAX;
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * kc = attn_row(j, &a, c, 0, buf);
            v8f acc = {0};
            int32_t i = 0;
            for (; i + 8 <= hd; i += 8) {
                v8f x, y;
                memcpy(&x, qh + i, sizeof x);
                memcpy(&y, kc + i, sizeof y);
                acc += x * y;
            }
            float d = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; i < hd; i++) d += qh[i] * kc[i];
            score[c] = d * j->scale;
            if (score[c] > mx) mx = score[c];
        }
        float * o = a.o;
        for (int32_t i = 0; i < hd; i++) o[i] = 0.0f;
        const double den = attn_exp(kv, &a, score, mx);
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * vc = attn_row(j, &a, c, 1, buf);
            for (int32_t i = 0; i < hd; i++) o[i] += score[c] * vc[i];
        }
        const float inv = den > 0 ? (float) (1.0 / den) : 0.0f;
        for (int32_t i = 0; i < hd; i++) o[i] *= inv;
    }
}

static void attn_heads_plain(const attn_job * j, int64_t p0, int64_t p1, int thread) { attn_heads_body(j, p0, p1, thread); }
#if defined(__x86_64__) && defined(__GNUC__)
/* attn_heads_body written out for head_dim = 8 V (V a constant after inlining): q and the
 * output held in registers across the cells (the body reloads and stores o for every cell).
 * The same operations per pair as the body at this level: q.k in one 8-lane FMA chain over
 * i, then the tk_hsum8_avx2 tree (the body's tree), o[i] += pr * v[i] by FMA. */
__attribute__((target("avx2,fma"), always_inline)) static inline void attn_heads_regs(const attn_job * j, int64_t p0,
                                                                                     int64_t p1, int thread, const int V) {
    tk_context * ctx = j->ctx;
    const tk_kv_view * kv = &j->kv;
    const int32_t kvd = j->kvd;
    float * score = ctx->vec + (size_t) thread * ctx->vec_n;   /* [n_cells] */
    for (int64_t p = p0; p < p1; p++) {
        const attn_pair a = attn_pair_at(j, p);
        __m256 q[16], o[16];
        for (int v = 0; v < V; v++) q[v] = _mm256_loadu_ps(a.q + 8 * v);
        float mx = -FLT_MAX;
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * kc = a.k + (size_t) c * kvd;
            __m256 acc = _mm256_mul_ps(q[0], _mm256_loadu_ps(kc));
            for (int v = 1; v < V; v++) acc = _mm256_fmadd_ps(q[v], _mm256_loadu_ps(kc + 8 * v), acc);
            score[c] = tk_hsum8_avx2(acc) * j->scale;
            if (score[c] > mx) mx = score[c];
        }
        for (int v = 0; v < V; v++) o[v] = _mm256_setzero_ps();
        const double den = attn_exp(kv, &a, score, mx);
        for (int32_t c = 0; c < kv->n_cells; c++) {
            if (!attn_sees(kv, c, &a)) continue;
            const float * vc = a.v + (size_t) c * kvd;
            const __m256 pv = _mm256_set1_ps(score[c]);
            for (int v = 0; v < V; v++) o[v] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vc + 8 * v), o[v]);
        }
        const __m256 inv = _mm256_set1_ps(den > 0 ? (float) (1.0 / den) : 0.0f);
        for (int v = 0; v < V; v++) _mm256_storeu_ps(a.o + 8 * v, _mm256_mul_ps(o[v], inv));
    }
}

__attribute__((target("avx2,fma")))
static void attn_heads_avx2(const attn_job * j, int64_t p0, int64_t p1, int thread) {
    switch (j->hd) {
        case 64: attn_heads_regs(j, p0, p1, thread, 8); return;
        case 128: attn_heads_regs(j, p0, p1, thread, 16); return;
        default: attn_heads_body(j, p0, p1, thread); return;
    }
}
#endif

static void attn_heads(void * arg, int64_t p0, int64_t p1, int thread) {
    const attn_job * j = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->level >= TK_CPU_AVX2 && !j->tk) {   /* a typed cache: the body's rows converted one by one */ attn_heads_avx2(j, p0, p1, thread); return; }
#endif
    attn_heads_plain(j, p0, p1, thread);
}

/* q, k of token t (rows at q [H qs], k [Hkv hd]): per-head RMSNorm (attn_qk_norm), then RoPE */
static void attn_qk_prep(const tk_hparams * hp, const tk_layer * l, int il, float * q, float * k, int32_t Hkv, int32_t pos) {
    const int32_t H = hp->attn.n_head, hd = hp->attn.head_dim, qs = attn_q_stride(hp);
    if (l->attn_q_norm && hp->attn.qk_norm_full) {   /* one norm over all heads (qs = hd: no gate) */
        tk_rms_norm(q, l->attn_q_norm, hp->rms_eps, (int64_t) H * hd, q);
        tk_rms_norm(k, l->attn_k_norm, hp->rms_eps, (int64_t) Hkv * hd, k);
    } else if (l->attn_q_norm) {
        for (int32_t h = 0; h < H; h++) tk_rms_norm(q + (int64_t) h * qs, l->attn_q_norm, hp->rms_eps, hd, q + (int64_t) h * qs);
        for (int32_t g = 0; g < Hkv; g++) tk_rms_norm(k + (int64_t) g * hd, l->attn_k_norm, hp->rms_eps, hd, k + (int64_t) g * hd);
    }
    tk_attention_rope(hp, il, q, H, qs, pos);
    tk_attention_rope(hp, il, k, Hkv, hd, pos);
}

static void attention_rope(const tk_hparams * hp, int il, float * x, int32_t n_head, int64_t head_stride, int32_t pos,
                           int with_mscale) {
    if (!hp->attn.use_rope || hp->attn.n_rot <= 0) return;
    const int sliding = hp->attn.swa_layers && hp->attn.swa_layers[il];
    if (hp->attn.rope_swa_only && !sliding) return;        /* Lara-Mini's full layers: NoPE */
    const float base = sliding && hp->attn.rope_freq_base_swa > 0 ? hp->attn.rope_freq_base_swa : hp->attn.rope_freq_base;
    /* rope.scaling.* (linear, yarn): every layer's, but LFM3's sliding layers (llama.cpp scales only the
     * non-sliding layers of a model with rope.freq_base_swa: its rope.freq_scale_swa has no key) */
    const tk_rope_scaling sc = tk_rope_scaling_of(&hp->attn, hp->attn.n_rot, base, with_mscale);
    if (sliding && hp->attn.rope_freq_base_swa > 0)        /* LFM3's sliding layers: their own base */
        tk_rope_neox(x, n_head, head_stride, hp->attn.n_rot, pos, hp->attn.rope_freq_base_swa);
    else if (!sliding && hp->attn.rope_prop_rot > 0)       /* LFM3's full layers: proportional RoPE (its factor: linear) */
        tk_rope_neox_pairs_scaled(x, n_head, head_stride, hp->attn.n_rot, hp->attn.rope_prop_rot / 2, pos, hp->attn.rope_freq_base, &sc);
    else if (hp->attn.rope_neox)
        tk_rope_neox_pairs_scaled(x, n_head, head_stride, hp->attn.n_rot, hp->attn.n_rot / 2, pos, base, &sc);
    else tk_rope_norm_scaled(x, n_head, hp->attn.head_dim, hp->attn.n_rot, pos, base, &sc);
}

void tk_attention_rope(const tk_hparams * hp, int il, float * x, int32_t n_head, int64_t head_stride, int32_t pos) {
    attention_rope(hp, il, x, n_head, head_stride, pos, 1);
}

void tk_attention_rope_shift(const tk_hparams * hp, int il, float * x, int32_t n_head, int64_t head_stride, int32_t delta) {
    attention_rope(hp, il, x, n_head, head_stride, delta, 0);
}

/* attn_q_gate: att[t][h] *= sigmoid(gate_h of token t) over tokens [t0, t1) */
typedef struct { const float * q; float * att; int32_t H, hd; } gate_job;

static void attn_gate_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const gate_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++)
        for (int32_t h = 0; h < j->H; h++) {
            const float * gt = j->q + (t * j->H + h) * 2 * j->hd + j->hd;
            float * o = j->att + (t * j->H + h) * j->hd;
            for (int32_t i = 0; i < j->hd; i++) o[i] *= 1.0f / (1.0f + expf(-gt[i]));
        }
}

/* attn_head_gate: att[t][h] *= sigmoid(g[t][h]) over tokens [t0, t1) */
typedef struct { const float * g; float * att; int32_t H, hd; } head_gate_job;

static void attn_head_gate_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const head_gate_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++)
        for (int32_t h = 0; h < j->H; h++) {
            const float s = 1.0f / (1.0f + expf(-j->g[t * j->H + h]));
            float * o = j->att + (t * j->H + h) * j->hd;
            for (int32_t i = 0; i < j->hd; i++) o[i] *= s;
        }
}

tk_status tk_attention_forward_sel(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out,
                                   const uint8_t * sel) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens, H = hp->attn.n_head, hd = hp->attn.head_dim;
    TK_CHECK(tk_matmul(&l->wq, 0, ctx->cur, U, ctx->q, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wk, 0, ctx->cur, U, ctx->k, &ctx->mm));
    TK_CHECK(tk_matmul(&l->wv, 0, ctx->cur, U, ctx->v, &ctx->mm));
    if (l->attn_q_b) {         /* attention_bias (with a q gate: q_proj's [H 2 hd] rows, the gate halves' too) */
        tk_bias_rows(ctx, ctx->q, l->attn_q_b, (int64_t) H * attn_q_stride(hp), U, 0);
        tk_bias_rows(ctx, ctx->k, l->attn_k_b, (int64_t) l->n_head_kv * hd, U, 0);
        tk_bias_rows(ctx, ctx->v, l->attn_v_b, (int64_t) l->n_head_kv * hd, U, 0);
    }
    TK_CHECK(tk_attention_core_sel(ctx, l, il, ub, sel));
    if (hp->attn.q_gate) {
        gate_job gj = {ctx->q, ctx->att, H, hd};
        tk_par_rows(ctx->pool, U, (int64_t) H * hd, attn_gate_rows, &gj);
    }
    if (hp->attn.head_gate) {  /* LFM3: one sigmoid gate per head and token, from x (ctx->cur), in ctx->gate [U, H] */
        TK_CHECK(tk_matmul(&l->w_head_gate, 0, ctx->cur, U, ctx->gate, &ctx->mm));
        head_gate_job gj = {ctx->gate, ctx->att, H, hd};
        tk_par_rows(ctx->pool, U, (int64_t) H * hd, attn_head_gate_rows, &gj);
    }
    TK_CHECK(tk_matmul(&l->wo, 0, ctx->att, U, out, &ctx->mm));
    if (l->attn_out_b) tk_bias_rows(ctx, out, l->attn_out_b, hp->n_embd, U, 0);   /* o_proj's bias */
    return TK_OK;
}

static tk_status attn_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, float * out) {
    return tk_attention_forward_sel(ctx, l, il, ub, out, NULL);
}

tk_status tk_attention_core(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub) {
    return tk_attention_core_sel(ctx, l, il, ub, NULL);
}

tk_status tk_attention_core_sel(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, const uint8_t * sel) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t U = ub->n_tokens;
    const int32_t H = hp->attn.n_head, Hkv = l->n_head_kv, hd = hp->attn.head_dim, kvd = Hkv * hd, grp = H / Hkv;
    const int32_t qs = attn_q_stride(hp);
    const float scale = hp->attn.scale != 0.0f ? hp->attn.scale : (float) (1.0 / sqrt((double) hd));
    tk_kv_view kv;
    TK_CHECK(ctx->mem->kv_view(ctx->mem, il, &kv));
    const int typed = kv.type_k != TK_GGML_F32 || kv.type_v != TK_GGML_F32;
    const tk_type_traits * tk = tk_type_traits_get(kv.type_k), * tv = tk_type_traits_get(kv.type_v);
    for (int32_t t = 0; t < U; t++) {
        attn_qk_prep(hp, l, il, ctx->q + (int64_t) t * H * qs, ctx->k + (int64_t) t * kvd, Hkv, ub->pos[t]);
        const size_t c = (size_t) kv.ub_cells[t];
        /* the cache's types: ggml's from_float (f16 / bf16 rounding, quantize_row_*_ref), as
         * llama.cpp's ggml_set_rows into its K and V */
        if (kv.type_k == TK_GGML_F32) memcpy((uint8_t *) kv.k + c * kv.k_row, ctx->k + (int64_t) t * kvd, (size_t) kvd * sizeof(float));
        else tk->from_float(ctx->k + (int64_t) t * kvd, (uint8_t *) kv.k + c * kv.k_row, kvd);
        if (kv.type_v == TK_GGML_F32) memcpy((uint8_t *) kv.v + c * kv.v_row, ctx->v + (int64_t) t * kvd, (size_t) kvd * sizeof(float));
        else tv->from_float(ctx->v + (int64_t) t * kvd, (uint8_t *) kv.v + c * kv.v_row, kvd);
    }
    const tk_attn_args a = {ctx->q, (int64_t) H * qs, qs, ctx->att, (int64_t) H * hd, hd, kv.k, kv.v, kvd, hd, kvd, hd,
                            hd, hd, H, Hkv, scale, &kv, ub, sel, kv.k, kv.v, kv.type_k, kv.type_v,
                            kv.k_row, tk_kv_row_bytes(kv.type_k, hd), kv.v_row, tk_kv_row_bytes(kv.type_v, hd)};
    if (tk_attn_reference() != 1 && tk_attn_run(ctx, &a)) return TK_OK;   /* kernels/attn.h: the blocked form */
    attn_job aj = {ctx, ub, kv, H, hd, kvd, grp, qs, scale, tk_cpu_level(), sel, typed ? tk : NULL, typed ? tv : NULL};
    /* the reference: (token, head) pairs over the threads; each thread scores into its own row of vec */
    tk_par_rows(ctx->pool, (int64_t) U * H, (int64_t) kv.n_cells * hd / 4, attn_heads, &aj);
    return TK_OK;
}

const tk_mixer_ops tk_mixer_attention = {
    .name = "attention",
    .check = attn_check,
    .bind = attn_bind,
    .kv_dim = attn_kv_dim,
    .scratch = attn_scratch,
    .forward = attn_forward,
};

/* the kind's pieces for a kind built on it (mixer_qsa.c) */
tk_status tk_attention_check(const tk_hparams * hp, int il) { return attn_check(hp, il); }
tk_status tk_attention_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) { return attn_bind(m, tab, il, l); }
int32_t tk_attention_kv_dim(const tk_model * m, int il) { return attn_kv_dim(m, il); }
void tk_attention_scratch(const tk_model * m, int il, int32_t n_ubatch, int n_threads, tk_scratch * need) {
    attn_scratch(m, il, n_ubatch, n_threads, need);
}
