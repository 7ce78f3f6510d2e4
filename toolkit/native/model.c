/* model.c: mmap a GGUF file read-only and bind the tensors an architecture needs.
 *
 * Python (toolkit.gguf_io) parses the GGUF header and hands over a tensor table
 * (name, absolute offset, ggml type, ne[4]); nothing here trusts it: every tensor's type,
 * shape and byte range is checked against the file size, and every tensor the
 * architecture needs against the shape the hparams imply, before anything is read.
 * Large matrices stay in the mapping (zero copy); small vectors (norms, biases, A, D,
 * conv kernels) are copied to float32 arrays owned by the model.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "layers/layer.h"
#include "quants/repack.h"

/* ==== tensor table validation ======================================================== */

static tk_status validate_table(const tk_table * tab) {
    for (int64_t i = 0; i < tab->n; i++) {
        const tk_tensor_desc * t = &tab->t[i];
        const char * name = t->name ? t->name : "(null)";
        if (!t->name) return TK_FAIL(TK_ERR_INVALID, "%s: tensor #%lld has no name", tab->path, (long long) i);
        const tk_type_traits * tt = tk_type_traits_get(t->type);
        if (!tt) return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has unknown ggml type %d", tab->path, name, t->type);
        const int64_t blck = tt->blck_size, bytes = tt->type_size;
        if (t->n_dims < 1 || t->n_dims > 4)
            return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has %d dims (1..4 allowed)", tab->path, name, t->n_dims);
        /* element count and byte size, overflow-checked */
        uint64_t nel = 1;
        for (int d = 0; d < 4; d++) {
            if (t->ne[d] <= 0 || (d >= t->n_dims && t->ne[d] != 1))
                return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has invalid ne[%d] = %lld", tab->path, name, d, (long long) t->ne[d]);
            /* nel * ne[d] <= 2^40 elements, checked by division so the product never wraps */
            if ((uint64_t) t->ne[d] > (UINT64_C(1) << 40) || nel > (UINT64_C(1) << 40) / (uint64_t) t->ne[d])
                return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' is implausibly large (more than 2^40 elements)", tab->path, name);
            nel *= (uint64_t) t->ne[d];
        }
        if (t->ne[0] % blck)
            return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s': row of %lld elements is not a multiple of the %s block size %lld",
                           tab->path, name, (long long) t->ne[0], tt->name, (long long) blck);
        uint64_t nbytes = nel / (uint64_t) blck * (uint64_t) bytes;
        if (t->offset > tab->map_size || nbytes > tab->map_size - t->offset)
            return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' data [%llu, %llu) lies beyond the end of the file (%llu bytes)",
                           tab->path, name, (unsigned long long) t->offset, (unsigned long long) (t->offset + nbytes),
                           (unsigned long long) tab->map_size);
        if (t->offset % (uint64_t) tt->align)
            return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' data offset %llu is not aligned for %s",
                           tab->path, name, (unsigned long long) t->offset, tt->name);
    }
    return TK_OK;
}

const tk_tensor_desc * tk_table_find(const tk_table * tab, const char * name) {
    for (int64_t i = 0; i < tab->n; i++)
        if (strcmp(tab->t[i].name, name) == 0) return &tab->t[i];
    return NULL;
}

/* Compare shapes ignoring size-1 dims ([1, H] == [H]). */
static int same_shape(const int64_t * ne, int n_exp, const int64_t * exp) {
    int64_t a[4], b[4];
    int na = 0, nb = 0;
    for (int d = 0; d < 4; d++) if (ne[d] != 1) a[na++] = ne[d];
    for (int d = 0; d < n_exp; d++) if (exp[d] != 1) b[nb++] = exp[d];
    if (na != nb) return 0;
    for (int d = 0; d < na; d++) if (a[d] != b[d]) return 0;
    return 1;
}

static void shape_str(char * buf, size_t n, const int64_t * ne, int nd) {
    size_t o = 0;
    o += (size_t) snprintf(buf + o, n - o, "[");
    for (int d = 0; d < nd && o < n; d++) o += (size_t) snprintf(buf + o, n - o, d ? ", %lld" : "%lld", (long long) ne[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Bind a matrix-like weight (stays in the mapping).  exp: expected ggml shape (n_exp dims).
 * A missing optional tensor leaves w->data NULL. */
static tk_status remember(tk_model * m, tk_weight * w) {
    if (m->n_bound == m->cap_bound) {
        int32_t cap = m->cap_bound ? 2 * m->cap_bound : 64;
        tk_weight ** q = realloc(m->bound, (size_t) cap * sizeof *q);
        if (!q) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
        m->bound = q;
        m->cap_bound = cap;
    }
    m->bound[m->n_bound++] = w;
    return TK_OK;
}

tk_status tk_bind_weight(tk_model * m, const tk_table * tab, const char * name, int n_exp, const int64_t * exp,
                         int required, tk_weight * w) {
    memset(w, 0, sizeof *w);
    const tk_tensor_desc * t = tk_table_find(tab, name);
    if (!t) {
        if (required) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s'", tab->path, name);
        return TK_OK;
    }
    if (!same_shape(t->ne, n_exp, exp)) {
        char a[96], b[96];
        shape_str(a, sizeof a, t->ne, t->n_dims);
        shape_str(b, sizeof b, exp, n_exp);
        return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has shape %s, expected %s", tab->path, name, a, b);
    }
    /* the type is in the table (validate_table); refuse one this build cannot read */
    const tk_type_traits * tt = tk_type_traits_get(t->type);
    if (!tt->to_float)
        return TK_FAIL(TK_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which this build cannot dequantize",
                       tab->path, name, tt->name);
    if (tab->used) tab->used[t - tab->t] = 1;
    w->data = tab->base + t->offset;
    w->type = t->type;
    for (int d = 0; d < 4; d++) w->ne[d] = t->ne[d];
    w->row_bytes = (size_t) (t->ne[0] / tt->blck_size * tt->type_size);
    /* a repacking candidate: a weight kept in the model (not tk_bind_vec's copy source), not a
     * gather-only table (token_embd: added at load when tied to the output) */
    const int kept = ((const uint8_t *) w >= (const uint8_t *) m->layers &&
                      (const uint8_t *) w < (const uint8_t *) (m->layers + m->hp.n_layer)) ||
                     ((const uint8_t *) w >= (const uint8_t *) m && (const uint8_t *) w < (const uint8_t *) (m + 1));
    if (kept && !strstr(name, "embd") && !strstr(name, "ple_table") && tk_repack_matrix_bytes(w->type, w->ne[0], w->ne[1]))
        TK_CHECK(remember(m, w));
    return TK_OK;
}

static tk_status own(tk_model * m, float * p) {
    if (m->n_owned == m->cap_owned) {
        int32_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float ** q = realloc(m->owned, (size_t) cap * sizeof *q);
        if (!q) { free(p); return TK_FAIL(TK_ERR_NOMEM, "out of memory"); }
        m->owned = q;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return TK_OK;
}

float * tk_model_alloc(tk_model * m, size_t n) {
    float * p = malloc((n ? n : 1) * sizeof(float));
    if (!p || own(m, p) != TK_OK) return NULL;   /* own frees p when it fails */
    return p;
}

/* Bind a small tensor and copy it to an owned float32 array (*out NULL when absent and optional). */
tk_status tk_bind_vec(tk_model * m, const tk_table * tab, const char * name, int n_exp, const int64_t * exp,
                      int required, float ** out) {
    tk_weight w;
    *out = NULL;
    TK_CHECK(tk_bind_weight(m, tab, name, n_exp, exp, required, &w));
    if (!w.data) return TK_OK;
    int64_t rows = w.ne[1] * w.ne[2] * w.ne[3];
    float * p = malloc((size_t) (rows * w.ne[0]) * sizeof(float));
    if (!p) return TK_FAIL(TK_ERR_NOMEM, "out of memory copying '%s'", name);
    TK_CHECK(own(m, p));
    for (int64_t r = 0; r < rows; r++) TK_CHECK(tk_weight_row(&w, r, p + r * w.ne[0]));
    for (int64_t i = 0; i < rows * w.ne[0]; i++)
        if (!isfinite(p[i])) return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has a non-finite value at %lld", tab->path, name, (long long) i);
    *out = p;
    return TK_OK;
}


/* Every tensor of the table was bound: a tensor the runtime never reads (a bias this build does
 * not apply, a tensor of a newer converter, a file for a variant the hparams do not describe)
 * would otherwise be dropped without a word and the model run wrong.  TK_ERR_INVALID naming the
 * file, how many, and the first few. */
static tk_status check_all_bound(const tk_table * tab) {
    int64_t n = 0;
    char names[256] = "";
    size_t len = 0;
    for (int64_t i = 0; i < tab->n; i++) {
        if (tab->used[i]) continue;
        if (n < 3) {
            int k = snprintf(names + len, sizeof names - len, "%s'%s'", n ? ", " : "", tab->t[i].name);
            if (k > 0) len = len + (size_t) k < sizeof names ? len + (size_t) k : sizeof names - 1;
        }
        n++;
    }
    if (!n) return TK_OK;
    return TK_FAIL(TK_ERR_INVALID, "%s: %lld tensor%s the runtime does not use: %s%s (written for a configuration "
                   "its keys do not describe, or by a newer converter)", tab->path, (long long) n, n == 1 ? "" : "s",
                   names, n > 3 ? ", ..." : "");
}

/* ==== hparams checks ================================================================= */

static tk_status check_hparams(const tk_hparams * hp) {
    if (hp->arch < 0 || hp->arch >= TK_ARCH_COUNT) return TK_FAIL(TK_ERR_UNSUPPORTED, "unknown architecture id %d", hp->arch);
    if (hp->n_layer <= 0 || hp->n_layer > 4096) return TK_FAIL(TK_ERR_INVALID, "n_layer = %d out of range", hp->n_layer);
    if (hp->n_embd <= 0 || hp->n_vocab <= 0) return TK_FAIL(TK_ERR_INVALID, "n_embd = %d, n_vocab = %d out of range", hp->n_embd, hp->n_vocab);
    if (!hp->layer_kinds || !hp->ffn_kinds || !hp->n_head_kv) return TK_FAIL(TK_ERR_INVALID, "per-layer arrays missing");
    int has_moe = 0;
    for (int i = 0; i < hp->n_layer; i++) {
        int k = hp->layer_kinds[i], f = hp->ffn_kinds[i];
        const tk_mixer_ops * ops = tk_mixer_ops_of(k);
        if (!ops) return TK_FAIL(TK_ERR_UNSUPPORTED, "layer %d: unknown layer kind %d", i, k);
        if (f != TK_FFN_NONE && !tk_ffn_ops_of(f)) return TK_FAIL(TK_ERR_UNSUPPORTED, "layer %d: unknown ffn kind %d", i, f);
        TK_CHECK(ops->check(hp, i));
        if (f == TK_FFN_MOE) has_moe = 1;
    }
    if (has_moe && (hp->moe.n_expert <= 0 || hp->moe.n_expert_used <= 0 || hp->moe.n_expert_used > hp->moe.n_expert || hp->moe.n_expert > 4096))
        return TK_FAIL(TK_ERR_INVALID, "n_expert = %d, n_expert_used = %d invalid", hp->moe.n_expert, hp->moe.n_expert_used);
    if (!(hp->logit_softcap >= 0) || !isfinite(hp->logit_softcap))
        return TK_FAIL(TK_ERR_INVALID, "logit_softcap = %g must be finite and >= 0", hp->logit_softcap);
    if (hp->hc.count < 0 || hp->hc.count > 64) return TK_FAIL(TK_ERR_INVALID, "hc_count = %d out of range", hp->hc.count);
    if (hp->hc.sinkhorn_iters < 0 || hp->hc.sinkhorn_iters > 1000 || !(hp->hc.eps >= 0) || !isfinite(hp->hc.eps) ||
        (hp->hc.sinkhorn_iters > 0 && (hp->hc.count < 1 || hp->ple.index)))
        return TK_FAIL(TK_ERR_INVALID, "mHC: hc_count = %d, sinkhorn iterations = %d, epsilon = %g invalid",
                       hp->hc.count, hp->hc.sinkhorn_iters, hp->hc.eps);
    if (hp->ple.index) {       /* qwen4exp PLE: hyper-connections, and only on gated-delta-net layers */
        if (hp->hc.count < 2) return TK_FAIL(TK_ERR_INVALID, "PLE layers need hyper-connections (hc_count = %d)", hp->hc.count);
        if (hp->ple.ngram_size < 2 || hp->ple.ngram_size > 32 || hp->ple.heads_per_ngram <= 0 ||
            hp->ple.heads_per_ngram > 4096 || hp->ple.conv_kernel < 1 || hp->ple.conv_kernel > 64 || !hp->ple.consts ||
            hp->ple.n_module <= 0 || hp->ple.eos_token < 0 || hp->ple.eos_token >= hp->n_vocab)
            return TK_FAIL(TK_ERR_INVALID, "PLE hparams out of range (ngram_size %d, heads_per_ngram %d, conv_kernel %d, "
                           "eos_token_id %d)", hp->ple.ngram_size, hp->ple.heads_per_ngram, hp->ple.conv_kernel, hp->ple.eos_token);
        for (int i = 0; i < hp->n_layer; i++) {
            const int32_t k = hp->ple.index[i];
            if (k < -1 || k >= hp->ple.n_module) return TK_FAIL(TK_ERR_INVALID, "layer %d: PLE module %d out of range", i, k);
            if (k >= 0 && hp->layer_kinds[i] != TK_LAYER_GDN)
                return TK_FAIL(TK_ERR_INVALID, "layer %d: a PLE layer must be a gated-delta-net layer", i);
        }
    }
    if (!(hp->rms_eps >= 0) || !isfinite(hp->logit_scale) || hp->logit_scale == 0)
        return TK_FAIL(TK_ERR_INVALID, "rms_eps = %g / logit_scale = %g invalid", hp->rms_eps, hp->logit_scale);
    if (!(hp->ssm.dt_b_c_eps >= 0) || !isfinite(hp->ssm.dt_b_c_eps))
        return TK_FAIL(TK_ERR_INVALID, "ssm_dt_b_c_eps = %g invalid", hp->ssm.dt_b_c_eps);
    if (hp->attn.swa_layers) {      /* sliding-window layers: attention kinds (a KV cache), a window of at least 1 */
        if (hp->attn.n_swa <= 0 || hp->attn.n_swa > (1 << 24))
            return TK_FAIL(TK_ERR_INVALID, "sliding window n_swa = %d must be in [1, 2^24]", hp->attn.n_swa);
        for (int i = 0; i < hp->n_layer; i++) {
            const tk_mixer_ops * ops = tk_mixer_ops_of(hp->layer_kinds[i]);
            if (hp->attn.swa_layers[i] && (hp->layer_kinds[i] != TK_LAYER_ATTENTION || !ops->kv_dim))
                return TK_FAIL(TK_ERR_INVALID, "layer %d: only an attention layer can be sliding-window", i);
        }
    }
    if (!(hp->gdn.beta_scale >= 0) || !isfinite(hp->gdn.beta_scale) || !(hp->gdn.norm_eps >= 0) || !isfinite(hp->gdn.norm_eps))
        return TK_FAIL(TK_ERR_INVALID, "gdn_beta_scale = %g / gdn_norm_eps = %g invalid", hp->gdn.beta_scale, hp->gdn.norm_eps);
    if (!(hp->ffn.swiglu_clamp_exp >= 0) || !isfinite(hp->ffn.swiglu_clamp_exp) || !(hp->ffn.swiglu_clamp_shexp >= 0) ||
        !isfinite(hp->ffn.swiglu_clamp_shexp))
        return TK_FAIL(TK_ERR_INVALID, "SwiGLU clamp %g / %g invalid (must be >= 0; 0: none)", hp->ffn.swiglu_clamp_exp,
                       hp->ffn.swiglu_clamp_shexp);
    if (hp->ffn.act < 0 || hp->ffn.act >= TK_ACT_COUNT)
        return TK_FAIL(TK_ERR_INVALID, "ffn act = %d invalid (0 .. %d)", hp->ffn.act, TK_ACT_COUNT - 1);
    if (hp->ssm.act < 0 || hp->ssm.act >= TK_ACT_COUNT)
        return TK_FAIL(TK_ERR_INVALID, "ssm act = %d invalid (0 .. %d)", hp->ssm.act, TK_ACT_COUNT - 1);
    /* the block recipe: a placement and a residual scheme this runtime has, the hyper-connection residual exactly
     * when hc says so (qwen4exp's with their placement, GLM-5-Next's mHC with pre-norms), the norms' tensor names */
    if (hp->block.norm < TK_NORM_PRE || hp->block.norm > TK_NORM_HYPER || hp->block.residual < TK_RESIDUAL_PLAIN ||
        hp->block.residual > TK_RESIDUAL_HC)
        return TK_FAIL(TK_ERR_INVALID, "block recipe: norm placement %d / residual %d unknown", hp->block.norm, hp->block.residual);
    if ((hp->block.residual == TK_RESIDUAL_HC) != tk_hc_on(hp) || (hp->block.norm == TK_NORM_HYPER && !tk_hc_on(hp)))
        return TK_FAIL(TK_ERR_INVALID, "block recipe: norm placement %d / residual %d disagree with hc_count = %d",
                       hp->block.norm, hp->block.residual, hp->hc.count);
    if (!hp->block.ffn_norm || !hp->block.output_norm || strlen(hp->block.ffn_norm) > 64 || strlen(hp->block.output_norm) > 64)
        return TK_FAIL(TK_ERR_INVALID, "block recipe: the FFN / output norm tensor names are missing or too long");
    return TK_OK;
}

/* ==== per-layer binding ============================================================== */

static tk_status bind_layer(tk_model * m, const tk_table * tab, int il) {
    const tk_hparams * hp = &m->hp;
    tk_layer * l = &m->layers[il];
    const int64_t D = hp->n_embd;
    char nm[128];
#define NAME(s) (snprintf(nm, sizeof nm, "blk.%d.%s", il, (s)), nm)
    l->kind = hp->layer_kinds[il];
    l->ffn_kind = hp->ffn_kinds[il];
    l->n_head_kv = hp->n_head_kv[il];
    const tk_mixer_ops * mixer = tk_mixer_ops_of(l->kind);
    /* the block recipe (hp.block): the pre-norms unless the layer is post-norm (TK_NORM_POST: OLMo-2's attention
     * blocks), the post-norms on a post-norm or sandwich block; hyper-connections bind their own */
    const int post = hp->block.norm == TK_NORM_POST && l->kind == TK_LAYER_ATTENTION;
    const int post_norms = post || hp->block.norm == TK_NORM_SANDWICH;
    /* the factors of a normed residual: a mixer branch by its kind (a KV cache: attention, else recurrent) */
    l->res_alpha = mixer->kv_dim ? hp->res.alpha_attn : hp->res.alpha_rec;
    l->res_beta = mixer->kv_dim ? hp->res.beta_attn : hp->res.beta_rec;
    if (tk_hc_on(hp)) TK_CHECK(tk_hc_bind_layer(m, tab, il, l));
    else if (!post) TK_CHECK(tk_bind_vec(m, tab, NAME("attn_norm.weight"), TK_SHAPE(D), 1, &l->attn_norm));
    if (post_norms) TK_CHECK(tk_bind_vec(m, tab, NAME("post_attention_norm.weight"), TK_SHAPE(D), 1, &l->mixer_post_norm));

    TK_CHECK(mixer->bind(m, tab, il, l));
    if (m->ple_index && m->ple_index[il] >= 0) TK_CHECK(tk_ple_bind(m, tab, il, l));

    const tk_ffn_ops * ffn = tk_ffn_ops_of(l->ffn_kind);
    if (ffn && !tk_hc_on(hp)) {
        /* the FFN pre-norm, by the recipe's name; a block with no mixer (Nemotron-H) has one norm, attn_norm */
        if (l->kind == TK_LAYER_NONE) l->ffn_norm = l->attn_norm;
        else if (!post) TK_CHECK(tk_bind_vec(m, tab, NAME(hp->block.ffn_norm), TK_SHAPE(D), 1, &l->ffn_norm));
        if (post_norms) TK_CHECK(tk_bind_vec(m, tab, NAME("post_ffw_norm.weight"), TK_SHAPE(D), 1, &l->ffn_post_norm));
    }
    if (ffn) TK_CHECK(ffn->bind(m, tab, il, l));
#undef NAME
    int32_t w = l->n_ff;
    if (l->n_ff_exp > w) w = l->n_ff_exp;
    if (l->n_ff_shexp > w) w = l->n_ff_shexp;
    if (w > m->max_ff) m->max_ff = w;
    return TK_OK;
}

/* ==== load / free ==================================================================== */

/* tk_model_params.repack: the bound mat-mul weights whose type the mode re-lays at this kernel
 * level (TK_REPACK_AUTO: tk_repack_auto; TK_REPACK_ALL: tk_repack_fast) re-laid into one heap
 * buffer (quants/repack.h); a matrix bound twice (tied output) once.  Afterwards the whole
 * pages of the mapped file that only re-laid tensors cover are released (MADV_DONTNEED on a
 * read-only private map: dropped, read again if touched), so the resident set holds the
 * re-laid copy and the rest of the file, not both; a tied output's pages stay (the gathers
 * read tok_embd). */
/* an earlier bound weight with the same bytes (Zamba's shared blocks are bound once per layer
 * that runs them): re-laid once, its copy shared */
static const tk_weight * repack_twin(const tk_model * m, int32_t i) {
    for (int32_t j = 0; j < i; j++)
        if (m->bound[j]->data == m->bound[i]->data && m->bound[j]->type == m->bound[i]->type) return m->bound[j];
    return NULL;
}

typedef struct { uintptr_t a, z; } byte_range;

static int range_cmp(const void * x, const void * y) {
    const byte_range * p = x, * q = y;
    return p->a < q->a ? -1 : p->a > q->a;
}

/* MADV_DONTNEED on the whole pages inside [a, z); returns the bytes released */
static int64_t release_range(uintptr_t a, uintptr_t z) {
    const uintptr_t pg = (uintptr_t) sysconf(_SC_PAGESIZE);
    a = (a + pg - 1) & ~(pg - 1);
    z &= ~(pg - 1);
    return z > a && madvise((void *) a, z - a, MADV_DONTNEED) == 0 ? (int64_t) (z - a) : 0;
}

/* release_range on the union of the n ranges (the pages two adjacent ranges share too) */
static int64_t release_union(byte_range * r, int32_t n) {
    qsort(r, (size_t) n, sizeof *r, range_cmp);
    int64_t released = 0;
    for (int32_t i = 0; i < n;) {
        const uintptr_t a = r[i].a;
        uintptr_t z = r[i].z;
        for (i++; i < n && r[i].a <= z; i++)
            if (r[i].z > z) z = r[i].z;
        released += release_range(a, z);
    }
    return released;
}

static int repack_wanted(int mode, int type, int level) {
    return mode == TK_REPACK_ALL ? tk_repack_fast(type, level) : mode == TK_REPACK_AUTO ? tk_repack_auto(type, level) : 0;
}

/* The repack rule over the model's table of bound weights (the candidates tk_bind_weight
 * remembered, the tied output): a weight is re-laid at `level` in `mode` (tk_repack_mode) when
 * repack_wanted says so, a weight bound twice once.  Its tensors and bytes into out (ms and
 * released 0).  The load (repack_weights) and the estimate (tk_model_repack_plan: `toolkit info
 * --memory`) both read it. */
static void repack_plan(const tk_model * m, int mode, int level, tk_repack_info * out) {
    memset(out, 0, sizeof *out);
    for (int32_t i = 0; i < m->n_bound; i++) {
        const tk_weight * w = m->bound[i];
        if (!repack_wanted(mode, w->type, level) || repack_twin(m, i)) continue;
        out->n_tensors++;
        out->bytes += (int64_t) (tk_repack_matrix_bytes(w->type, w->ne[0], w->ne[1]) * (size_t) (w->ne[2] * w->ne[3]));
    }
}

void tk_model_repack_plan(const tk_model * m, int mode, int level, tk_repack_info * out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (m) repack_plan(m, mode, level, out);
}

static tk_status repack_weights(tk_model * m, const tk_model_params * params) {
    if (!params || params->repack == TK_REPACK_OFF) return TK_OK;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int level = tk_cpu_level(), mode = params->repack;
    const int bf16dot = params->bf16_gemm == TK_BF16_GEMM_DEFAULT ? tk_cpu_bf16dot()
                        : params->bf16_gemm == TK_BF16_GEMM_DPBF16 && tk_cpu_has_avx512bf16();
    tk_repack_info plan;
    repack_plan(m, mode, level, &plan);
    const size_t total = (size_t) plan.bytes;
    if (!total) return TK_OK;
    byte_range * ranges = malloc((size_t) m->n_bound * sizeof *ranges);
    if (!ranges || posix_memalign((void **) &m->rp_buf, 64, total) != 0) {
        free(ranges);
        return TK_FAIL(TK_ERR_NOMEM, "repack: out of memory (%zu bytes)", total);
    }
    int32_t n_ranges = 0;
    size_t off = 0;
    for (int32_t i = 0; i < m->n_bound; i++) {
        tk_weight * w = m->bound[i];
        if (!repack_wanted(mode, w->type, level)) continue;
        w->rp_bf16dot = bf16dot;
        const tk_weight * twin = repack_twin(m, i);
        if (twin) {
            w->rp = twin->rp;
            w->rp_mat = twin->rp_mat;
            continue;
        }
        const int64_t n_mat = w->ne[2] * w->ne[3];
        w->rp_mat = tk_repack_matrix_bytes(w->type, w->ne[0], w->ne[1]);
        w->rp = m->rp_buf + off;
        for (int64_t k = 0; k < n_mat; k++)
            tk_repack_matrix(w->type, w->data + (size_t) k * (size_t) w->ne[1] * w->row_bytes, w->row_bytes, w->ne[0],
                             w->ne[1], m->rp_buf + off + (size_t) k * w->rp_mat);
        off += w->rp_mat * (size_t) n_mat;
        m->rp_info.n_tensors++;
        if (w->data != m->tok_embd.data) {
            /* released now, so that the source and its copy are not both resident */
            const byte_range r = {(uintptr_t) w->data, (uintptr_t) w->data + (size_t) n_mat * (size_t) w->ne[1] * w->row_bytes};
            release_range(r.a, r.z);
            ranges[n_ranges++] = r;
        }
    }
    m->rp_info.released = release_union(ranges, n_ranges);   /* and the pages adjacent tensors share */
    free(ranges);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    m->rp_info.bytes = (int64_t) total;
    m->rp_info.ms = (double) (t1.tv_sec - t0.tv_sec) * 1e3 + (double) (t1.tv_nsec - t0.tv_nsec) * 1e-6;
    return TK_OK;
}

void tk_model_repack_info(const tk_model * m, tk_repack_info * out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (m) *out = m->rp_info;
}

/* Validate the table and bind the model's tensors (global, MTP head, each layer's), then
 * check_all_bound; a tied output is remembered for repacking. */
static tk_status bind_all(tk_model * m, tk_table * tab) {
    const tk_hparams * hp = &m->hp;
    tab->used = calloc((size_t) (tab->n ? tab->n : 1), 1);
    if (!tab->used) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    tk_status st = validate_table(tab);
    if (st == TK_OK) st = tk_bind_weight(m, tab, "token_embd.weight", TK_SHAPE(hp->n_embd, hp->n_vocab), 1, &m->tok_embd);
    const char * out_norm = hp->block.output_norm;   /* the recipe's name (LFM2: token_embd_norm.weight) */
    if (st == TK_OK && tk_hc_on(hp) && hp->hc.sinkhorn_iters <= 0) st = tk_hc_bind_output(m, tab);   /* qwen4exp's final mixer */
    else if (st == TK_OK) st = tk_bind_vec(m, tab, out_norm, TK_SHAPE(hp->n_embd), 1, &m->output_norm);
    if (st == TK_OK) st = tk_bind_weight(m, tab, "output.weight", TK_SHAPE(hp->n_embd, hp->n_vocab), 0, &m->output);
    if (st == TK_OK) st = tk_mtp_bind(m, tab);   /* an MTP block run as a draft (layers/mtp.c) */
    const int tied = st == TK_OK && !m->output.data;
    if (tied) m->output = m->tok_embd;   /* tied embeddings */
    for (int il = 0; st == TK_OK && il < hp->n_layer; il++) st = bind_layer(m, tab, il);
    if (st == TK_OK) st = check_all_bound(tab);
    free(tab->used);
    tab->used = NULL;
    /* a tied output is a mat-mul weight: re-laid (as m->output; the gathers read tok_embd) */
    if (st == TK_OK && tied && tk_repack_matrix_bytes(m->output.type, m->output.ne[0], m->output.ne[1]))
        st = remember(m, &m->output);
    return st;
}

tk_status tk_model_load(const char * path, const tk_hparams * hp, const tk_tensor_desc * tensors,
                        int64_t n_tensors, const tk_model_params * params, tk_model ** out) {
    if (!out) return TK_FAIL(TK_ERR_INVALID, "out is NULL");
    *out = NULL;
    if (!path || !hp || (!tensors && n_tensors) || n_tensors < 0) return TK_FAIL(TK_ERR_INVALID, "bad arguments");
    if (params && (params->repack < TK_REPACK_OFF || params->repack > TK_REPACK_ALL))
        return TK_FAIL(TK_ERR_INVALID, "repack = %d is not a tk_repack_mode", params->repack);
    if (params && (params->bf16_gemm < TK_BF16_GEMM_DEFAULT || params->bf16_gemm > TK_BF16_GEMM_DPBF16))
        return TK_FAIL(TK_ERR_INVALID, "bf16_gemm = %d is not a tk_bf16_gemm", params->bf16_gemm);
    TK_CHECK(check_hparams(hp));

    tk_model * m = calloc(1, sizeof *m);
    if (!m) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    m->hp = *hp;
    size_t nl = (size_t) hp->n_layer;
    m->layer_kinds = malloc(nl * sizeof(int32_t));
    m->ffn_kinds = malloc(nl * sizeof(int32_t));
    m->n_head_kv = malloc(nl * sizeof(int32_t));
    m->layers = calloc(nl, sizeof(tk_layer));
    m->map = MAP_FAILED;
    if (!m->layer_kinds || !m->ffn_kinds || !m->n_head_kv || !m->layers) {
        tk_model_free(m);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    memcpy(m->layer_kinds, hp->layer_kinds, nl * sizeof(int32_t));
    memcpy(m->ffn_kinds, hp->ffn_kinds, nl * sizeof(int32_t));
    memcpy(m->n_head_kv, hp->n_head_kv, nl * sizeof(int32_t));
    m->hp.layer_kinds = m->layer_kinds;
    m->hp.ffn_kinds = m->ffn_kinds;
    m->hp.n_head_kv = m->n_head_kv;
    /* qwen4exp's arrays (NULL elsewhere) */
    if (hp->idx.compress_ratios) m->compress_ratios = malloc(nl * sizeof(int32_t));
    if (hp->ple.index) m->ple_index = malloc(nl * sizeof(int32_t));
    if (hp->attn.swa_layers) m->swa_layers = malloc(nl * sizeof(int32_t));
    if (hp->dsa.full) m->dsa_full = malloc(nl * sizeof(int32_t));
    const size_t n_consts = hp->ple.index ? (size_t) hp->ple.n_module *
        (size_t) (hp->ple.ngram_size + 2 * (hp->ple.ngram_size - 1) * hp->ple.heads_per_ngram) : 0;
    if (n_consts) m->ple_consts = malloc(n_consts * sizeof(uint64_t));
    if ((hp->idx.compress_ratios && !m->compress_ratios) || (hp->ple.index && !m->ple_index) || (n_consts && !m->ple_consts) ||
        (hp->attn.swa_layers && !m->swa_layers) || (hp->dsa.full && !m->dsa_full)) {
        tk_model_free(m);
        return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    }
    if (m->compress_ratios) memcpy(m->compress_ratios, hp->idx.compress_ratios, nl * sizeof(int32_t));
    if (m->ple_index) memcpy(m->ple_index, hp->ple.index, nl * sizeof(int32_t));
    if (m->ple_consts) memcpy(m->ple_consts, hp->ple.consts, n_consts * sizeof(uint64_t));
    m->hp.idx.compress_ratios = m->compress_ratios;
    m->hp.ple.index = m->ple_index;
    m->hp.ple.consts = m->ple_consts;
    if (m->swa_layers) memcpy(m->swa_layers, hp->attn.swa_layers, nl * sizeof(int32_t));
    m->hp.attn.swa_layers = m->swa_layers;
    if (m->dsa_full) memcpy(m->dsa_full, hp->dsa.full, nl * sizeof(int32_t));
    m->hp.dsa.full = m->dsa_full;
    snprintf(m->ffn_norm_name, sizeof m->ffn_norm_name, "%s", hp->block.ffn_norm);
    snprintf(m->output_norm_name, sizeof m->output_norm_name, "%s", hp->block.output_norm);
    m->hp.block.ffn_norm = m->ffn_norm_name;
    m->hp.block.output_norm = m->output_norm_name;
    if (!m->swa_layers) m->hp.attn.n_swa = 0;
    m->conv_dim = hp->ssm.d_inner;
    for (int i = 0; i < hp->n_layer; i++)
        if (hp->layer_kinds[i] == TK_LAYER_MAMBA2 || hp->layer_kinds[i] == TK_LAYER_PARALLEL ||
            hp->layer_kinds[i] == TK_LAYER_ZAMBA2_SHARED) m->conv_dim = hp->ssm.d_inner + 2 * hp->ssm.n_group * hp->ssm.d_state;
        else if (hp->layer_kinds[i] == TK_LAYER_GDN) m->conv_dim = 2 * hp->ssm.n_group * hp->ssm.d_state + hp->ssm.d_inner;
        else if (hp->layer_kinds[i] == TK_LAYER_SHORTCONV) m->conv_dim = hp->n_embd;

    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        tk_status st = TK_FAIL(TK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        tk_model_free(m);
        return st;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
        tk_status st = TK_FAIL(TK_ERR_IO, "%s: cannot stat or empty file", path);
        close(fd);
        tk_model_free(m);
        return st;
    }
    m->map_size = (size_t) sb.st_size;
    m->map = mmap(NULL, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        tk_status st = TK_FAIL(TK_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        tk_model_free(m);
        return st;
    }

    tk_table tab = {tensors, n_tensors, m->map_size, (const uint8_t *) m->map, path, NULL};
    tk_status st = bind_all(m, &tab);
    if (st == TK_OK) st = repack_weights(m, params);
    if (st != TK_OK) {
        tk_model_free(m);
        return st;
    }
    /* A gather-only table (untied embeddings) is read a few rows at a time: random-access
     * advice keeps the kernel from reading ahead megabytes around each row.  Advice only:
     * failure is harmless and ignored. */
    m->embd_random = m->output.data != m->tok_embd.data &&
                     m->tok_embd.row_bytes * (size_t) hp->n_vocab >= ((size_t) 64 << 20);
    if (m->embd_random) {
        uintptr_t a = (uintptr_t) m->tok_embd.data, e = a + m->tok_embd.row_bytes * (size_t) hp->n_vocab;
        const uintptr_t pg = (uintptr_t) sysconf(_SC_PAGESIZE);
        a &= ~(pg - 1);
        madvise((void *) a, e - a, MADV_RANDOM);
    }
    *out = m;
    return TK_OK;
}

void tk_model_free(tk_model * m) {
    if (!m) return;
    if (m->map && m->map != MAP_FAILED) munmap(m->map, m->map_size);
    for (int32_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->bound);
    free(m->rp_buf);
    free(m->layers);
    free(m->layer_kinds);
    free(m->ffn_kinds);
    free(m->n_head_kv);
    free(m->compress_ratios);
    free(m->dsa_full);
    free(m->ple_index);
    free(m->swa_layers);
    free(m->ple_consts);
    free(m);
}

int32_t tk_n_vocab(const tk_model * m) { return m ? m->hp.n_vocab : 0; }

/* Ask the kernel to fetch the embedding rows of a ubatch's tokens (one batched pass of
 * advice before the gather) when the table is read at random. */
void tk_model_prefetch_rows(const tk_model * m, const int32_t * tokens, int32_t n) {
    if (!m->embd_random) return;
    const uintptr_t pg = (uintptr_t) sysconf(_SC_PAGESIZE);
    for (int32_t i = 0; i < n; i++) {
        uintptr_t a = (uintptr_t) (m->tok_embd.data + (size_t) tokens[i] * m->tok_embd.row_bytes);
        uintptr_t e = a + m->tok_embd.row_bytes;
        a &= ~(pg - 1);
        madvise((void *) a, e - a, MADV_WILLNEED);
    }
}

const char * tk_blk_name(char * buf, size_t n, int il, const char * suffix) {
    snprintf(buf, n, "blk.%d.%s", il, suffix);
    return buf;
}
