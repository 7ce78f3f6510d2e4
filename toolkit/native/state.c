/* state.c: checkpoints and position shifts through the public API, the memory report, and
 * state files: the context's memory (all sequences, or one) as a checksummed blob.
 *
 * Blob layout (little-endian, version 1):
 *   header  "TKSTATE\0"  u32 version  u32 kind (0 context, 1 one sequence)
 *           u64 model fingerprint  u64 payload bytes
 *   payload sections, each  u32 tag  u32 0  u64 length  then `length` bytes:
 *     tag 1 KV     u32 n_layer  u32 n_cells  u32 kv_dim[n_layer]
 *                  n_cells x { i32 pos  u32 0  u64 seq set  (K, V rows of each layer with kv_dim > 0) }
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
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"

#define STATE_VERSION 1u
enum { TAG_KV = 1, TAG_RS = 2, TAG_CKPT = 3 };
static const char MAGIC[8] = {'T', 'K', 'S', 'T', 'A', 'T', 'E', 0};
#define HEADER_BYTES 32u

/* ==== small helpers =================================================================== */

static tk_status check_seq(const tk_context * ctx, int32_t seq, int allow_all) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    if ((allow_all && seq == -1) || (seq >= 0 && seq < ctx->params.n_seq_max)) return TK_OK;
    return TK_FAIL(TK_ERR_INVALID, "sequence id %d outside [0, n_seq_max=%d)", seq, ctx->params.n_seq_max);
}

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
    const int32_t dims[] = {hp->arch, hp->n_vocab, hp->n_embd, hp->n_layer, hp->d_conv, hp->d_inner, hp->d_state,
                            hp->dt_rank, hp->n_group, hp->ssm_n_head, hp->ssm_head_dim, hp->n_head, hp->head_dim,
                            hp->n_rot, hp->use_rope, m->conv_dim, m->tok_embd.type};
    h = fnv(h, dims, sizeof dims);
    h = fnv(h, m->output_norm, (size_t) hp->n_embd * sizeof(float));
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const tk_layer * L = &m->layers[l];
        const int32_t ld[] = {L->kind, L->ffn_kind, L->n_head_kv, L->ssm_in.type, L->wq.type};
        h = fnv(h, ld, sizeof ld);
        h = fnv(h, L->attn_norm, (size_t) hp->n_embd * sizeof(float));
    }
    return h;
}

/* ==== public: checkpoints, seq_add, report ============================================= */

tk_status tk_memory_set_checkpoints(tk_context * ctx, int32_t n_per_seq, int32_t every) {
    if (!ctx) return TK_FAIL(TK_ERR_INVALID, "ctx is NULL");
    if (!ctx->rs) {
        if (n_per_seq < 0 || every < 0) return TK_FAIL(TK_ERR_INVALID, "checkpoints = %d, interval = %d must be >= 0", n_per_seq, every);
        return TK_OK;          /* a KV cache rolls back without snapshots */
    }
    return tk_memory_rs_set_checkpoints(ctx->rs, n_per_seq, every);
}

tk_status tk_memory_checkpoint(tk_context * ctx, int32_t seq) {
    TK_CHECK(check_seq(ctx, seq, 0));
    tk_memory_rs_checkpoint(ctx->rs, seq);
    return TK_OK;
}

tk_status tk_memory_checkpoints(tk_context * ctx, int32_t seq, int32_t * pos, int32_t cap, int32_t * n) {
    TK_CHECK(check_seq(ctx, seq, 0));
    if (!n || (cap > 0 && !pos)) return TK_FAIL(TK_ERR_INVALID, "n or pos is NULL");
    *n = 0;
    const tk_memory_rs * rs = ctx->rs;
    if (!rs) return TK_OK;
    for (int32_t j = 0; j < rs->n_ckpt; j++) {   /* ascending positions */
        const int32_t q = rs->ckpt_pos[(size_t) seq * rs->n_ckpt + j];
        if (q < 0) continue;
        int32_t i = *n < cap ? *n : cap;
        if (*n < cap) {
            while (i > 0 && pos[i - 1] > q) { pos[i] = pos[i - 1]; i--; }
            pos[i] = q;
        }
        (*n)++;
    }
    return TK_OK;
}

tk_status tk_memory_seq_add(tk_context * ctx, int32_t seq, int32_t p0, int32_t p1, int32_t delta, int32_t * done) {
    TK_CHECK(check_seq(ctx, seq, 0));
    if (!done) return TK_FAIL(TK_ERR_INVALID, "done is NULL");
    *done = ctx->mem->can_seq_add(ctx->mem, seq, p0, p1, delta);
    if (*done) ctx->mem->seq_add(ctx->mem, seq, p0, p1, delta);
    return TK_OK;
}

tk_status tk_context_memory(tk_context * ctx, tk_memory_report * r) {
    if (!ctx || !r) return TK_FAIL(TK_ERR_INVALID, "ctx or report is NULL");
    memset(r, 0, sizeof *r);
    if (ctx->kv)
        for (int32_t l = 0; l < ctx->kv->n_layer; l++)
            r->kv_bytes += 2 * (uint64_t) ctx->kv->n_cells * (uint64_t) ctx->kv->kv_dim[l] * sizeof(float);
    if (ctx->rs) {
        r->recurrent_bytes = (uint64_t) ctx->rs->n_cells * ctx->rs->cell_n * sizeof(float);
        r->checkpoint_bytes = (uint64_t) ctx->rs->n_cells * (uint64_t) ctx->rs->n_ckpt * ctx->rs->cell_n * sizeof(float);
    }
    r->compute_bytes = ctx->scratch_bytes;
    return TK_OK;
}

/* ==== writing ========================================================================= */

typedef struct { uint8_t * p; uint64_t cap, off; } wbuf;

static void put(wbuf * w, const void * src, size_t n) {
    if (w->p && w->off + n <= w->cap) memcpy(w->p + w->off, src, n);
    w->off += n;
}
static void put_u32(wbuf * w, uint32_t v) { put(w, &v, 4); }
static void put_i32(wbuf * w, int32_t v) { put(w, &v, 4); }
static void put_u64(wbuf * w, uint64_t v) { put(w, &v, 8); }

/* Section header now, length patched at the end (size pass: w->p NULL). */
static uint64_t section_begin(wbuf * w, uint32_t tag) { put_u32(w, tag); put_u32(w, 0); put_u64(w, 0); return w->off; }
static void section_end(wbuf * w, uint64_t at) {
    const uint64_t len = w->off - at;
    if (w->p && at <= w->cap) memcpy(w->p + at - 8, &len, 8);
}

static void write_all(tk_context * ctx, int32_t seq, wbuf * w, float * tmp) {
    const uint64_t fp = fingerprint(ctx->model);
    put(w, MAGIC, 8);
    put_u32(w, STATE_VERSION);
    put_u32(w, seq < 0 ? 0u : 1u);
    put_u64(w, fp);
    put_u64(w, 0);             /* payload bytes, patched below */
    const uint64_t body = w->off;
    const uint64_t bit = seq < 0 ? 0 : UINT64_C(1) << seq;
    tk_memory_kv * kv = ctx->kv;
    if (kv) {
        const uint64_t at = section_begin(w, TAG_KV);
        uint32_t n = 0;
        for (int32_t i = 0; i < kv->n_cells; i++) n += kv->pos[i] >= 0 && (seq < 0 || (kv->seqs[i] & bit));
        put_u32(w, (uint32_t) kv->n_layer);
        put_u32(w, n);
        for (int32_t l = 0; l < kv->n_layer; l++) put_u32(w, (uint32_t) kv->kv_dim[l]);
        for (int32_t i = 0; i < kv->n_cells; i++) {
            if (kv->pos[i] < 0 || (seq >= 0 && !(kv->seqs[i] & bit))) continue;
            put_i32(w, kv->pos[i]);
            put_u32(w, 0);
            put_u64(w, seq < 0 ? kv->seqs[i] : 1);
            for (int32_t l = 0; l < kv->n_layer; l++) {
                if (!kv->kv_dim[l]) continue;
                put(w, kv->k[l] + (size_t) i * kv->kv_dim[l], (size_t) kv->kv_dim[l] * sizeof(float));
                put(w, kv->v[l] + (size_t) i * kv->kv_dim[l], (size_t) kv->kv_dim[l] * sizeof(float));
            }
        }
        section_end(w, at);
    }
    tk_memory_rs * rs = ctx->rs;
    if (rs) {
        uint64_t at = section_begin(w, TAG_RS);
        uint32_t n = 0;
        for (int32_t c = 0; c < rs->n_cells; c++) n += rs->seqs[c] && (seq < 0 || (rs->seqs[c] & bit));
        put_u32(w, n);
        put_u32(w, 0);
        put_u64(w, rs->cell_n);
        for (int32_t c = 0; c < rs->n_cells; c++) {
            if (!rs->seqs[c] || (seq >= 0 && !(rs->seqs[c] & bit))) continue;
            int32_t first = -1;
            for (int32_t s = 0; s < rs->n_cells; s++) if (rs->tail[s] == c) { first = rs->start[s]; break; }
            put_i32(w, rs->pos[c]);
            put_i32(w, first);
            put_u64(w, seq < 0 ? rs->seqs[c] : 1);
            if (tmp) tk_memory_rs_pack(rs, c, tmp);
            if (tmp) put(w, tmp, rs->cell_n * sizeof(float));
            else w->off += rs->cell_n * sizeof(float);
        }
        section_end(w, at);
        at = section_begin(w, TAG_CKPT);
        n = 0;
        for (int32_t s = 0; s < rs->n_cells; s++)
            for (int32_t j = 0; j < rs->n_ckpt; j++)
                n += (seq < 0 || s == seq) && rs->ckpt_pos[(size_t) s * rs->n_ckpt + j] >= 0;
        put_u32(w, n);
        put_u32(w, 0);
        put_u64(w, rs->cell_n);
        for (int32_t s = 0; s < rs->n_cells; s++)
            for (int32_t j = 0; j < rs->n_ckpt; j++) {
                const size_t k = (size_t) s * rs->n_ckpt + j;
                if ((seq >= 0 && s != seq) || rs->ckpt_pos[k] < 0) continue;
                put_i32(w, seq < 0 ? s : 0);
                put_i32(w, rs->ckpt_pos[k]);
                put(w, rs->ckpt + k * rs->cell_n, rs->cell_n * sizeof(float));
            }
        section_end(w, at);
    }
    const uint64_t payload = w->off - body;
    if (w->p && w->off <= w->cap) {
        memcpy(w->p + body - 8, &payload, 8);
        const uint32_t crc = crc32_update(0, w->p, (size_t) w->off);
        put_u32(w, crc);
    } else {
        put_u32(w, 0);
    }
}

tk_status tk_state_size(tk_context * ctx, int32_t seq, uint64_t * size) {
    TK_CHECK(check_seq(ctx, seq, 1));
    if (!size) return TK_FAIL(TK_ERR_INVALID, "size is NULL");
    wbuf w = {NULL, 0, 0};
    write_all(ctx, seq, &w, NULL);
    *size = w.off;
    return TK_OK;
}

tk_status tk_state_write(tk_context * ctx, int32_t seq, uint8_t * buf, uint64_t cap, uint64_t * written) {
    TK_CHECK(check_seq(ctx, seq, 1));
    if (!buf || !written) return TK_FAIL(TK_ERR_INVALID, "buf or written is NULL");
    uint64_t need;
    TK_CHECK(tk_state_size(ctx, seq, &need));
    if (cap < need) return TK_FAIL(TK_ERR_INVALID, "state buffer of %llu bytes, %llu needed",
                                   (unsigned long long) cap, (unsigned long long) need);
    float * tmp = malloc((ctx->rs ? ctx->rs->cell_n : 0) * sizeof(float) + 1);
    if (!tmp) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    wbuf w = {buf, cap, 0};
    write_all(ctx, seq, &w, ctx->rs ? tmp : NULL);
    free(tmp);
    *written = w.off;
    return TK_OK;
}

/* ==== reading ========================================================================= */

typedef struct { const uint8_t * p; uint64_t n, off; } rbuf;

static int get(rbuf * r, void * dst, uint64_t n) {
    if (n > r->n - r->off) return 0;
    if (dst) memcpy(dst, r->p + r->off, (size_t) n);
    r->off += n;
    return 1;
}

#define BAD(...) TK_FAIL(TK_ERR_INVALID, "state: " __VA_ARGS__)

/* One pass over the payload; apply = 0 checks everything, apply = 1 (only after a clean
 * check) writes it into the memory.  seq < 0: a context blob into the whole context;
 * else a one-sequence blob into sequence `seq`. */
static tk_status parse(tk_context * ctx, int32_t seq, const uint8_t * buf, uint64_t size, int apply, float * tmp) {
    tk_memory_kv * kv = ctx->kv;
    tk_memory_rs * rs = ctx->rs;
    const int32_t n_seq = ctx->params.n_seq_max;
    const uint64_t all_seqs = n_seq >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << n_seq) - 1;
    rbuf r = {buf, size - 4, HEADER_BYTES};
    int seen_kv = 0, seen_rs = 0, seen_ck = 0;
    /* per-sequence end positions of each child, for the coherence check */
    int32_t kv_last[TK_MAX_SEQ], rs_pos[TK_MAX_SEQ];
    for (int32_t s = 0; s < TK_MAX_SEQ; s++) kv_last[s] = rs_pos[s] = -1;
    const uint64_t dst_bit = seq < 0 ? 0 : UINT64_C(1) << seq;

    if (apply) {
        if (seq < 0) ctx->mem->clear(ctx->mem);
        else {
            ctx->mem->seq_rm(ctx->mem, seq, 0, -1);   /* whole removal: always allowed */
        }
    }
    while (r.off < r.n) {
        uint32_t tag, zero;
        uint64_t len;
        if (!get(&r, &tag, 4) || !get(&r, &zero, 4) || !get(&r, &len, 8)) return BAD("truncated section header at byte %llu", (unsigned long long) r.off);
        if (len > r.n - r.off) return BAD("section %u claims %llu bytes, %llu left", tag, (unsigned long long) len, (unsigned long long) (r.n - r.off));
        rbuf q = {r.p, r.off + len, r.off};
        r.off += len;
        if (tag == TAG_KV) {
            if (!kv) return BAD("a KV section, but this model has no attention layer");
            if (seen_kv++) return BAD("two KV sections");
            uint32_t nl, nc;
            if (!get(&q, &nl, 4) || !get(&q, &nc, 4)) return BAD("KV section truncated");
            if ((int32_t) nl != kv->n_layer) return BAD("KV section for %u layers, the model has %d", nl, kv->n_layer);
            for (int32_t l = 0; l < kv->n_layer; l++) {
                uint32_t d;
                if (!get(&q, &d, 4)) return BAD("KV section truncated");
                if ((int32_t) d != kv->kv_dim[l]) return BAD("KV layer %d width %u, the model has %d", l, d, kv->kv_dim[l]);
            }
            int32_t room = 0;
            for (int32_t i = 0; i < kv->n_cells; i++) room += kv->pos[i] < 0 || (seq >= 0 && kv->seqs[i] == dst_bit);
            if (seq < 0) room = kv->n_cells;
            if ((int64_t) nc > room) return TK_FAIL(TK_ERR_NOMEM, "state: %u KV cells, this context has room for %d (raise n_ctx)", nc, room);
            int32_t cell = 0;
            for (uint32_t i = 0; i < nc; i++) {
                int32_t pos;
                uint32_t pad;
                uint64_t set;
                if (!get(&q, &pos, 4) || !get(&q, &pad, 4) || !get(&q, &set, 8)) return BAD("KV cell %u truncated", i);
                if (pos < 0) return BAD("KV cell %u has position %d", i, pos);
                if (seq < 0 ? (!set || (set & ~all_seqs)) : set != 1)
                    return BAD("KV cell %u has sequence set %#llx (n_seq_max = %d)", i, (unsigned long long) set, n_seq);
                if (seq >= 0) set = dst_bit;
                for (int32_t s = 0; s < n_seq; s++) {
                    if (!(set >> s & 1)) continue;
                    if (pos <= kv_last[s]) return BAD("KV cell %u: position %d of sequence %d after %d (out of order)", i, pos, s, kv_last[s]);
                    kv_last[s] = pos;
                }
                if (apply) {
                    while (kv->pos[cell] >= 0) cell++;
                    kv->pos[cell] = pos;
                    kv->seqs[cell] = set;
                }
                for (int32_t l = 0; l < kv->n_layer; l++) {
                    if (!kv->kv_dim[l]) continue;
                    const size_t n = (size_t) kv->kv_dim[l] * sizeof(float);
                    if (!get(&q, apply ? kv->k[l] + (size_t) cell * kv->kv_dim[l] : NULL, n) ||
                        !get(&q, apply ? kv->v[l] + (size_t) cell * kv->kv_dim[l] : NULL, n)) return BAD("KV cell %u truncated", i);
                }
            }
        } else if (tag == TAG_RS) {
            if (!rs) return BAD("a recurrent section, but this model has no recurrent layer");
            if (seen_rs++) return BAD("two recurrent sections");
            uint32_t ns, pad;
            uint64_t cn;
            if (!get(&q, &ns, 4) || !get(&q, &pad, 4) || !get(&q, &cn, 8)) return BAD("recurrent section truncated");
            if (cn != rs->cell_n) return BAD("recurrent state of %llu floats, the model's is %zu", (unsigned long long) cn, rs->cell_n);
            if ((int64_t) ns > (seq < 0 ? rs->n_cells : 1)) return BAD("%u recurrent states for %d cells", ns, seq < 0 ? rs->n_cells : 1);
            uint64_t used = 0;
            for (uint32_t i = 0; i < ns; i++) {
                int32_t pos, first;
                uint64_t set;
                if (!get(&q, &pos, 4) || !get(&q, &first, 4) || !get(&q, &set, 8)) return BAD("recurrent state %u truncated", i);
                if (seq < 0 ? (!set || (set & ~all_seqs) || (set & used)) : set != 1)
                    return BAD("recurrent state %u has sequence set %#llx", i, (unsigned long long) set);
                if (first < 0 || pos < first) return BAD("recurrent state %u: positions %d..%d", i, first, pos);
                if (seq >= 0) set = dst_bit;
                used |= set;
                for (int32_t s = 0; s < n_seq; s++) if (set >> s & 1) rs_pos[s] = pos;
                int32_t c = -1;
                if (apply) {
                    for (int32_t k = 0; k < rs->n_cells && c < 0; k++) if (!rs->seqs[k]) c = k;
                    if (c < 0) return TK_FAIL(TK_ERR_STATE, "state: no free recurrent cell");  /* not reached */
                    rs->seqs[c] = set;
                    rs->pos[c] = pos;
                    for (int32_t s = 0; s < n_seq; s++) if (set >> s & 1) { rs->tail[s] = c; rs->start[s] = first; }
                    memcpy(tmp, q.p + q.off, rs->cell_n * sizeof(float));   /* the blob may be unaligned */
                    tk_memory_rs_unpack(rs, c, tmp);
                }
                if (!get(&q, NULL, rs->cell_n * sizeof(float))) return BAD("recurrent state %u truncated", i);
            }
        } else if (tag == TAG_CKPT) {
            if (!rs) return BAD("a checkpoint section, but this model has no recurrent layer");
            if (seen_ck++) return BAD("two checkpoint sections");
            if (!seen_rs) return BAD("checkpoint section before the recurrent section");
            uint32_t n, pad;
            uint64_t cn;
            if (!get(&q, &n, 4) || !get(&q, &pad, 4) || !get(&q, &cn, 8)) return BAD("checkpoint section truncated");
            if (cn != rs->cell_n) return BAD("checkpoints of %llu floats, the model's state is %zu", (unsigned long long) cn, rs->cell_n);
            for (uint32_t i = 0; i < n; i++) {
                int32_t s, pos;
                if (!get(&q, &s, 4) || !get(&q, &pos, 4)) return BAD("checkpoint %u truncated", i);
                if (seq >= 0 && s != 0) return BAD("checkpoint %u for sequence %d in a one-sequence state", i, s);
                if (s < 0 || s >= n_seq) return BAD("checkpoint %u for sequence %d (n_seq_max = %d)", i, s, n_seq);
                const int32_t ds = seq >= 0 ? seq : s;
                if (pos < 0 || pos > rs_pos[ds]) return BAD("checkpoint %u at position %d, sequence %d ends at %d", i, pos, s, rs_pos[ds]);
                if (apply && rs->n_ckpt > 0) {
                    /* keep the newest n_ckpt of this sequence */
                    int32_t * P = rs->ckpt_pos + (size_t) ds * rs->n_ckpt, slot = -1;
                    for (int32_t j = 0; j < rs->n_ckpt && slot < 0; j++) if (P[j] < 0) slot = j;
                    if (slot < 0) {
                        slot = 0;
                        for (int32_t j = 1; j < rs->n_ckpt; j++) if (P[j] < P[slot]) slot = j;
                        if (P[slot] > pos) slot = -1;
                    }
                    if (slot >= 0) {
                        P[slot] = pos;
                        memcpy(rs->ckpt + ((size_t) ds * rs->n_ckpt + slot) * rs->cell_n, q.p + q.off, rs->cell_n * sizeof(float));
                    }
                }
                if (!get(&q, NULL, rs->cell_n * sizeof(float))) return BAD("checkpoint %u truncated", i);
            }
        } else {
            return BAD("unknown section tag %u", tag);
        }
        if (q.off != q.n) return BAD("section %u has %llu bytes after its content", tag, (unsigned long long) (q.n - q.off));
    }
    if (!apply) {
        if (kv && !seen_kv) return BAD("no KV section");
        if (rs && (!seen_rs || !seen_ck)) return BAD("no recurrent or checkpoint section");
        if (kv && rs)
            for (int32_t s = 0; s < n_seq; s++)
                if (kv_last[s] != rs_pos[s])
                    return BAD("sequence %d ends at %d in the KV cache but at %d in the recurrent state", s, kv_last[s], rs_pos[s]);
    }
    return TK_OK;
}

tk_status tk_state_read(tk_context * ctx, int32_t seq, const uint8_t * buf, uint64_t size) {
    TK_CHECK(check_seq(ctx, seq, 1));
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
    float * tmp = malloc((ctx->rs ? ctx->rs->cell_n : 0) * sizeof(float) + 1);
    if (!tmp) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    tk_status st = parse(ctx, seq, buf, size, 0, tmp);   /* check everything ... */
    if (st == TK_OK) st = parse(ctx, seq, buf, size, 1, tmp);   /* ... then change the memory */
    free(tmp);
    return st;
}
