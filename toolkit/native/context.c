/* context.c: a model's inference context: memory, scratch, batch -> ubatch split, decode,
 * and the public memory operations.
 *
 * Batches are split "equal" (ref: llama.cpp llama_batch_allocr::split_equal): a ubatch
 * takes up to n_ubatch tokens as n_seqs sequences x the same number of consecutive tokens
 * each, so a recurrent layer scans every row of the ubatch the same number of steps.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/attn.h"
#include "layers/layer.h"
#include "quants/repack.h"

/* ==== lifecycle ====================================================================== */

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

void tk_context_free(tk_context * c) {
    if (!c) return;
    if (c->mem) c->mem->free(c->mem);
    tk_pool_free(c->pool);
    float * bufs[] = {c->x, c->cur, c->out, c->proj, c->conv, c->narrow, c->step, c->dt, c->gate, c->y, c->q, c->k,
                      c->v, c->att, c->g, c->u, c->moe_x, c->row, c->vec, c->mix, c->hx, c->hn, c->hg, c->hl, c->hi, c->pe,
                      c->pc, c->attn};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(c->act);
    free(c->dsa_sel);
    tk_dsa_cache_free(c);
    free(c->mm.rp_prep);
    free(c->work);
    free(c->ub.token);
    free(c->ub.pos);
    free(c->ub.seq);
    free(c->ub.out_row);
    free(c->ub.snap_skip_last);
    free(c->ub.bidx);
    free(c);
}

/* The scratch the model's layers need: the largest of what each layer's kind declares. */
static tk_scratch scratch_of(const tk_model * m, const tk_context_params * p, int32_t n_ubatch, int n_threads) {
    tk_scratch sc;
    memset(&sc, 0, sizeof sc);
    sc.gdn_min = p->gdn_min;
    sc.kda_min = p->kda_min;
    sc.lightning_min = p->lightning_min;
    sc.kv_typed = p->type_k != TK_KV_F32 || p->type_v != TK_KV_F32;
    for (int i = 0; i < m->hp.n_layer; i++) {
        const tk_mixer_ops * ops = tk_mixer_ops_of(m->hp.layer_kinds[i]);
        if (ops && ops->scratch) ops->scratch(m, i, n_ubatch, n_threads, &sc);
    }
    return sc;
}

/* floats per token of the MoE block (ffn_moe.c, carved from moe_x: the gathered rows and their
 * outputs [2 D], the router's logits [E], the chosen experts' weights, ids and token lists
 * [3 k]); 0 for a model without MoE layers */
static size_t moe_width(const tk_model * m) {
    const tk_hparams * hp = &m->hp;
    int has_moe = 0;
    for (int i = 0; i < hp->n_layer; i++) has_moe |= hp->ffn_kinds[i] == TK_FFN_MOE;
    if (!has_moe) return 0;
    const size_t D = (size_t) hp->n_embd, Dl = (size_t) hp->moe.latent_size;
    /* latent MoE: the gathered rows are Dl wide, plus the ubatch's latent inputs and sums [2 Dl] */
    const size_t W = Dl > D ? Dl : D;
    return 2 * W + (Dl ? 2 * Dl : 0) + (size_t) hp->moe.n_expert + 3 * (size_t) hp->moe.n_expert_used;
}

/* hyper-connection widths (all 0 without them): hcD, the low rank R, hc, the PLE row Ep */
typedef struct { size_t hd, r, hc, ep; } hc_widths;

static hc_widths hc_widths_of(const tk_model * m) {
    const tk_hparams * hp = &m->hp;
    hc_widths w = {0, 0, 0, 0};
    if (!tk_hc_on(hp)) return w;
    w.hc = (size_t) hp->hc.count;
    w.hd = w.hc * (size_t) hp->n_embd;
    w.r = (size_t) m->hc_rank;
    if (m->ple_row_dim) w.ep = (size_t) m->ple_row_dim * (size_t) ((hp->ple.ngram_size - 1) * hp->ple.heads_per_ngram);
    return w;
}

/* ---- the scratch plan: every buffer of the forward pass, for alloc_scratch and the estimate ----
 * The float buffers (the tk_context field each one is, and its floats: [n_ubatch, width] as
 * tk_internal.h gives them), the quantized activations and the kinds' workspace.  alloc_scratch
 * allocates exactly these and the estimate sums them (plan_bytes), so the report of a context
 * and tk_context_memory_estimate agree by construction. */
#define PLAN_MAX 32

typedef struct {
    struct { size_t field, n; } buf[PLAN_MAX];   /* offsetof(tk_context, a float *), floats */
    int n_buf;
    size_t row_n, vec_n;       /* widest weight row a matmul dequantizes (+ 1); per-thread vector floats */
    size_t act_bytes;          /* quantized activation rows: tk_mm_act_bytes(n_ubatch, row_n) */
    size_t dsa_bytes;          /* the DSA selection rows and kept pools (tk_dsa_cache_bytes; 0 without DSA) */
    size_t work_bytes;         /* the kinds' workspace (0: none) */
} scratch_plan;

#define PLAN(sp, fieldname, floats) \
    ((sp)->buf[(sp)->n_buf].field = offsetof(tk_context, fieldname), (sp)->buf[(sp)->n_buf++].n = (floats))

static void plan_scratch(const tk_model * model, const tk_context_params * p, int n_threads, scratch_plan * sp) {
    const tk_hparams * hp = &model->hp;
    const int32_t n_ubatch = p->n_ubatch, n_ctx = p->n_ctx;
    const size_t U = (size_t) n_ubatch, D = (size_t) hp->n_embd, DI = (size_t) hp->ssm.d_inner;
    const tk_scratch sc = scratch_of(model, p, n_ubatch, n_threads);
    const size_t ff_w = (size_t) model->max_ff, q_w = sc.q;
    const hc_widths hw = hc_widths_of(model);
    memset(sp, 0, sizeof *sp);
    sp->row_n = zmax(zmax(D, DI), zmax(zmax(q_w, ff_w), (size_t) hp->ssm.dt_rank)) + 1;
    sp->row_n = zmax(sp->row_n, zmax(hw.hd, zmax(hw.ep, hw.r)) + 1);
    sp->row_n = zmax(sp->row_n, zmax(sc.y, sc.narrow) + 1);   /* out-projections of y, low-rank second halves */
    sp->vec_n = zmax(zmax((size_t) n_ctx, (size_t) hp->moe.n_expert), zmax((size_t) hp->ssm.n_head, 1));
    PLAN(sp, x, U * D);
    PLAN(sp, cur, U * D);
    PLAN(sp, out, U * D);
    PLAN(sp, proj, U * sc.proj);
    PLAN(sp, conv, U * sc.conv);
    PLAN(sp, narrow, U * sc.narrow);
    PLAN(sp, step, U * sc.step);
    PLAN(sp, dt, U * sc.dt);
    PLAN(sp, gate, U * sc.gate);
    PLAN(sp, y, U * sc.y);
    PLAN(sp, q, U * q_w);
    PLAN(sp, k, U * sc.kv);
    PLAN(sp, v, U * sc.kv);
    PLAN(sp, att, U * q_w);
    PLAN(sp, g, U * ff_w);
    PLAN(sp, u, U * ff_w);
    PLAN(sp, row, sp->row_n * (size_t) n_threads);
    PLAN(sp, vec, sp->vec_n * (size_t) n_threads);
    if (sc.mix) PLAN(sp, mix, U * sc.mix);   /* only models with a parallel layer have it */
    if (sc.attn_part) PLAN(sp, attn, tk_attn_buffer_floats(sc.attn_part, n_ctx, n_threads));   /* attention models */
    if (model->nextn_eh_proj.data) {         /* an MTP block (layers/mtp.c): [enorm(e); hnorm(h)] rows */
        PLAN(sp, mtp_in, U * 2 * D);
        sp->row_n = zmax(sp->row_n, 2 * D + 1);
    }
    if (moe_width(model)) PLAN(sp, moe_x, U * moe_width(model));   /* MoE models only: one block, carved */
    if (hw.hd) {                             /* hyper-connections (qwen4exp) */
        PLAN(sp, hx, U * hw.hd);
        PLAN(sp, hn, U * hw.hd);
        PLAN(sp, hg, U * zmax(hw.hd, hw.hc * hw.hc));   /* mHC: the comb matrices */
        PLAN(sp, hl, U * zmax(hw.r, hw.hc));
        PLAN(sp, hi, U * hw.hc);
        PLAN(sp, pe, U * zmax(hw.ep, 1));
        PLAN(sp, pc, U * hw.hd);
    }
    for (int i = 0; i < sp->n_buf; i++) sp->buf[i].n = zmax(sp->buf[i].n, 1);   /* a kind's unused buffer: 1 float */
    sp->act_bytes = tk_mm_act_bytes((int64_t) U, (int64_t) sp->row_n);
    sp->work_bytes = sc.work_bytes;
    sp->dsa_bytes = tk_dsa_cache_bytes(model, n_ctx, p->n_seq_max, n_ubatch);
}

/* floats of the plan's attention buffer (0: none) */
static size_t sc_attn_floats(const scratch_plan * sp) {
    for (int i = 0; i < sp->n_buf; i++)
        if (sp->buf[i].field == offsetof(tk_context, attn)) return sp->buf[i].n;
    return 0;
}

/* bytes of the plan (the report's compute_bytes) */
static uint64_t plan_bytes(const scratch_plan * sp) {
    uint64_t b = tk_sat_add(tk_sat_add(zmax(sp->act_bytes, 1), sp->work_bytes), sp->dsa_bytes);
    for (int i = 0; i < sp->n_buf; i++) b = tk_sat_add(b, tk_sat_mul(sp->buf[i].n, sizeof(float)));
    return b;
}

/* The float scratch of the forward pass, the quantized activations and the workspace, as the
 * plan gives them (counted in scratch_bytes), and the ubatch arrays. */
static tk_status alloc_scratch(tk_context * c, int n_threads) {
    const size_t U = (size_t) c->params.n_ubatch;
    scratch_plan sp;
    plan_scratch(c->model, &c->params, n_threads, &sp);
    c->row_n = sp.row_n;
    c->vec_n = sp.vec_n;
    c->attn_n = sc_attn_floats(&sp);
    for (int i = 0; i < sp.n_buf; i++) {
        float ** slot = (float **) (void *) ((char *) c + sp.buf[i].field);
        *slot = malloc(sp.buf[i].n * sizeof(float));
        c->scratch_bytes += sp.buf[i].n * sizeof(float);
        if (!*slot) return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating scratch (%zu floats)", sp.buf[i].n);
    }
    if (c->moe_x) {            /* the MoE block (moe_width), carved */
        const tk_hparams * hp = &c->model->hp;
        const size_t D = (size_t) hp->n_embd, E = (size_t) hp->moe.n_expert, k = (size_t) hp->moe.n_expert_used;
        const size_t Dl = (size_t) hp->moe.latent_size, W = Dl > D ? Dl : D;
        c->moe_y = c->moe_x + U * W;
        c->moe_r = c->moe_y + U * W;
        c->moe_xl = Dl ? c->moe_r + U * E : NULL;     /* latent MoE: [U, Dl] inputs, [U, Dl] sums */
        c->moe_ol = Dl ? c->moe_xl + U * Dl : NULL;
        c->moe_wt = (Dl ? c->moe_ol + U * Dl : c->moe_r + U * E);
        c->moe_sel = (int32_t *) (c->moe_wt + U * k);
        c->moe_list = c->moe_sel + U * k;
    }
    c->act = malloc(zmax(sp.act_bytes, 1));
    c->scratch_bytes += zmax(sp.act_bytes, 1);
    if (!c->act) return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating scratch (%zu bytes of quantized activations)", sp.act_bytes);
    if (sp.work_bytes) {       /* a kind's workspace (Mamba-2: the chunked scan's, for runs of up to n_ubatch tokens) */
        c->work_bytes = sp.work_bytes;
        c->work = malloc(c->work_bytes);
        c->scratch_bytes += c->work_bytes;
        if (!c->work) return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating scratch (%zu bytes of workspace)", c->work_bytes);
    }
    c->mm = (tk_mm_work) {c->pool, c->row, c->row_n, c->act, sp.act_bytes, NULL, 0};
    if (c->model->rp_buf) {    /* repacked weights (tk_model_params.repack): their per-token terms, counted with the repacking */
        c->mm.rp_prep_bytes = tk_rp_prep_bytes((int64_t) U, (int64_t) sp.row_n);
        c->mm.rp_prep = malloc(c->mm.rp_prep_bytes);
        if (!c->mm.rp_prep) return TK_FAIL(TK_ERR_NOMEM, "out of memory allocating scratch (%zu bytes for repacked weights)", c->mm.rp_prep_bytes);
    }
    TK_CHECK(tk_dsa_cache_alloc(c));   /* counts its bytes (sp.dsa_bytes) in scratch_bytes */
    c->ub.token = malloc(U * sizeof(int32_t));
    c->ub.pos = malloc(U * sizeof(int32_t));
    c->ub.seq = malloc(U * sizeof(int32_t));
    c->ub.out_row = malloc(U * sizeof(int32_t));
    c->ub.snap_skip_last = calloc(U, 1);
    c->ub.bidx = malloc(U * sizeof(int32_t));
    if (!c->ub.token || !c->ub.pos || !c->ub.seq || !c->ub.out_row || !c->ub.snap_skip_last || !c->ub.bidx)
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    return TK_OK;
}

/* Which memories the model's layer kinds need: a KV cache, recurrent state, or both. */
typedef struct { int has_attn, has_rec; } layer_needs;

static layer_needs needs_of(const tk_hparams * hp) {
    layer_needs n = {0, 0};
    for (int i = 0; i < hp->n_layer; i++) {
        const tk_mixer_ops * ops = tk_mixer_ops_of(hp->layer_kinds[i]);
        n.has_attn |= ops && ops->kv_dim;
        n.has_rec |= ops && ops->rs_pieces;
    }
    return n;
}

/* The report of a context of these parameters, checkpoints and speculative window, computed:
 * the memories' figures as their constructors would size them (tk_memory_kv_estimate,
 * tk_memory_rs_estimate) and the scratch plan.  The parameters are already checked; n_ckpt,
 * k and flags are checked as the memories' setters check them. */
static tk_status estimate(const tk_model * model, const tk_context_params * p, int32_t n_ckpt, int32_t k, uint32_t flags,
                          tk_memory_report * r) {
    const layer_needs nd = needs_of(&model->hp);
    memset(r, 0, sizeof *r);
    if (nd.has_attn) tk_memory_kv_estimate(model, p->n_ctx, p->n_ubatch, p->n_seq_max, n_ckpt, k, p->type_k, p->type_v, r);
    if (nd.has_rec) TK_CHECK(tk_memory_rs_estimate(model, p->n_seq_max, n_ckpt, k, flags, r));
    scratch_plan sp;
    plan_scratch(model, p, p->n_threads > 0 ? p->n_threads : 1, &sp);
    r->compute_bytes = plan_bytes(&sp);
    return TK_OK;
}

/* Refuse a context larger than the machine's RAM before allocating any of it: such a request
 * would either fail part-way or be granted lazily (overcommit) and end in the OOM killer.
 * Bytes: the estimate's KV cache, recurrent state and scratch (checkpoints and a speculative
 * window are set, and checked, later). */
static tk_status check_memory(const tk_model * m, const tk_context_params * p) {
    tk_memory_report r;
    TK_CHECK(estimate(m, p, 0, 0, 0, &r));
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    const double ram = pages > 0 && psz > 0 ? (double) pages * (double) psz : 0.0;
    const double kv = (double) r.kv_bytes, rs = (double) r.recurrent_bytes, scratch = (double) r.compute_bytes;
    const double need = kv + rs + scratch, G = 1073741824.0;
    if (ram > 0 && need > ram)
        return TK_FAIL(TK_ERR_NOMEM, "context needs %.2f GiB (KV cache %.2f GiB for n_ctx = %d, recurrent state %.2f GiB for "
                       "n_seq_max = %d, scratch %.2f GiB for n_ubatch = %d), more than this machine's %.2f GiB of RAM",
                       need / G, kv / G, p->n_ctx, rs / G, p->n_seq_max, scratch / G, p->n_ubatch, ram / G);
    return TK_OK;
}

/* The memory the model's layer kinds need: kv (attention only), rs (recurrent only) or a
 * hybrid owning both. */
static tk_status new_memory(const tk_model * model, const tk_context_params * p, int has_attn, int has_rec, tk_memory ** out) {
    tk_memory * kv = NULL, * rs = NULL;
    *out = NULL;
    if (has_attn && model->hp.attn.swa_layers) {   /* sliding-window layers: a full and a sliding-window cache */
        tk_memory * full = NULL, * swa = NULL;
        TK_CHECK(tk_memory_kv_new_sel(model, p->n_ctx, p->n_ubatch, p->n_seq_max, TK_KV_FULL, p->type_k, p->type_v, &full));
        tk_status st = tk_memory_kv_new_sel(model, p->n_ctx, p->n_ubatch, p->n_seq_max, TK_KV_SWA, p->type_k, p->type_v, &swa);
        if (st != TK_OK) { full->free(full); return st; }
        TK_CHECK(tk_memory_iswa_new(model, full, swa, &kv));
    } else if (has_attn) TK_CHECK(tk_memory_kv_new(model, p->n_ctx, p->n_ubatch, p->type_k, p->type_v, &kv));
    if (has_rec) {
        const tk_status st = tk_memory_rs_new(model, p->n_seq_max, &rs);
        if (st != TK_OK) {
            if (kv) kv->free(kv);
            return st;
        }
    }
    if (kv && rs) return tk_memory_hybrid_new(kv, rs, p->n_seq_max, out);
    *out = kv ? kv : rs;
    return TK_OK;
}

/* The parameter ranges of tk_context_new, but for n_ctx's upper bound TK_MAX_CTX (checked after
 * the RAM, so that a huge request is told its size) */
static tk_status check_params(const tk_context_params * p) {
    if (p->n_seq_max <= 0 || p->n_seq_max > TK_MAX_SEQ) return TK_FAIL(TK_ERR_INVALID, "n_seq_max = %d must be in [1, %d]", p->n_seq_max, TK_MAX_SEQ);
    if (p->n_ubatch <= 0 || p->n_ubatch > 65536) return TK_FAIL(TK_ERR_INVALID, "n_ubatch = %d must be in [1, 65536]", p->n_ubatch);
    if (p->n_ctx <= 0) return TK_FAIL(TK_ERR_INVALID, "n_ctx = %d must be in [1, 2^24]", p->n_ctx);
    if (p->n_threads < 0 || p->n_threads > 256) return TK_FAIL(TK_ERR_INVALID, "n_threads = %d must be in [0, 256]", p->n_threads);
    const int32_t mins[] = {p->ssd_min, p->gdn_min, p->kda_min, p->lightning_min};
    static const char * const names[] = {"ssd_min", "gdn_min", "kda_min", "lightning_min"};
    for (int i = 0; i < 4; i++)
        if (mins[i] < TK_CHUNK_NEVER)
            return TK_FAIL(TK_ERR_INVALID, "%s = %d must be >= 0 (0: the default) or TK_CHUNK_NEVER", names[i], mins[i]);
    return TK_OK;
}
#define TK_MAX_CTX (1 << 24)

/* the ranges of tk_context_set_spec_window_ex's k and flags */
static tk_status check_spec_window(int32_t k, uint32_t flags) {
    if (k < 0 || k > 256) return TK_FAIL(TK_ERR_INVALID, "speculative window = %d must be in [0, 256]", k);
    if (flags & ~(uint32_t) TK_SPEC_NO_LAST) return TK_FAIL(TK_ERR_INVALID, "speculative window flags 0x%x: unknown bits", flags);
    return TK_OK;
}

tk_status tk_context_memory_estimate(const tk_model * model, const tk_context_params * params, int32_t n_checkpoints,
                                     int32_t draft_window, uint32_t spec_flags, tk_memory_report * report) {
    if (!model || !params || !report) return TK_FAIL(TK_ERR_INVALID, "model, params or report is NULL");
    TK_CHECK(check_params(params));
    if (params->n_ctx > TK_MAX_CTX) return TK_FAIL(TK_ERR_INVALID, "n_ctx = %d must be in [1, 2^24]", params->n_ctx);
    if (n_checkpoints < 0) return TK_FAIL(TK_ERR_INVALID, "checkpoints = %d must be >= 0", n_checkpoints);
    TK_CHECK(check_spec_window(draft_window, spec_flags));
    TK_CHECK(tk_kv_types_check(model, params->type_k, params->type_v));
    return estimate(model, params, n_checkpoints, draft_window, spec_flags, report);
}

tk_status tk_context_new(tk_model * model, const tk_context_params * params, tk_context ** out) {
    if (!out) return TK_FAIL(TK_ERR_INVALID, "out is NULL");
    *out = NULL;
    if (!model || !params) return TK_FAIL(TK_ERR_INVALID, "model or params is NULL");
    tk_context_params p = *params;
    TK_CHECK(check_params(&p));
    TK_CHECK(tk_kv_types_check(model, p.type_k, p.type_v));
    TK_CHECK(check_memory(model, &p));   /* before any allocation; names the size */
    if (p.n_ctx > TK_MAX_CTX) return TK_FAIL(TK_ERR_INVALID, "n_ctx = %d must be in [1, 2^24]", p.n_ctx);

    tk_context * c = calloc(1, sizeof *c);
    if (!c) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    c->model = model;
    c->params = p;
    const layer_needs nd = needs_of(&model->hp);
    const int n_threads = p.n_threads > 0 ? p.n_threads : 1;
    tk_status st = new_memory(model, &p, nd.has_attn, nd.has_rec, &c->mem);
    if (st == TK_OK) st = tk_pool_new(n_threads, &c->pool);
    if (st == TK_OK) st = alloc_scratch(c, n_threads);
    if (st != TK_OK) {
        tk_context_free(c);
        return st;
    }
    *out = c;
    return TK_OK;
}

/* ==== decode =========================================================================
 *
 * The split: the batch's tokens per sequence, in order; each ubatch takes the sequences with
 * tokens left (first-appearance order, at most n_ubatch of them) and the same number `len` of
 * consecutive tokens of each: the fewest any of them has left, at most n_ubatch / n_seqs, and
 * ending at the next periodic checkpoint of any of them (the memory snapshots there).
 * Keep-tail rule (ref: llama.cpp llama_batch_allocr::split_equal, n_keep_tail = n_rs_seq + 1):
 * with n_keep_tail = n > 0 the last n tokens of each sequence in the batch land in one ubatch,
 * so a memory that keeps per-token snapshots of a sequence's last n - 1 states (speculative
 * rollback) writes them all from its final ubatch.  Only the sequences whose remainder after
 * this ubatch is 0 or >= n stay (the longest such prefix); when the first one fails, it goes
 * alone: finished if its rest fits in n_ubatch, else cut so that n tokens remain.  Today's
 * memories snapshot whole states at ubatch ends, which any split serves, so it is 0 unless set
 * (tk_context_set_keep_tail). */

typedef struct {
    int32_t n_order, order[TK_MAX_SEQ];   /* sequences of the batch, first-appearance order */
    int32_t count[TK_MAX_SEQ];            /* tokens of each in the batch */
    int32_t done[TK_MAX_SEQ];             /* ... already in a ubatch */
    int32_t start[TK_MAX_SEQ];            /* first slot of each in idx */
    const int32_t * idx;                  /* [n_tokens] batch indices, sequence by sequence, in order */
} tk_split;

/* the keep-tail rule on a proposed ubatch (act[0..*n_act) x len); returns the new len */
static int32_t keep_tail(const tk_split * sp, const int32_t * act, int32_t * n_act, int32_t len, int32_t n_ub, int32_t keep) {
    if (keep <= 0) return len;
    int32_t n = 0;
    while (n < *n_act) {
        const int32_t rem = sp->count[act[n]] - sp->done[act[n]] - len;
        if (rem != 0 && rem < keep) break;
        n++;
    }
    if (n == 0) {              /* the first alone: to its end, or leaving keep tokens */
        const int32_t left = sp->count[act[0]] - sp->done[act[0]];
        len = left <= n_ub ? left : left - keep;
        n = 1;
    }
    *n_act = n;
    return len;
}

/* the next ubatch's sequences (act, *n_act; 0 when the batch is done) and tokens per sequence */
static int32_t split_next(tk_context * ctx, const tk_batch * b, const tk_split * sp, int32_t * act, int32_t * n_act) {
    const int32_t n_ub = ctx->params.n_ubatch;
    int32_t len = INT32_MAX;
    *n_act = 0;
    for (int32_t j = 0; j < sp->n_order && *n_act < n_ub; j++) {
        const int32_t s = sp->order[j];
        if (sp->done[s] < sp->count[s]) {
            act[(*n_act)++] = s;
            if (sp->count[s] - sp->done[s] < len) len = sp->count[s] - sp->done[s];
        }
    }
    if (!*n_act) return 0;
    if (len > n_ub / *n_act) len = n_ub / *n_act;
    for (int32_t j = 0; j < *n_act; j++) {   /* end a ubatch on a periodic checkpoint */
        const int32_t p = b->pos[sp->idx[sp->start[act[j]] + sp->done[act[j]]]];
        const int64_t room = (int64_t) ctx->mem->ckpt_next(ctx->mem, p - 1) - p + 1;
        if (room < len) len = (int32_t) room;
    }
    return keep_tail(sp, act, n_act, len, n_ub, ctx->n_keep_tail);
}

/* check the batch against the memory (ids, positions continuing each sequence) and count
 * each sequence's tokens into sp; *n_out: tokens that want logits */
static tk_status batch_check(tk_context * ctx, const tk_batch * b, tk_split * sp, int32_t * n_out) {
    const tk_hparams * hp = &ctx->model->hp;
    const int32_t n = b->n_tokens, n_seq_max = ctx->params.n_seq_max;
    int32_t next[TK_MAX_SEQ];
    *n_out = 0;
    for (int32_t s = 0; s < n_seq_max; s++) next[s] = ctx->mem->seq_pos_max(ctx->mem, s) + 1;
    for (int32_t i = 0; i < n; i++) {
        const int32_t tok = b->token[i], s = b->seq_id[i];
        if (tok < 0 || tok >= hp->n_vocab) return TK_FAIL(TK_ERR_INVALID, "batch[%d]: token id %d outside [0, %d)", i, tok, hp->n_vocab);
        if (s < 0 || s >= n_seq_max) return TK_FAIL(TK_ERR_INVALID, "batch[%d]: seq_id %d outside [0, n_seq_max=%d)", i, s, n_seq_max);
        if (b->pos[i] != next[s])
            return TK_FAIL(TK_ERR_INVALID, "batch[%d]: position %d for sequence %d, expected %d (positions continue the sequence)",
                           i, b->pos[i], s, next[s]);
        next[s]++;
        if (!sp->count[s]++) sp->order[sp->n_order++] = s;
        if (b->logits && b->logits[i]) (*n_out)++;
    }
    return TK_OK;
}

tk_status tk_decode(tk_context * ctx, const tk_batch * b, float * logits_out) {
    if (!ctx || !b) return TK_FAIL(TK_ERR_INVALID, "ctx or batch is NULL");
    const int32_t n = b->n_tokens;
    if (n <= 0) return TK_FAIL(TK_ERR_INVALID, "empty batch");
    if (!b->token || !b->pos || !b->seq_id) return TK_FAIL(TK_ERR_INVALID, "batch arrays missing");
    if (b->flags & ~(int32_t) TK_BATCH_SNAPSHOTS) return TK_FAIL(TK_ERR_INVALID, "batch flags 0x%x: unknown bits", (unsigned) b->flags);

    /* validate tokens, sequence ids and positions before touching the memory */
    tk_split sp;
    memset(&sp, 0, sizeof sp);
    int32_t n_out;
    TK_CHECK(batch_check(ctx, b, &sp, &n_out));
    if (n_out && !logits_out) return TK_FAIL(TK_ERR_INVALID, "logits_out is NULL but %d tokens want logits", n_out);
    if (ctx->model->nextn_eh_proj.data && !b->embd)
        return TK_FAIL(TK_ERR_INVALID, "batch: an MTP block needs each token's hidden state (tk_batch.embd is NULL)");
    if (!ctx->model->nextn_eh_proj.data && b->embd)
        return TK_FAIL(TK_ERR_INVALID, "batch: tk_batch.embd is set but the model is not an MTP block");
    if (b->hidden_out && tk_hc_on(&ctx->model->hp) && ctx->model->hp.hc.sinkhorn_iters <= 0)   /* mHC writes it */
        return TK_FAIL(TK_ERR_UNSUPPORTED, "batch: hidden_out is not supported with qwen4exp's hyper-connections");
    TK_CHECK(ctx->mem->can_fit(ctx->mem, n));
    __atomic_store_n(&ctx->abort_requested, 0, __ATOMIC_RELAXED);

    /* per-sequence token lists (batch indices in order) */
    int32_t * idx = malloc((size_t) n * sizeof(int32_t));
    int32_t * out_row = malloc((size_t) n * sizeof(int32_t));
    if (!idx || !out_row) { free(idx); free(out_row); return TK_FAIL(TK_ERR_NOMEM, "out of memory"); }
    for (int32_t j = 0, o = 0; j < sp.n_order; j++) { sp.start[sp.order[j]] = o; o += sp.count[sp.order[j]]; }
    {
        int32_t fill[TK_MAX_SEQ] = {0}, r = 0;
        for (int32_t i = 0; i < n; i++) {
            const int32_t s = b->seq_id[i];
            idx[sp.start[s] + fill[s]++] = i;
            out_row[i] = (b->logits && b->logits[i]) ? r++ : -1;
        }
    }
    sp.idx = idx;

    ctx->embd_in = b->embd;    /* for this call's forward passes only (cleared at its end) */
    ctx->hidden_out = b->hidden_out;
    tk_status st = TK_OK;
    tk_ubatch * ub = &ctx->ub;
    ctx->n_trace = 0;
    for (;;) {
        int32_t act[TK_MAX_SEQ], n_act;
        const int32_t len = split_next(ctx, b, &sp, act, &n_act);
        if (!n_act) break;
        ub->n_seqs = n_act;
        ub->keep_snaps = (b->flags & TK_BATCH_SNAPSHOTS) != 0;
        ub->n_seq_tokens = len;
        ub->n_tokens = n_act * len;
        for (int32_t j = 0; j < n_act; j++) {
            const int32_t s = act[j];
            ub->seq[j] = s;
            ub->snap_skip_last[j] = (ctx->spec_flags & TK_SPEC_NO_LAST) && sp.done[s] + len == sp.count[s];
            for (int32_t t = 0; t < len; t++) {
                const int32_t bi = idx[sp.start[s] + sp.done[s] + t];
                ub->token[j * len + t] = b->token[bi];
                ub->pos[j * len + t] = b->pos[bi];
                ub->out_row[j * len + t] = out_row[bi];
                ub->bidx[j * len + t] = bi;
            }
            sp.done[s] += len;
        }
        if (ctx->n_trace < TK_TRACE_MAX) {
            ctx->trace[ctx->n_trace][0] = n_act;
            ctx->trace[ctx->n_trace][1] = len;
        }
        ctx->n_trace++;
        st = ctx->mem->prepare(ctx->mem, ub);
        if (st == TK_OK) st = tk_forward_ubatch(ctx, ub, logits_out);
        if (st != TK_OK) break;
        ctx->mem->after_ubatch(ctx->mem, ub);
    }
    /* a checkpoint at the end of each multi-token run (a prompt or a turn); a verify run of
     * at most k + 1 tokens (TK_BATCH_SNAPSHOTS) has the speculative window instead */
    const int32_t covered = (b->flags & TK_BATCH_SNAPSHOTS) && ctx->spec_window > 0 ? ctx->spec_window + 1 : 1;
    for (int32_t j = 0; st == TK_OK && j < sp.n_order; j++)
        if (sp.count[sp.order[j]] > covered) ctx->mem->checkpoint(ctx->mem, sp.order[j]);
    if (st != TK_OK) {
        /* a half-run ubatch leaves states and cells inconsistent: drop the batch's sequences */
        for (int32_t j = 0; j < sp.n_order; j++) {
            ctx->mem->seq_rm(ctx->mem, sp.order[j], 0, -1);
            tk_dsa_forget(ctx, sp.order[j], 0);
        }
    }
    ctx->embd_in = NULL;
    ctx->hidden_out = NULL;
    free(idx);
    free(out_row);
    return st;
}

tk_status tk_context_set_keep_tail(tk_context * ctx, int32_t n) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    if (n < 0 || n >= ctx->params.n_ubatch)
        return TK_FAIL(TK_ERR_INVALID, "keep_tail = %d must be in [0, n_ubatch = %d)", n, ctx->params.n_ubatch);
    ctx->n_keep_tail = n;
    return TK_OK;
}

tk_status tk_context_set_spec_window_ex(tk_context * ctx, int32_t k, uint32_t flags) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    TK_CHECK(check_spec_window(k, flags));
    if (ctx->mem->set_spec_window) TK_CHECK(ctx->mem->set_spec_window(ctx->mem, k, flags));
    ctx->spec_window = k;
    ctx->spec_flags = flags;
    return TK_OK;
}

tk_status tk_context_set_spec_window(tk_context * ctx, int32_t k) { return tk_context_set_spec_window_ex(ctx, k, 0); }

int32_t tk_context_ubatches(const tk_context * ctx, int32_t * n_seqs, int32_t * n_seq_tokens, int32_t cap) {
    if (!ctx) return 0;
    for (int32_t i = 0; i < cap && i < ctx->n_trace && i < TK_TRACE_MAX; i++) {
        n_seqs[i] = ctx->trace[i][0];
        n_seq_tokens[i] = ctx->trace[i][1];
    }
    return ctx->n_trace;
}

void tk_context_abort(tk_context * ctx) {
    if (ctx) __atomic_store_n(&ctx->abort_requested, 1, __ATOMIC_RELAXED);
}

/* ==== memory operations ============================================================== */

tk_status tk_check_seq(const tk_context * ctx, int32_t seq, int allow_all) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    if ((allow_all && seq == -1) || (seq >= 0 && seq < ctx->params.n_seq_max)) return TK_OK;
    return TK_FAIL(TK_ERR_INVALID, "sequence id %d outside [0, n_seq_max=%d)", seq, ctx->params.n_seq_max);
}

tk_status tk_memory_seq_rm(tk_context * ctx, int32_t seq, int32_t p0, int32_t p1, int32_t * removed) {
    TK_CHECK(tk_check_seq(ctx, seq, 1));
    if (!removed) return TK_FAIL(TK_ERR_INVALID, "removed is NULL");
    *removed = ctx->mem->can_seq_rm(ctx->mem, seq, p0, p1);
    if (*removed) {
        ctx->mem->seq_rm(ctx->mem, seq, p0, p1);
        tk_dsa_forget(ctx, seq, p0);
    }
    return TK_OK;
}

tk_status tk_memory_seq_cp(tk_context * ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    TK_CHECK(tk_check_seq(ctx, src, 0));
    TK_CHECK(tk_check_seq(ctx, dst, 0));
    ctx->mem->seq_cp(ctx->mem, src, dst, p0, p1);
    tk_dsa_forget(ctx, dst, 0);
    return TK_OK;
}

tk_status tk_memory_seq_keep(tk_context * ctx, int32_t seq) {
    TK_CHECK(tk_check_seq(ctx, seq, 0));
    ctx->mem->seq_keep(ctx->mem, seq);
    for (int32_t s = 0; s < ctx->params.n_seq_max; s++)
        if (s != seq) tk_dsa_forget(ctx, s, 0);
    return TK_OK;
}

tk_status tk_memory_seq_pos_min(tk_context * ctx, int32_t seq, int32_t * pos) {
    TK_CHECK(tk_check_seq(ctx, seq, 0));
    *pos = ctx->mem->seq_pos_min(ctx->mem, seq);
    return TK_OK;
}

tk_status tk_memory_seq_pos_max(tk_context * ctx, int32_t seq, int32_t * pos) {
    TK_CHECK(tk_check_seq(ctx, seq, 0));
    *pos = ctx->mem->seq_pos_max(ctx->mem, seq);
    return TK_OK;
}

void tk_memory_clear(tk_context * ctx) {
    if (!ctx) return;
    ctx->mem->clear(ctx->mem);
    tk_dsa_forget(ctx, -1, 0);
}
