/* state.c: checkpoints and position shifts through the public API, the memory report, and
 * state files: the context's memory (all sequences, or one) as a checksummed blob.
 *
 * Blob layout (little-endian, version 1):
 *   header  "TKSTATE\0"  u32 version  u32 kind (0 context, 1 one sequence)
 *           u64 model fingerprint  u64 payload bytes
 *   payload sections, each  u32 tag  u32 0  u64 length  then `length` bytes:
 *     tag 1 KV     u32 n_layer  u32 n_cells  u32 kv_dim[n_layer]
 *                  n_cells x { i32 pos  u32 0  u64 seq set  (K, V rows of each layer with kv_dim > 0, then its
 *                  QSA raw indexer key row where the layer keeps one) }
 *                  kv_dim word of a layer with a cache: bits 0-19 the width, 20-25 the K rows' ggml
 *                  type, 26-31 the V rows' (tk_context_params.type_k / type_v; 0 = f32, so a float32
 *                  cache writes the width alone); a row is the type's bytes (f16: 2 a value, q8_0:
 *                  34 per 32, ...).  A blob whose types differ from the context's is refused.
 *     tag 4 KV_SWA the sliding-window layers' cache, laid out as tag 1
 *     tag 2 RS     u32 n_states  u32 0  u64 cell_n
 *                  n_states x { i32 pos  i32 first pos  u64 seq set  f32[cell_n] }
 *     tag 3 CKPT   u32 n  u32 0  u64 cell_n
 *                  n x { i32 seq  i32 pos  f32[cell_n] }
 *   trailer u32 CRC-32 (IEEE, zlib's crc32) of header + payload
 * A one-sequence blob writes that sequence's cells with seq set 1 (restorable into any id).
 * Reading parses and checks the whole blob (magic, version, fingerprint, sizes, checksum,
 * positions in order, the KV and recurrent children ending at the same position, room in
 * this context) before it changes anything, so a rejected blob leaves the memory as it was.
 */
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "layers/layer.h"
#include "tk_internal.h"

#define STATE_VERSION 1u
static const char MAGIC[8] = {'T', 'K', 'S', 'T', 'A', 'T', 'E', 0};
#define HEADER_BYTES 32u

/* ==== small helpers =================================================================== */

static uint32_t crc_table[256];
static int crc_ready;

static uint32_t crc32_update(uint32_t crc, const uint8_t * p, size_t n) {
    if (!__atomic_load_n(&crc_ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
        __atomic_store_n(&crc_ready, 1, __ATOMIC_RELEASE);
    }
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static uint64_t fnv(uint64_t h, const void * p, size_t n) {
    const uint8_t * b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= UINT64_C(1099511628211); }
    return h;
}

/* Hash of what a state depends on: shapes, layer kinds, weight types and the norm weights. */
static uint64_t fingerprint(const tk_model * m) {
    const tk_hparams * hp = &m->hp;
    uint64_t h = UINT64_C(14695981039346656037);
    const int32_t dims[] = {hp->arch, hp->n_vocab, hp->n_embd, hp->n_layer, hp->ssm.d_conv, hp->ssm.d_inner, hp->ssm.d_state,
                            hp->ssm.dt_rank, hp->ssm.n_group, hp->ssm.n_head, hp->ssm.head_dim, hp->attn.n_head, hp->attn.head_dim,
                            hp->attn.n_rot, hp->attn.use_rope, m->conv_dim, m->tok_embd.type};
    h = fnv(h, dims, sizeof dims);
    /* hyper-connections (qwen4exp): the mixers' norms stand for the norms (and the stream count
     * is hashed); every other model hashes exactly what it did before */
    const size_t hcd = hp->hc.count > 1 && m->output_hc_norm ? (size_t) hp->hc.count * (size_t) hp->n_embd : 0;
    if (hcd) h = fnv(h, &hp->hc.count, sizeof hp->hc.count);
    if (hp->hc.sinkhorn_iters > 0) h = fnv(h, &hp->hc.count, sizeof hp->hc.count);   /* GLM-5-Next's mHC */
    if (hp->attn.swa_layers) {      /* sliding-window layers (their window and which ones); nothing for other models */
        h = fnv(h, &hp->attn.n_swa, sizeof hp->attn.n_swa);
        h = fnv(h, hp->attn.swa_layers, (size_t) hp->n_layer * sizeof(int32_t));
    }
    h = hcd ? fnv(h, m->output_hc_norm, hcd * sizeof(float)) : fnv(h, m->output_norm, (size_t) hp->n_embd * sizeof(float));
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const tk_layer * L = &m->layers[l];
        const int32_t ld[] = {L->kind, L->ffn_kind, L->n_head_kv, L->ssm_in.type, L->wq.type};
        h = fnv(h, ld, sizeof ld);
        /* a post-norm block (TK_NORM_POST) has no attn_norm: its attention output norm stands for it */
        const float * norm = L->attn_norm ? L->attn_norm : L->mixer_post_norm;
        h = hcd ? fnv(h, L->hc_attn_norm, hcd * sizeof(float)) : fnv(h, norm, (size_t) hp->n_embd * sizeof(float));
    }
    return h;
}

/* ==== public: checkpoints, seq_add, report ============================================= */

tk_status tk_memory_set_checkpoints(tk_context * ctx, int32_t n_per_seq, int32_t every) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    return ctx->mem->set_checkpoints(ctx->mem, n_per_seq, every);
}

tk_status tk_memory_checkpoint(tk_context * ctx, int32_t seq) {
    TK_CHECK(tk_check_seq(ctx, seq, 0));
    ctx->mem->checkpoint(ctx->mem, seq);
    return TK_OK;
}

tk_status tk_memory_checkpoints(tk_context * ctx, int32_t seq, int32_t * pos, int32_t cap, int32_t * n) {
    TK_CHECK(tk_check_seq(ctx, seq, 0));
    if (!n || (cap > 0 && !pos)) return TK_FAIL(TK_ERR_INVALID, "n or pos is NULL");
    *n = ctx->mem->checkpoints(ctx->mem, seq, pos, cap);
    return TK_OK;
}

tk_status tk_memory_seq_add(tk_context * ctx, int32_t seq, int32_t p0, int32_t p1, int32_t delta, int32_t * done) {
    TK_CHECK(tk_check_seq(ctx, seq, 0));
    if (!done) return TK_FAIL(TK_ERR_INVALID, "done is NULL");
    *done = ctx->mem->can_seq_add(ctx->mem, seq, p0, p1, delta);
    if (*done) {
        ctx->mem->seq_add(ctx->mem, seq, p0, p1, delta);
        tk_dsa_forget(ctx, seq, p0);
    }
    return TK_OK;
}

tk_status tk_context_memory(tk_context * ctx, tk_memory_report * r) {
    if (!ctx || !r) return TK_FAIL(TK_ERR_INVALID, "ctx or report is NULL");
    memset(r, 0, sizeof *r);
    ctx->mem->report(ctx->mem, r);
    r->compute_bytes = ctx->scratch_bytes;
    return TK_OK;
}

/* calloc / malloc hand big blocks out as untouched pages, resident only once written: a server
 * would otherwise grow towards what it announced (a new longest sequence, a first checkpoint of
 * a slot), as steps nobody can tell from a leak.  llama.cpp clears its KV buffer at creation for
 * the same effect. */
void tk_touch_pages(void * p, size_t n) {
    if (!p || !n) return;
    volatile uint8_t * b = p;
    const size_t pg = (size_t) sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < n; i += pg) b[i] = b[i];
    b[n - 1] = b[n - 1];
}

tk_status tk_context_prefault(tk_context * ctx) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    ctx->mem->prefault(ctx->mem);
    return TK_OK;
}

/* ==== writing ========================================================================= */

void tk_put(tk_wbuf * w, const void * src, size_t n) {
    if (w->p && w->off + n <= w->cap) memcpy(w->p + w->off, src, n);
    w->off += n;
}
void tk_put_u32(tk_wbuf * w, uint32_t v) { tk_put(w, &v, 4); }
void tk_put_i32(tk_wbuf * w, int32_t v) { tk_put(w, &v, 4); }
void tk_put_u64(tk_wbuf * w, uint64_t v) { tk_put(w, &v, 8); }

/* Section header now, length patched at the end (size pass: w->p NULL). */
uint64_t tk_section_begin(tk_wbuf * w, uint32_t tag) { tk_put_u32(w, tag); tk_put_u32(w, 0); tk_put_u64(w, 0); return w->off; }
void tk_section_end(tk_wbuf * w, uint64_t at) {
    const uint64_t len = w->off - at;
    if (w->p && at <= w->cap) memcpy(w->p + at - 8, &len, 8);
}

static void write_all(tk_context * ctx, int32_t seq, tk_wbuf * w, float * tmp) {
    const uint64_t fp = fingerprint(ctx->model);
    tk_put(w, MAGIC, 8);
    tk_put_u32(w, STATE_VERSION);
    tk_put_u32(w, seq < 0 ? 0u : 1u);
    tk_put_u64(w, fp);
    tk_put_u64(w, 0);             /* payload bytes, patched below */
    const uint64_t body = w->off;
    ctx->mem->state_write(ctx->mem, w, seq, tmp);
    const uint64_t payload = w->off - body;
    if (w->p && w->off <= w->cap) {
        memcpy(w->p + body - 8, &payload, 8);
        const uint32_t crc = crc32_update(0, w->p, (size_t) w->off);
        tk_put_u32(w, crc);
    } else {
        tk_put_u32(w, 0);
    }
}

tk_status tk_state_size(tk_context * ctx, int32_t seq, uint64_t * size) {
    TK_CHECK(tk_check_seq(ctx, seq, 1));
    if (!size) return TK_FAIL(TK_ERR_INVALID, "size is NULL");
    tk_wbuf w = {NULL, 0, 0};
    write_all(ctx, seq, &w, NULL);
    *size = w.off;
    return TK_OK;
}

tk_status tk_state_write(tk_context * ctx, int32_t seq, uint8_t * buf, uint64_t cap, uint64_t * written) {
    TK_CHECK(tk_check_seq(ctx, seq, 1));
    if (!buf || !written) return TK_FAIL(TK_ERR_INVALID, "buf or written is NULL");
    uint64_t need;
    TK_CHECK(tk_state_size(ctx, seq, &need));
    if (cap < need) return TK_FAIL(TK_ERR_INVALID, "state buffer of %llu bytes, %llu needed",
                                   (unsigned long long) cap, (unsigned long long) need);
    float * tmp = malloc(ctx->mem->state_tmp_floats(ctx->mem) * sizeof(float) + 1);
    if (!tmp) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    tk_wbuf w = {buf, cap, 0};
    write_all(ctx, seq, &w, tmp);
    free(tmp);
    *written = w.off;
    return TK_OK;
}

/* ==== reading ========================================================================= */

int tk_get(tk_rbuf * r, void * dst, uint64_t n) {
    if (n > r->n - r->off) return 0;
    if (dst) memcpy(dst, r->p + r->off, (size_t) n);
    r->off += n;
    return 1;
}

#define BAD TK_STATE_BAD

/* One pass over the payload; apply = 0 checks everything, apply = 1 (only after a clean
 * check) writes it into the memory.  seq < 0: a context blob into the whole context;
 * else a one-sequence blob into sequence `seq`.  Each section goes to the memory
 * (state_read), which checks and applies its own content. */
static tk_status parse(tk_context * ctx, int32_t seq, const uint8_t * buf, uint64_t size, int apply, float * tmp) {
    const int32_t n_seq = ctx->params.n_seq_max;
    tk_state_rd rd = {seq, apply, n_seq, n_seq >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << n_seq) - 1,
                      seq < 0 ? 0 : UINT64_C(1) << seq, {0}, {0}, {0}, tmp, {0}};
    for (int32_t s = 0; s < TK_MAX_SEQ; s++) rd.kv_last[s] = rd.rs_pos[s] = rd.swa_last[s] = -1;
    tk_rbuf r = {buf, size - 4, HEADER_BYTES};

    if (apply) {
        if (seq < 0) ctx->mem->clear(ctx->mem);
        else ctx->mem->seq_rm(ctx->mem, seq, 0, -1);   /* whole removal: always allowed */
        tk_dsa_forget(ctx, seq, 0);
    }
    while (r.off < r.n) {
        uint32_t tag, zero;
        uint64_t len;
        if (!tk_get(&r, &tag, 4) || !tk_get(&r, &zero, 4) || !tk_get(&r, &len, 8)) return BAD("truncated section header at byte %llu", (unsigned long long) r.off);
        if (len > r.n - r.off) return BAD("section %u claims %llu bytes, %llu left", tag, (unsigned long long) len, (unsigned long long) (r.n - r.off));
        tk_rbuf q = {r.p, r.off + len, r.off};
        r.off += len;
        if (tag != TK_TAG_KV && tag != TK_TAG_RS && tag != TK_TAG_CKPT && tag != TK_TAG_KV_SWA) return BAD("unknown section tag %u", tag);
        TK_CHECK(ctx->mem->state_read(ctx->mem, tag, &q, &rd));
        if (q.off != q.n) return BAD("section %u has %llu bytes after its content", tag, (unsigned long long) (q.n - q.off));
    }
    return apply ? TK_OK : ctx->mem->state_read_end(ctx->mem, &rd);
}

tk_status tk_state_read(tk_context * ctx, int32_t seq, const uint8_t * buf, uint64_t size) {
    TK_CHECK(tk_check_seq(ctx, seq, 1));
    if (!buf) return TK_FAIL(TK_ERR_INVALID, "buf is NULL");
    if (size < HEADER_BYTES + 4) return BAD("%llu bytes, shorter than the %u-byte header and checksum", (unsigned long long) size, HEADER_BYTES + 4);
    if (memcmp(buf, MAGIC, 8)) return BAD("not a toolkit state (bad magic)");
    uint32_t version, kind, crc;
    uint64_t fp, payload;
    memcpy(&version, buf + 8, 4);
    memcpy(&kind, buf + 12, 4);
    memcpy(&fp, buf + 16, 8);
    memcpy(&payload, buf + 24, 8);
    if (version > STATE_VERSION) return BAD("format version %u is newer than this build's %u", version, STATE_VERSION);
    if (version != STATE_VERSION) return BAD("format version %u is not supported", version);
    if (payload != size - HEADER_BYTES - 4) return BAD("header says %llu payload bytes, the blob has %llu (truncated?)",
                                                       (unsigned long long) payload, (unsigned long long) (size - HEADER_BYTES - 4));
    memcpy(&crc, buf + size - 4, 4);
    if (crc32_update(0, buf, (size_t) (size - 4)) != crc) return BAD("checksum mismatch (corrupt)");
    if (kind > 1) return BAD("unknown kind %u", kind);
    if (kind == 0 && seq >= 0) return BAD("a whole-context state cannot be read into one sequence");
    if (kind == 1 && seq < 0) return BAD("a one-sequence state must be read into a sequence id");
    if (fp != fingerprint(ctx->model)) return BAD("written for another model (fingerprint %016llx, this model %016llx)",
                                                   (unsigned long long) fp, (unsigned long long) fingerprint(ctx->model));
    float * tmp = malloc(ctx->mem->state_tmp_floats(ctx->mem) * sizeof(float) + 1);
    if (!tmp) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    tk_status st = parse(ctx, seq, buf, size, 0, tmp);   /* check everything ... */
    if (st == TK_OK) st = parse(ctx, seq, buf, size, 1, tmp);   /* ... then change the memory */
    free(tmp);
    return st;
}
