/* attn.c: the blocked attention's driver (tiles, split-K, the folds in order, the output
 * rows) and its plain instance (attn_body.h on 4 lanes of GCC's vector extension); the
 * contract and the blocked form are attn.h's.  The AVX2 and AVX-512 instances are
 * x86/attn_avx2.c and x86/attn_avx512.c, chosen by tk_cpu_level().
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "tk_cpu.h"

#define ATTN_VL 4              /* 16-byte vectors: SSE2 / NEON without a target */
#define ATTN_NB 4
#define ATTN_NAME(x) x##_plain
#include "kernels/attn_body.h"

/* ---- which kernel: tk_attn_set_reference (tests, bench/attn_depth.py); the library reads no
 * environment ---- */

static int attn_ref = 0;   /* 1: the reference kernels; 2: the blocked form, a typed cache's rows converted first (no direct read) */

int tk_attn_reference(void) { return __atomic_load_n(&attn_ref, __ATOMIC_RELAXED); }

void tk_attn_set_reference(int on) { __atomic_store_n(&attn_ref, on > 0 ? (on > 2 ? 1 : on) : 0, __ATOMIC_RELAXED); }

/* the level's row conversion (attn_body.h tk_attn_cvt_*) */
static tk_attn_cvt_fn attn_cvt_of(int level) {
#ifdef TK_HAVE_X86
    if (level >= TK_CPU_AVX512) return tk_attn_cvt_avx512;
    if (level >= TK_CPU_AVX2) return tk_attn_cvt_avx2;
#endif
    (void) level;
    return tk_attn_cvt_plain;
}

/* the level's chunk over f16 / bf16 K and V read directly (attn_body.h; both the same type), else NULL */
static tk_attn_chunk_fn attn_direct_of(int level, int32_t type_k, int32_t type_v) {
    if (type_k != type_v || (type_k != TK_GGML_F16 && type_k != TK_GGML_BF16)) return NULL;
#ifdef TK_HAVE_X86
    if (level >= TK_CPU_AVX512) return type_k == TK_GGML_F16 ? tk_attn_chunk_f16_avx512 : tk_attn_chunk_bf16_avx512;
    if (level >= TK_CPU_AVX2) return type_k == TK_GGML_F16 ? tk_attn_chunk_f16_avx2 : tk_attn_chunk_bf16_avx2;
#endif
    (void) level;
    return type_k == TK_GGML_BF16 ? tk_attn_chunk_bf16_plain : NULL;
}

void tk_attn_cvt_at(int level, int32_t type, const void * src, float * dst, int32_t n) {
    if (level > tk_cpu_detected()) level = tk_cpu_detected();
    if (!attn_cvt_of(level)(type, src, dst, n)) tk_type_traits_get(type)->to_float(src, dst, n);
}

/* ---- sizes ---- */

/* tokens per tile: TK_ATTN_ROWS rows, or one token when a group alone has more heads */
static int32_t attn_tile_tokens(int32_t grp) { return grp >= TK_ATTN_ROWS ? 1 : TK_ATTN_ROWS / grp; }

static int32_t attn_rows_max(int32_t grp) { return (attn_tile_tokens(grp) * grp + 3) / 4 * 4; }

/* floats of one thread's workspace: S [Rp, CH], cell [CH] (int32), vis + any (bytes,
 * [T + 1, CH]), the chunk's, the super-chunk's and the total's (m, l, O) [Rp] [Rp] [Rp, dv] */
static size_t attn_ws_floats(int32_t grp, int32_t dv) {
    const size_t Rp = (size_t) attn_rows_max(grp), CH = TK_ATTN_CHUNK;
    const size_t vis = ((size_t) (attn_tile_tokens(grp) + 1) * CH + 3) / 4;
    return Rp * CH + CH + vis + 3 * Rp * ((size_t) dv + 2);
}

size_t tk_attn_work_bytes(int32_t H, int32_t Hkv, int32_t dk, int32_t dv, int n_threads) {
    (void) dk;
    if (H <= 0 || Hkv <= 0) return 0;
    return (size_t) (n_threads > 0 ? n_threads : 1) * attn_ws_floats(H / Hkv, dv) * sizeof(float);
}

size_t tk_attn_conv_bytes(int32_t dk, int32_t dv, int n_threads) {
    return (size_t) (n_threads > 0 ? n_threads : 1) * TK_ATTN_CHUNK * ((size_t) dk + (size_t) dv) * sizeof(float);
}

size_t tk_attn_scratch_bytes(int32_t H, int32_t Hkv, int32_t dk, int32_t dv, int n_threads, int typed) {
    const size_t w = tk_attn_work_bytes(H, Hkv, dk, dv, n_threads);
    return w && typed ? w + tk_attn_conv_bytes(dk, dv, n_threads) : w;
}

size_t tk_attn_part_floats(int32_t H, int32_t Hkv, int32_t dv) {
    if (H <= 0 || Hkv <= 0) return 0;
    return (size_t) attn_rows_max(H / Hkv) * ((size_t) dv + 2);
}

/* the cell list (n_ctx), and the partials of split-K's largest case: fewer than 2 n_threads
 * (tile, group) items, each over the super-chunks of n_ctx positions */
size_t tk_attn_buffer_floats(size_t part, int32_t n_ctx, int n_threads) {
    const size_t n_super = (size_t) n_ctx / (TK_ATTN_SUPER * TK_ATTN_CHUNK) + 2;
    return (size_t) n_ctx + n_super * (size_t) (2 * (n_threads > 0 ? n_threads : 1)) * part;
}

/* ---- the driver ---- */

typedef struct {
    const tk_attn_args * a;
    tk_attn_chunk_fn chunk;
    tk_attn_fold_fn fold;
    float * work;              /* [n_threads, ws] */
    size_t ws;
    int32_t grp, T;
    int32_t row, n_tiles;      /* the ubatch row (sequence) and its tiles */
    const int32_t * list;      /* [n_list] the row's sequence's cells in position order */
    int32_t n_list;
    int32_t sid0, n_sid;       /* split-K: super-chunk ids sid0 .. sid0 + n_sid - 1 */
    float * part;              /* split-K: [n_tiles Hkv n_sid, part_n] the super-chunk partials, or NULL */
    size_t part_n;
    float * conv;              /* a typed cache: [n_threads, CH (dk + dv)] the chunk's rows as floats, else NULL */
    const tk_type_traits * tk, * tv;
    tk_attn_cvt_fn cvt;        /* the level's row conversion (attn_body.h), else the types' to_float */
    tk_attn_chunk_fn direct;   /* a typed cache the level's chunk reads directly (f16 / bf16 K and V), else NULL */
    int32_t slot[TK_ATTN_CHUNK];   /* slot i's "cell" in the converted rows: i */
} attn_run_job;

typedef struct {
    float * S, * mc, * lc, * Oc, * ms, * ls, * Os, * mt, * lt, * Ot;
    float * conv;              /* a typed cache: the thread's converted rows, else NULL */
    int32_t * cell;
    uint8_t * vis, * any;
} attn_ws;

static attn_ws attn_ws_at(const attn_run_job * j, int thread) {
    const size_t Rp = (size_t) attn_rows_max(j->grp), CH = TK_ATTN_CHUNK, dv = (size_t) j->a->dv;
    float * w = j->work + (size_t) thread * j->ws;
    attn_ws s;
    s.S = w;
    w += Rp * CH;
    s.cell = (int32_t *) w;
    w += CH;
    s.vis = (uint8_t *) w;
    s.any = s.vis + (size_t) j->T * CH;
    w += ((size_t) (attn_tile_tokens(j->grp) + 1) * CH + 3) / 4;
    float ** tri[3][3] = {{&s.mc, &s.lc, &s.Oc}, {&s.ms, &s.ls, &s.Os}, {&s.mt, &s.lt, &s.Ot}};
    for (int k = 0; k < 3; k++) {
        *tri[k][0] = w;
        *tri[k][1] = w + Rp;
        *tri[k][2] = w + 2 * Rp;
        w += Rp * (dv + 2);
    }
    s.conv = j->conv ? j->conv + (size_t) thread * TK_ATTN_CHUNK * ((size_t) j->a->dk + dv) : NULL;
    return s;
}

/* the row's tile `tile` for KV group g */
static tk_attn_tile attn_tile_at(const attn_run_job * j, int64_t tile, int32_t g) {
    const int32_t nst = j->a->ub->n_seq_tokens, i0 = (int32_t) tile * j->T;
    tk_attn_tile tl;
    tl.t0 = j->row * nst + i0;
    tl.grp = j->grp;
    tl.g = g;
    tl.R = (nst - i0 < j->T ? nst - i0 : j->T) * j->grp;
    tl.Rp = (tl.R + 3) / 4 * 4;
    return tl;
}

#define ATTN_SPAN (TK_ATTN_SUPER * TK_ATTN_CHUNK)   /* positions per super-chunk */

/* the first index of the list whose position is >= p */
static int32_t attn_lower(const attn_run_job * j, int64_t p) {
    const int32_t * pos = j->a->kv->pos;
    int32_t lo = 0, hi = j->n_list;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (pos[j->list[mid]] < p) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* the chunk of list entries [i0, i1) (one chunk's positions, from k CH): cell per slot, the
 * tile's vis / any; returns whether any token sees a slot */
static int attn_fill_chunk(const attn_run_job * j, const tk_attn_tile * tl, int32_t i0, int32_t i1, int64_t k,
                           const attn_ws * w) {
    const tk_attn_args * a = j->a;
    const tk_kv_view * kv = a->kv;
    const int32_t nt = tl->R / tl->grp;
    memset(w->any, 0, TK_ATTN_CHUNK);
    for (int32_t i = i0; i < i1; i++) w->cell[kv->pos[j->list[i]] - k * TK_ATTN_CHUNK] = j->list[i];
    int seen = 0;
    for (int32_t jt = 0; jt < nt; jt++) {
        const int32_t t = tl->t0 + jt, pt = a->ub->pos[t];
        const uint8_t * sel = a->sel ? a->sel + (size_t) t * (size_t) kv->n_cells : NULL;
        uint8_t * v = w->vis + (size_t) jt * TK_ATTN_CHUNK;
        memset(v, 0, TK_ATTN_CHUNK);
        for (int32_t i = i0; i < i1; i++) {
            const int32_t c = j->list[i], pc = kv->pos[c];
            const uint8_t see = pc <= pt && (!kv->window || pc > pt - kv->window) && (!sel || sel[c]);
            v[pc - k * TK_ATTN_CHUNK] = see;
            w->any[pc - k * TK_ATTN_CHUNK] |= see;
            seen |= see;
        }
    }
    return seen;
}

/* a typed cache: the chunk's K and V rows of the tile's group that some token sees (any[i]),
 * converted into the thread's rows, slot i at i dk and i dv; the args of a float32 cache over
 * them (cell of slot i: i, j->slot) */
static tk_attn_args attn_convert(const attn_run_job * j, const tk_attn_tile * tl, const attn_ws * w) {
    const tk_attn_args * a = j->a;
    tk_attn_args b = *a;
    const int32_t dk = a->dk, dv = a->dv;
    float * kc = w->conv, * vc = w->conv + (size_t) TK_ATTN_CHUNK * dk;
    /* MLA: V is the first dv values of K's row (same rows, same type): taken from K's converted row */
    const int v_in_k = a->vt == a->kt && a->v_cb == a->k_cb && a->v_gb == a->k_gb && a->type_v == a->type_k && dv <= dk;
    for (int32_t i = 0; i < TK_ATTN_CHUNK; i++) {
        if (!w->any[i]) continue;
        const size_t c = (size_t) w->cell[i];
        const uint8_t * ks = a->kt + c * a->k_cb + (size_t) tl->g * a->k_gb, * vs = a->vt + c * a->v_cb + (size_t) tl->g * a->v_gb;
        if (!j->cvt(a->type_k, ks, kc + (size_t) i * dk, dk)) j->tk->to_float(ks, kc + (size_t) i * dk, dk);
        if (v_in_k) continue;
        if (!j->cvt(a->type_v, vs, vc + (size_t) i * dv, dv)) j->tv->to_float(vs, vc + (size_t) i * dv, dv);
    }
    b.k = kc;
    b.v = v_in_k ? kc : vc;
    b.k_cs = dk;
    b.v_cs = v_in_k ? dk : dv;
    b.k_gs = b.v_gs = 0;
    b.type_k = b.type_v = TK_GGML_F32;
    return b;
}

/* the filled chunk (attn_fill_chunk) for the tile's group, folded into (ms, ls, Os) of rows [0, R) */
static void attn_chunk_fold(const attn_run_job * j, const tk_attn_tile * tl, const attn_ws * w, float * ms, float * ls,
                            float * Os) {
    const tk_attn_args * a = j->a;
    const int32_t dv = a->dv;
    if (j->direct) {           /* f16 / bf16 K and V: the chunk reads the cache's rows */
        j->direct(a, tl, w->cell, w->vis, w->any, w->mc, w->lc, w->Oc, w->S);
    } else if (j->conv) {      /* another typed cache: the rows some token sees, as floats, then the float32 chunk on them */
        const tk_attn_args b = attn_convert(j, tl, w);
        j->chunk(&b, tl, j->slot, w->vis, w->any, w->mc, w->lc, w->Oc, w->S);
    } else {
        j->chunk(a, tl, w->cell, w->vis, w->any, w->mc, w->lc, w->Oc, w->S);
    }
    for (int32_t r = 0; r < tl->R; r++)
        j->fold(dv, &ms[r], &ls[r], Os + (size_t) r * dv, w->mc[r], w->lc[r], w->Oc + (size_t) r * dv);
}

/* a hint (no effect on any value): the K and V lines of KV groups [g0, g1) of the cells of list
 * entries [i0, i1) into the L2, one chunk ahead of the chunk that reads them (a cell's rows are
 * read once per chunk from memory, and each chunk's cells lie at a stride the hardware
 * prefetchers follow only within a page).  noipa: a function of prefetches alone is found pure,
 * and its call deleted */
__attribute__((noipa)) static void attn_prefetch(const attn_run_job * j, int32_t g0, int32_t g1, int32_t i0, int32_t i1) {
    const tk_attn_args * a = j->a;
    const uint8_t * kb, * vb;
    size_t kcs, vcs, kgs, vgs;
    if (tk_attn_typed(a)) {
        kb = a->kt;
        vb = a->vt;
        kcs = a->k_cb;
        vcs = a->v_cb;
        kgs = a->k_gb;
        vgs = a->v_gb;
    } else {
        kb = (const uint8_t *) (const void *) a->k;
        vb = (const uint8_t *) (const void *) a->v;
        kcs = (size_t) a->k_cs * sizeof(float);
        vcs = (size_t) a->v_cs * sizeof(float);
        kgs = (size_t) a->k_gs * sizeof(float);
        vgs = (size_t) a->v_gs * sizeof(float);
    }
    const size_t kn = kgs ? (size_t) (g1 - g0) * kgs : a->kv->k_row, vn = vgs ? (size_t) (g1 - g0) * vgs : a->kv->v_row;
    const int same = vb == kb && vcs == kcs && vgs == kgs;   /* MLA: V is K's latent */
    for (int32_t i = i0; i < i1; i++) {
        const size_t c = (size_t) j->list[i];
        const uint8_t * k = kb + c * kcs + (size_t) g0 * kgs, * v = vb + c * vcs + (size_t) g0 * vgs;
        for (size_t o = 0; o < kn; o += 64) __builtin_prefetch(k + o, 0, 2);
        if (!same)
            for (size_t o = 0; o < vn; o += 64) __builtin_prefetch(v + o, 0, 2);
    }
}

/* the tile's super-chunk over list entries [i0, i1) for KV groups [g0, g1): each chunk's slots
 * filled once (they do not depend on the group) and run for every group in turn, folded in
 * position order into group g's (m [Rp], l [Rp], O [Rp, dv]) at out + (g - g0) gstride floats
 * (rows [0, R)).  With several groups, a cell's K and V lines (every group's rows) are read together. */
static void attn_super(const attn_run_job * j, int64_t tile, int32_t g0, int32_t g1, int32_t i0, int32_t i1,
                       const attn_ws * w, float * out, size_t gstride) {
    const int32_t * pos = j->a->kv->pos;
    const size_t Rp = (size_t) attn_rows_max(j->grp);
    const tk_attn_tile t0 = attn_tile_at(j, tile, g0);
    for (int32_t g = g0; g < g1; g++) {
        float * o = out + (size_t) (g - g0) * gstride;
        for (int32_t r = 0; r < t0.R; r++) {
            o[r] = -INFINITY;
            o[Rp + r] = 0.0f;
        }
    }
    for (int32_t i = i0; i < i1;) {
        const int64_t k = pos[j->list[i]] / TK_ATTN_CHUNK;
        int32_t e = i;
        while (e < i1 && pos[j->list[e]] / TK_ATTN_CHUNK == k) e++;
        const int seen = attn_fill_chunk(j, &t0, i, e, k, w);
        i = e;
        if (!seen) continue;
        attn_prefetch(j, g0, g1, e, e + TK_ATTN_CHUNK < i1 ? e + TK_ATTN_CHUNK : i1);
        for (int32_t g = g0; g < g1; g++) {
            const tk_attn_tile tl = attn_tile_at(j, tile, g);
            float * o = out + (size_t) (g - g0) * gstride;
            attn_chunk_fold(j, &tl, w, o, o + Rp, o + 2 * Rp);
        }
    }
}

/* the tile's output rows: O / l (0 where the row saw no cell) */
static void attn_write(const tk_attn_args * a, const tk_attn_tile * tl, const float * l, const float * O) {
    for (int32_t r = 0; r < tl->R; r++) {
        float * o = a->o + (int64_t) (tl->t0 + r / tl->grp) * a->o_ts + (int64_t) (tl->g * tl->grp + r % tl->grp) * a->o_hs;
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        for (int32_t i = 0; i < a->dv; i++) o[i] = O[(size_t) r * a->dv + i] * inv;
    }
}

static void attn_total_init(const tk_attn_tile * tl, const attn_ws * w) {
    for (int32_t r = 0; r < tl->R; r++) {
        w->mt[r] = -INFINITY;
        w->lt[r] = 0.0f;
    }
}

/* item p = (tile, group): every super-chunk in order, folded into the total, written */
static void attn_items(void * arg, int64_t p0, int64_t p1, int thread) {
    const attn_run_job * j = arg;
    const attn_ws w = attn_ws_at(j, thread);
    const int32_t dv = j->a->dv, * pos = j->a->kv->pos;
    for (int64_t p = p0; p < p1; p++) {
        const tk_attn_tile tl = attn_tile_at(j, p / j->a->Hkv, (int32_t) (p % j->a->Hkv));
        attn_total_init(&tl, &w);
        for (int32_t i = 0; i < j->n_list;) {
            const int32_t e = attn_lower(j, (int64_t) (pos[j->list[i]] / ATTN_SPAN + 1) * ATTN_SPAN);
            attn_super(j, p / j->a->Hkv, tl.g, tl.g + 1, i, e, &w, w.ms, 0);
            for (int32_t r = 0; r < tl.R; r++)
                j->fold(dv, &w.mt[r], &w.lt[r], w.Ot + (size_t) r * dv, w.ms[r], w.ls[r], w.Os + (size_t) r * dv);
            i = e;
        }
        attn_write(j->a, &tl, w.lt, w.Ot);
    }
}

/* split-K: item p = (tile, super-chunk s), the KV groups inside: each chunk's slots are filled
 * once (they do not depend on the group) and run for every group in turn, so the cache lines of
 * a cell (every group's K and V rows) are read together, and the threads stream disjoint cell
 * ranges.  The partial of (tile, group g, s) lands at part + ((tile Hkv + g) n_sid + s) part_n:
 * m [Rp], l [Rp], O [Rp, dv]. */
static void attn_split_items(void * arg, int64_t p0, int64_t p1, int thread) {
    const attn_run_job * j = arg;
    const attn_ws w = attn_ws_at(j, thread);
    const int32_t Hkv = j->a->Hkv;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t tile = p / j->n_sid, s = p % j->n_sid, sid = j->sid0 + s;
        attn_super(j, tile, 0, Hkv, attn_lower(j, sid * ATTN_SPAN), attn_lower(j, (sid + 1) * ATTN_SPAN), &w,
                   j->part + (size_t) (tile * Hkv * j->n_sid + s) * j->part_n, (size_t) j->n_sid * j->part_n);
    }
}

/* split-K: the partials of item (tile, group) folded in super-chunk order, written */
static void attn_split_fold(void * arg, int64_t p0, int64_t p1, int thread) {
    const attn_run_job * j = arg;
    const attn_ws w = attn_ws_at(j, thread);
    const size_t Rp = (size_t) attn_rows_max(j->grp), dv = (size_t) j->a->dv;
    for (int64_t p = p0; p < p1; p++) {
        const tk_attn_tile tl = attn_tile_at(j, p / j->a->Hkv, (int32_t) (p % j->a->Hkv));
        attn_total_init(&tl, &w);
        for (int32_t s = 0; s < j->n_sid; s++) {
            const float * pt = j->part + (size_t) (p * j->n_sid + s) * j->part_n;
            for (int32_t r = 0; r < tl.R; r++)
                j->fold((int32_t) dv, &w.mt[r], &w.lt[r], w.Ot + (size_t) r * dv, pt[r], pt[Rp + r], pt + 2 * Rp + (size_t) r * dv);
        }
        attn_write(j->a, &tl, w.lt, w.Ot);
    }
}

/* cells[0 .. n) sorted by pos[cell] (heapsort: in place, n log n whatever the order the cells
 * were claimed in; tk_kv_seq_cells' insertion sort is quadratic on a displaced block) */
static void attn_sift(int32_t * c, const int32_t * pos, int32_t i, int32_t n) {
    for (;;) {
        int32_t k = 2 * i + 1;
        if (k >= n) return;
        if (k + 1 < n && pos[c[k + 1]] > pos[c[k]]) k++;
        if (pos[c[k]] <= pos[c[i]]) return;
        const int32_t t = c[i];
        c[i] = c[k];
        c[k] = t;
        i = k;
    }
}

static void attn_sort_cells(int32_t * c, const int32_t * pos, int32_t n) {
    int32_t i = 1;
    while (i < n && pos[c[i - 1]] <= pos[c[i]]) i++;
    if (i >= n) return;        /* already in order: the usual case */
    for (i = n / 2 - 1; i >= 0; i--) attn_sift(c, pos, i, n);
    for (i = n - 1; i > 0; i--) {
        const int32_t t = c[0];
        c[0] = c[i];
        c[i] = t;
        attn_sift(c, pos, 0, i);
    }
}

/* ubatch row s: its sequence's cells in position order into the list; 0 when two share a position */
static int attn_row_list(tk_context * ctx, const tk_attn_args * a, int32_t s, attn_run_job * j) {
    const tk_ubatch * ub = a->ub;
    const int32_t nst = ub->n_seq_tokens;
    int32_t pmax = -1;
    for (int32_t i = 0; i < nst; i++) pmax = ub->pos[s * nst + i] > pmax ? ub->pos[s * nst + i] : pmax;
    int32_t * list = (int32_t *) ctx->attn;
    const tk_kv_view * kv = a->kv;
    const uint64_t bit = UINT64_C(1) << ub->seq[s];
    j->n_list = 0;
    for (int32_t c = 0; c < kv->n_cells; c++)
        if ((kv->seqs[c] & bit) && kv->pos[c] >= 0 && kv->pos[c] <= pmax) list[j->n_list++] = c;
    attn_sort_cells(list, kv->pos, j->n_list);
    for (int32_t i = 1; i < j->n_list; i++)
        if (a->kv->pos[list[i]] == a->kv->pos[list[i - 1]]) return 0;
    j->list = list;
    j->row = s;
    j->n_tiles = (nst + j->T - 1) / j->T;
    return 1;
}

int tk_attn_run(tk_context * ctx, const tk_attn_args * a) {
    attn_run_job j;
    memset(&j, 0, sizeof j);
    j.a = a;
    j.chunk = tk_attn_chunk_plain;
    j.fold = tk_attn_fold_plain;
    j.cvt = attn_cvt_of(tk_cpu_level());
#ifdef TK_HAVE_X86
    const int level = tk_cpu_level();
    if (level >= TK_CPU_AVX512) {
        j.chunk = tk_attn_chunk_avx512;
        j.fold = tk_attn_fold_avx512;
    } else if (level >= TK_CPU_AVX2) {
        j.chunk = tk_attn_chunk_avx2;
        j.fold = tk_attn_fold_avx2;
    }
#endif
    const int n_threads = tk_pool_size(ctx->pool);
    j.grp = a->H / a->Hkv;
    j.work = (float *) ctx->work;
    j.ws = attn_ws_floats(j.grp, a->dv);
    j.part_n = tk_attn_part_floats(a->H, a->Hkv, a->dv);
    const size_t work = tk_attn_work_bytes(a->H, a->Hkv, a->dk, a->dv, n_threads);
    if (ctx->work_bytes < work || ctx->attn_n < (size_t) a->kv->n_cells) return 0;
    if (tk_attn_typed(a)) {    /* the conversion rows after the threads' workspaces */
        if (ctx->work_bytes < work + tk_attn_conv_bytes(a->dk, a->dv, n_threads)) return 0;
        j.conv = (float *) (void *) ((uint8_t *) ctx->work + work);
        j.tk = tk_type_traits_get(a->type_k);
        j.tv = tk_type_traits_get(a->type_v);
        for (int32_t i = 0; i < TK_ATTN_CHUNK; i++) j.slot[i] = i;
        if (tk_attn_reference() != 2) j.direct = attn_direct_of(tk_cpu_level(), a->type_k, a->type_v);
    }
    j.T = attn_tile_tokens(j.grp);
    if (j.T > a->ub->n_seq_tokens) j.T = a->ub->n_seq_tokens;
    for (int32_t s = 0; s < a->ub->n_seqs; s++)   /* every list checked before any output is written */
        if (!attn_row_list(ctx, a, s, &j)) return 0;
    for (int32_t s = 0; s < a->ub->n_seqs; s++) {
        attn_row_list(ctx, a, s, &j);
        if (!j.n_list) {       /* nothing to see: zeros */
            for (int32_t g = 0; g < a->Hkv; g++)
                for (int64_t tile = 0; tile < j.n_tiles; tile++) {
                    const attn_ws w = attn_ws_at(&j, 0);
                    const tk_attn_tile tl = attn_tile_at(&j, tile, g);
                    attn_total_init(&tl, &w);
                    attn_write(a, &tl, w.lt, w.Ot);
                }
            continue;
        }
        const int64_t items = (int64_t) j.n_tiles * a->Hkv;
        j.sid0 = a->kv->pos[j.list[0]] / ATTN_SPAN;
        j.n_sid = a->kv->pos[j.list[j.n_list - 1]] / ATTN_SPAN - j.sid0 + 1;
        /* split-K, the groups inside, when the tiles are few (decoding: one) and the partials
         * fit: the threads stream disjoint cell ranges and each cell's lines are read once for
         * all its groups (with the groups outside, each group's pass over a cache larger than
         * the L2 brings in the lines of the others).  The folds are the same either way
         * (attn.h), so the choice changes no bit. */
        const size_t room = ctx->attn_n - (size_t) j.n_list;
        if (j.n_sid > 1 && j.n_tiles < 2 * n_threads && (size_t) items * (size_t) j.n_sid * j.part_n <= room) {
            j.part = ctx->attn + j.n_list;
            tk_pool_run(ctx->pool, j.n_tiles * j.n_sid, attn_split_items, &j);
            tk_pool_run(ctx->pool, items, attn_split_fold, &j);
        } else {
            tk_pool_run(ctx->pool, items, attn_items, &j);
        }
    }
    return 1;
}
