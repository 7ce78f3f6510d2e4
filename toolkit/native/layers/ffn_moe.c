/* ffn_moe.c: the mixture-of-experts feed-forward (TK_FFN_MOE: jamba, Granite 4.0-H MoE,
 * qwen3next, qwen35moe, nemotron_h_moe, lfm2moe, qwen4exp).
 *
 * Shapes (U tokens, D n_embd, E n_expert, k n_expert_used, Fe expert width, Fs shared
 * expert width):  in ctx->cur [U, D], out [U, D]; router logits in ctx->moe_r [U, E], the
 * gathered tokens of one expert and their outputs in ctx->moe_x / moe_y [U, D];
 * experts ffn_{gate,up,down}_exps [D, Fe, E] / [Fe, D, E]; shared expert [D, Fs] / [Fs, D];
 * shared expert gate ffn_gate_inp_shexp [D] (ggml [D, 1] or [D]), optional; expert choice
 * bias exp_probs_b.bias [E] (moe_sigmoid only), optional.  With moe_relu2 the experts and the
 * shared expert have no gate matrices and compute down(act(up(x))) (ffn_relu2.c; act hp.ffn.act, relu2 by default).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "layers/layer.h"

/* MoE: router logits r = W_inp x [E];
 *   moe_softmax_topk (Jamba):  p = softmax(r); top-k of p; weights = p[k] (not renormalised)
 *     + moe_renorm (Qwen):     weights = p[k] / sum over the k of p
 *   moe_sigmoid (Nemotron-H, LFM2-MoE): s = sigmoid(r); c = s + exp_probs_b (0 when absent);
 *                              with G = moe_n_group > 1 groups of E/G experts, each scored
 *                              by the sum of its top-2 c, only the best moe_topk_group groups
 *                              compete; top-k of c; weights = s[k] (/ (sum of the k +
 *                              moe_weights_norm_eps) with moe_weights_norm) * moe_weights_scale
 *   else (Granite):            top-k of r; weights = softmax over the k logits
 * y = sum_k w_k * SwiGLU_k(x)  (+ shared expert SwiGLU(x) when present, times
 *     sigmoid(ffn_gate_inp_shexp . x) when that gate is present).
 * ref: transformers JambaSparseMoeBlock, GraniteMoeHybridTopKGating / GraniteMoeHybridMoE,
 *      Qwen3NextSparseMoeBlock (docs/specs/gdn-family.md §2.4), NemotronHTopkRouter / NemotronHMoE,
 *      Lfm2MoeTopKRouter; llama.cpp build_moe_ffn (LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID,
 *      exp_probs_b, expert groups; it clamps the renormalising sum at 2^-14 instead). */
static tk_status moe_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int64_t D = hp->n_embd;
    char nm[128];
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    const int64_t E = hp->moe.n_expert;
    const tk_tensor_desc * up = tk_table_find(tab, NAME("ffn_up_exps.weight"));
    if (!up) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s'", tab->path, nm);
    const int64_t F = up->ne[1];
    l->n_ff_exp = (int32_t) F;
    /* latent MoE (moe_latent_size Dl): the routed experts are Dl wide, between ffn_latent_down
     * [D, Dl] and ffn_latent_up [Dl, D] (llama.cpp's names); both required then, refused otherwise */
    const int64_t Dl = hp->moe.latent_size, Dx = Dl ? Dl : D;
    if (Dl) {
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_latent_down.weight"), TK_SHAPE(D, Dl), 1, &l->ffn_latent_down));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_latent_up.weight"), TK_SHAPE(Dl, D), 1, &l->ffn_latent_up));
    } else if (tk_table_find(tab, NAME("ffn_latent_down.weight")) || tk_table_find(tab, NAME("ffn_latent_up.weight"))) {
        return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' without the key moe_latent_size", tab->path, nm);
    }
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_inp.weight"), TK_SHAPE(D, E), 1, &l->ffn_gate_inp));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_up_exps.weight"), TK_SHAPE(Dx, F, E), 1, &l->ffn_up_exps));
    if (!hp->moe.relu2) TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_exps.weight"), TK_SHAPE(Dx, F, E), 1, &l->ffn_gate_exps));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_down_exps.weight"), TK_SHAPE(F, Dx, E), 1, &l->ffn_down_exps));
    const tk_tensor_desc * sh = tk_table_find(tab, NAME("ffn_up_shexp.weight"));
    if (sh) {
        const int64_t Fs = sh->ne[1];
        l->n_ff_shexp = (int32_t) Fs;
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_up_shexp.weight"), TK_SHAPE(D, Fs), 1, &l->ffn_up_shexp));
        if (!hp->moe.relu2) TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_gate_shexp.weight"), TK_SHAPE(D, Fs), 1, &l->ffn_gate_shexp));
        TK_CHECK(tk_bind_weight(m, tab, NAME("ffn_down_shexp.weight"), TK_SHAPE(Fs, D), 1, &l->ffn_down_shexp));
        TK_CHECK(tk_bind_vec(m, tab, NAME("ffn_gate_inp_shexp.weight"), TK_SHAPE(D), 0, &l->ffn_gate_inp_shexp));
    }
    if (hp->moe.sigmoid && (hp->moe.n_group > 64 || (hp->moe.n_group > 1 && (E % hp->moe.n_group ||
        hp->moe.topk_group < 1 || hp->moe.topk_group > hp->moe.n_group))))
        return TK_FAIL(TK_ERR_INVALID, "expert groups %d (keeping %d) do not divide the %d experts", hp->moe.n_group,
                       hp->moe.topk_group, (int) E);
    TK_CHECK(tk_bind_vec(m, tab, NAME("exp_probs_b.bias"), TK_SHAPE(E), 0, &l->ffn_exp_probs_b));
    if (l->ffn_exp_probs_b && !hp->moe.sigmoid)
        return TK_FAIL(TK_ERR_UNSUPPORTED, "%s: tensor '%s': an expert selection bias needs sigmoid routing", tab->path, nm);
#undef NAME
    return TK_OK;
}

/* sel[0..k) = the indices of the k largest c[e], e < E, in descending order; ties go to the
 * lower index (torch.topk's order for distinct values) */
static void top_k(const float * c, int32_t E, int32_t k, int32_t * sel) {
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            int taken = 0;
            for (int32_t q = 0; q < j; q++) taken |= sel[q] == e;
            if (!taken && (best < 0 || c[e] > c[best])) best = e;
        }
        sel[j] = best;
    }
}

/* The k experts of one token by moe_sigmoid routing (see the formula above): r [E] holds the
 * router logits and is overwritten with the choice scores c; sel [k], w [k] out. */
static void route_sigmoid(const tk_hparams * hp, const float * bias, float * r, float * s, int32_t * sel, float * w) {
    const int32_t E = hp->moe.n_expert, k = hp->moe.n_expert_used, G = hp->moe.n_group > 1 ? hp->moe.n_group : 1;
    for (int32_t e = 0; e < E; e++) { s[e] = 1.0f / (1.0f + expf(-r[e])); r[e] = bias ? s[e] + bias[e] : s[e]; }
    if (G > 1 && hp->moe.topk_group < G) {
        const int32_t per = E / G;
        float gs[64];
        for (int32_t g = 0; g < G; g++) {      /* group score: the sum of its two best choices */
            float a = -FLT_MAX, b = -FLT_MAX;
            for (int32_t e = g * per; e < (g + 1) * per; e++) {
                if (r[e] > a) { b = a; a = r[e]; } else if (r[e] > b) b = r[e];
            }
            gs[g] = a + (per > 1 ? b : 0.0f);
        }
        for (int32_t j = 0; j < hp->moe.topk_group; j++) {   /* mark the kept groups with +inf */
            int32_t best = -1;
            for (int32_t g = 0; g < G; g++) if (gs[g] != INFINITY && (best < 0 || gs[g] > gs[best])) best = g;
            gs[best] = INFINITY;
        }
        for (int32_t e = 0; e < E; e++) if (gs[e / per] != INFINITY) r[e] = -INFINITY;
    }
    top_k(r, E, k, sel);                     /* top-k of c */
    for (int32_t j = 0; j < k; j++) w[j] = s[sel[j]];
    double sum = hp->moe.weights_norm_eps;
    for (int32_t j = 0; j < k; j++) sum += w[j];
    for (int32_t j = 0; j < k; j++) w[j] = (float) ((hp->moe.weights_norm ? w[j] / sum : w[j]) * hp->moe.weights_scale);
}

/* one expert (or the shared expert, mat 0) on n tokens x [n, D] into y [n, D]: SwiGLU, or
 * ReLU² with moe_relu2.  Every mat-mul gives each token the bits of its one-token call
 * (ops.c), so an expert's output for a token does not depend on the tokens it shares. */
static tk_status expert(tk_context * ctx, const tk_weight * gate, const tk_weight * up, const tk_weight * down,
                        int64_t mat, const float * x, int32_t n, float limit, float * y) {
    if (ctx->model->hp.moe.relu2) return tk_relu2_ffn(ctx, up, down, mat, x, n, y);
    return tk_swiglu_clamped(ctx, gate, up, down, mat, x, n, limit, y);   /* limit 0: no clamp (GLM-5-Next's) */
}

/* The k experts of one token, sel [k], and their weights w [k] (the routing rules above),
 * from the router logits r [E] (overwritten with the scores); s: [E] scratch. */
static void moe_route(const tk_hparams * hp, const tk_layer * l, float * r, float * s, int32_t * sel, float * w) {
    const int32_t E = hp->moe.n_expert, k = hp->moe.n_expert_used;
    if (hp->moe.sigmoid) { route_sigmoid(hp, l->ffn_exp_probs_b, r, s, sel, w); return; }
    if (hp->moe.softmax_topk) {
        float mx = -FLT_MAX;
        for (int32_t e = 0; e < E; e++) mx = r[e] > mx ? r[e] : mx;
        double sum = 0.0;
        for (int32_t e = 0; e < E; e++) { r[e] = expf(r[e] - mx); sum += r[e]; }
        for (int32_t e = 0; e < E; e++) r[e] = (float) (r[e] / sum);
    }
    top_k(r, E, k, sel);
    for (int32_t j = 0; j < k; j++) w[j] = r[sel[j]];
    if (hp->moe.softmax_topk && hp->moe.renorm) {
        double sum = 0.0;
        for (int32_t j = 0; j < k; j++) sum += w[j];
        for (int32_t j = 0; j < k; j++) w[j] = (float) (w[j] / sum);
    } else if (!hp->moe.softmax_topk) {
        const float mx = w[0];
        double sum = 0.0;
        for (int32_t j = 0; j < k; j++) { w[j] = expf(w[j] - mx); sum += w[j]; }
        for (int32_t j = 0; j < k; j++) w[j] = (float) (w[j] / sum);
    }
}

/* One expert's gathered rows (li [n]: token * k + slot): gather x rows into xg, scatter-add
 * w * yg rows into the tokens' outputs; the shared expert's gate and sum over tokens.  Row
 * loops over the threads (tk_par_rows): each row is one token's, computed by the same loop. */
typedef struct {
    const float * x;           /* ctx->cur [U, D] */
    float * xg, * yg;          /* [n, D] gathered rows, their outputs ([U, D] for the shared expert) */
    float * out;               /* [U, D] */
    const int32_t * li;        /* [n] */
    const float * wt;          /* [U k] routing weights */
    const float * gate;        /* ffn_gate_inp_shexp [D] or NULL */
    int32_t D, k;
} moe_rows_job;

static void gather_rows(void * arg, int64_t i0, int64_t i1, int thread) {
    const moe_rows_job * j = arg;
    (void) thread;
    for (int64_t i = i0; i < i1; i++)
        memcpy(j->xg + i * j->D, j->x + (int64_t) (j->li[i] / j->k) * j->D, (size_t) j->D * sizeof(float));
}

static void scatter_rows(void * arg, int64_t i0, int64_t i1, int thread) {
    const moe_rows_job * j = arg;
    (void) thread;
    for (int64_t i = i0; i < i1; i++) {
        float * ot = j->out + (int64_t) (j->li[i] / j->k) * j->D;
        const float * yt = j->yg + i * j->D, w = j->wt[j->li[i]];
        for (int32_t d = 0; d < j->D; d++) ot[d] += w * yt[d];
    }
}

/* out[t] += sigmoid(gate . x[t]) * ys[t] (without the gate: out[t] += ys[t]) */
static void shared_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const moe_rows_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) {
        const float * xt = j->x + t * j->D;
        float * ys = j->yg + t * j->D, * ot = j->out + t * j->D;
        if (j->gate) {
            double d = 0.0;
            for (int32_t i = 0; i < j->D; i++) d += (double) j->gate[i] * xt[i];
            const float gs = 1.0f / (1.0f + expf(-(float) d));
            for (int32_t i = 0; i < j->D; i++) ys[i] *= gs;
        }
        for (int32_t i = 0; i < j->D; i++) ot[i] += ys[i];
    }
}

/* The ubatch as GEMMs (llama.cpp's mul_mat_id): the router for all U tokens in one mat-mul,
 * each token's k experts chosen, the (token, slot) pairs grouped by expert (counting sort,
 * tokens ascending within an expert), then per expert one SwiGLU over its gathered tokens
 * (moe_x -> moe_y) whose rows are added into the tokens' outputs, and the shared expert over
 * the ubatch.  Order of accumulation per output, as transformers' index_add_ loop over the
 * experts hit: out = 0; out += w_e * expert_e(x) for the token's experts in ascending index;
 * then out += sigmoid(gate . x) * shared(x).  It depends on the token alone, so with the
 * mat-muls' per-token bits a token's result never depends on its ubatch. */
static tk_status moe_forward(tk_context * ctx, const tk_layer * l, int32_t U, float * out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t D = hp->n_embd, E = hp->moe.n_expert, k = hp->moe.n_expert_used;
    float * R = ctx->moe_r, * wt = ctx->moe_wt;
    int32_t * sel = ctx->moe_sel, * list = ctx->moe_list;
    float sig[4096];           /* sigmoid scores (moe_sigmoid); n_expert <= 4096 (model.c) */
    int32_t start[4097];
    if (k > 64) return TK_FAIL(TK_ERR_UNSUPPORTED, "n_expert_used = %d > 64", k);
    TK_CHECK(tk_matmul(&l->ffn_gate_inp, 0, ctx->cur, U, R, &ctx->mm));
    for (int32_t t = 0; t < U; t++) moe_route(hp, l, R + (int64_t) t * E, sig, sel + (int64_t) t * k, wt + (int64_t) t * k);
    /* group the U k slots by expert: start[e] .. start[e + 1] in list */
    for (int32_t e = 0; e <= E; e++) start[e] = 0;
    for (int64_t i = 0; i < (int64_t) U * k; i++) start[sel[i] + 1]++;
    for (int32_t e = 0; e < E; e++) start[e + 1] += start[e];
    for (int64_t i = 0; i < (int64_t) U * k; i++) list[start[sel[i]]++] = (int32_t) i;
    for (int32_t e = E; e > 0; e--) start[e] = start[e - 1];
    start[0] = 0;
    /* latent MoE: the experts see xl = latent_down x [U, Dl] and sum into ol [U, Dl]; then
     * out = latent_up ol (HF: fc2_latent_proj(experts(fc1_latent_proj(x)))) */
    const int32_t Dl = hp->moe.latent_size, Dx = Dl ? Dl : D;
    float * eout = Dl ? ctx->moe_ol : out;
    const float * ein = ctx->cur;
    if (Dl) {
        TK_CHECK(tk_matmul(&l->ffn_latent_down, 0, ctx->cur, U, ctx->moe_xl, &ctx->mm));
        ein = ctx->moe_xl;
    }
    memset(eout, 0, (size_t) U * (size_t) Dx * sizeof(float));
    moe_rows_job j = {ein, ctx->moe_x, ctx->moe_y, eout, NULL, wt, l->ffn_gate_inp_shexp, Dx, k};
    for (int32_t e = 0; e < E; e++) {
        const int32_t n = start[e + 1] - start[e];
        if (!n) continue;
        j.li = list + start[e];
        tk_par_rows(ctx->pool, n, Dx, gather_rows, &j);
        TK_CHECK(expert(ctx, &l->ffn_gate_exps, &l->ffn_up_exps, &l->ffn_down_exps, e, j.xg, n, hp->ffn.swiglu_clamp_exp, j.yg));
        tk_par_rows(ctx->pool, n, Dx, scatter_rows, &j);
    }
    if (Dl) TK_CHECK(tk_matmul(&l->ffn_latent_up, 0, ctx->moe_ol, U, out, &ctx->mm));
    j.x = ctx->cur; j.out = out; j.D = D;
    if (l->n_ff_shexp) {
        TK_CHECK(expert(ctx, &l->ffn_gate_shexp, &l->ffn_up_shexp, &l->ffn_down_shexp, 0, ctx->cur, U, hp->ffn.swiglu_clamp_shexp,
                      j.yg));
        tk_par_rows(ctx->pool, U, D, shared_rows, &j);
    }
    return TK_OK;
}

const tk_ffn_ops tk_ffn_moe = {
    .name = "moe",
    .bind = moe_bind,
    .forward = moe_forward,
};
