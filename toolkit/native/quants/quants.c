/* quants.c: the public quantization API (toolkit.h: tk_quant_row_size, tk_quantize_rows,
 * tk_dequantize_row(s), tk_convert_rows(_imatrix)), its row-parallel driver, and the row
 * converters of the float types F32, F16 and BF16.  Each type's converters come from the
 * type table (ggml_types.c); the block types' are in quants_legacy.c, quants_kquants.c and
 * quants_iquants.c, bit-exact with llama-quantize (ggml_quantize_chunk, build 0c1e570).
 *
 * F16 / BF16: ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref (quants.h conversions).
 * Rows are independent: quantizing a tensor in any split of whole rows gives the same bytes.
 * Floating-point contraction is off (a*b+c must not become fma), as in ggml-base's baseline
 * x86-64 build: the fp16 rounding in quants.h depends on it.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quants/quants.h"
#include "tk_internal.h"

/* ==== float types ==================================================================== */

void tkq_quantize_f32(const float * x, void * y, int64_t k) { memcpy(y, x, (size_t) k * sizeof(float)); }
void tkq_quantize_f16(const float * x, void * vy, int64_t k) {
    uint16_t * y = vy;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_fp32_to_fp16(x[i]);
}
void tkq_quantize_bf16(const float * x, void * vy, int64_t k) {
    uint16_t * y = vy;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_fp32_to_bf16(x[i]);
}
void tkq_dequantize_f32(const void * x, float * y, int64_t k) { memcpy(y, x, (size_t) k * sizeof(float)); }
void tkq_dequantize_f16(const void * vx, float * y, int64_t k) {
    const uint16_t * x = vx;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_fp16_to_fp32(x[i]);
}
void tkq_dequantize_bf16(const void * vx, float * y, int64_t k) {
    const uint16_t * x = vx;
    for (int64_t i = 0; i < k; i++) y[i] = tkq_bf16_to_fp32(x[i]);
}

/* ==== public entry points ============================================================ */

/* The traits of a type this file converts both ways (to_float and from_float); NULL else. */
static const tk_type_traits * find_qtype(int type) {
    const tk_type_traits * t = tk_type_traits_get(type);
    return t && t->to_float && t->from_float ? t : NULL;
}

int tk_quant_type_supported(int type) { return find_qtype(type) != NULL; }

int64_t tk_quant_row_size(int type, int64_t n_per_row) {
    const tk_type_traits * t = find_qtype(type);
    if (!t || n_per_row <= 0 || n_per_row % t->blck_size) return -1;
    return n_per_row / t->blck_size * t->type_size;
}

tk_status tk_dequantize_row(int type, const void * src, float * dst, int64_t n) {
    const tk_type_traits * t = find_qtype(type);
    if (!t) return TK_FAIL(TK_ERR_UNSUPPORTED, "dequantize: ggml type %d is not supported", type);
    if (!src || !dst || n < 0) return TK_FAIL(TK_ERR_INVALID, "dequantize: null buffer or negative count");
    if (n % t->blck_size) {
        return TK_FAIL(TK_ERR_INVALID, "dequantize: %lld elements is not a multiple of the block size %d of ggml type %d",
                       (long long) n, (int) t->blck_size, type);
    }
    t->to_float(src, dst, n);
    return TK_OK;
}

/* ---- row-parallel driver: each thread takes a contiguous run of whole rows ---------- */

typedef struct {
    const tk_type_traits * st;   /* source type (NULL: src is float32) */
    const tk_type_traits * dt;   /* destination type (NULL: dst is float32) */
    const void * src;
    void * dst;
    int64_t n_rows;          /* rows in the call */
    int64_t chunk;           /* rows per work item (~64K elements) */
    int64_t n_per_row;
    size_t src_row_bytes;    /* bytes of one source row */
    size_t dst_row_bytes;    /* bytes of one destination row */
    const float * imatrix;   /* [n_per_row] importance of each column, or NULL */
    int64_t next;            /* next row to hand out (atomic) */
    int failed;              /* set when a thread could not allocate its row scratch (atomic) */
} rows_work;

/* Threads take chunks of rows from a shared counter (a slow or busy core does less, as in
 * llama-quantize).  Each row is dequantized into a one-row float32 scratch (unless the source
 * is float32) and quantized from it, so no band-sized float32 buffer is ever needed. */
static void run_rows(rows_work * j) {
    float * scratch = NULL;
    if (j->st && j->dt) {
        scratch = malloc((size_t) j->n_per_row * sizeof(float));
        if (!scratch) { __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED); return; }
    }
    for (;;) {
        const int64_t r0 = __atomic_fetch_add(&j->next, j->chunk, __ATOMIC_RELAXED);
        if (r0 >= j->n_rows) break;
        const int64_t r1 = r0 + j->chunk < j->n_rows ? r0 + j->chunk : j->n_rows;
        for (int64_t r = r0; r < r1; r++) {
            const char * s = (const char *) j->src + (size_t) r * j->src_row_bytes;
            char * d = (char *) j->dst + (size_t) r * j->dst_row_bytes;
            const float * x = (const float *) s;
            if (!j->dt) {
                j->st->to_float(s, (float *) d, j->n_per_row);
                continue;
            }
            if (j->st) {
                j->st->to_float(s, scratch, j->n_per_row);
                x = scratch;
            }
            if (j->imatrix && j->dt->from_float_imatrix) j->dt->from_float_imatrix(x, d, j->n_per_row, j->imatrix);
            else j->dt->from_float(x, d, j->n_per_row);
        }
    }
    free(scratch);
}

static void * run_rows_thread(void * arg) { run_rows((rows_work *) arg); return NULL; }

#define TK_QUANT_MAX_THREADS 256

static const tk_type_traits * check_type(int type, int64_t n_per_row, const char * what, tk_status * st) {
    const tk_type_traits * t = find_qtype(type);
    if (!t) { *st = TK_FAIL(TK_ERR_UNSUPPORTED, "%s: ggml type %d is not supported", what, type); return NULL; }
    if (n_per_row % t->blck_size) {
        *st = TK_FAIL(TK_ERR_INVALID, "%s: row of %lld elements is not a multiple of the block size %d of ggml type %d",
                      what, (long long) n_per_row, (int) t->blck_size, type);
        return NULL;
    }
    return t;
}

/* src_type / dst_type < 0 mean float32 rows */
static tk_status rows_parallel(int src_type, int dst_type, const void * src, void * dst,
                               int64_t n_rows, int64_t n_per_row, const float * imatrix, int n_threads, const char * what) {
    tk_status st = TK_OK;
    if (!src || !dst) return TK_FAIL(TK_ERR_INVALID, "%s: null buffer", what);
    if (n_rows < 0 || n_per_row <= 0) {
        return TK_FAIL(TK_ERR_INVALID, "%s: bad shape (%lld rows of %lld)", what, (long long) n_rows, (long long) n_per_row);
    }
    const tk_type_traits * s = NULL, * d = NULL;
    if (src_type >= 0 && !(s = check_type(src_type, n_per_row, what, &st))) return st;
    if (dst_type >= 0 && !(d = check_type(dst_type, n_per_row, what, &st))) return st;
    const size_t src_row = s ? (size_t) (n_per_row / s->blck_size) * (size_t) s->type_size : (size_t) n_per_row * 4;
    const size_t dst_row = d ? (size_t) (n_per_row / d->blck_size) * (size_t) d->type_size : (size_t) n_per_row * 4;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > TK_QUANT_MAX_THREADS) n_threads = TK_QUANT_MAX_THREADS;
    /* at least ~64K elements per thread, so tiny tensors do not pay for thread start-up */
    int64_t max_useful = (n_rows * n_per_row) / 65536 + 1;
    if (max_useful < n_threads) n_threads = (int) max_useful;
    if (n_threads > n_rows) n_threads = (int) (n_rows > 0 ? n_rows : 1);

    int64_t chunk = 65536 / n_per_row;
    if (chunk < 1) chunk = 1;
    rows_work work = { s, d, src, dst, n_rows, chunk, n_per_row, src_row, dst_row, imatrix, 0, 0 };
    pthread_t tids[TK_QUANT_MAX_THREADS];
    int started[TK_QUANT_MAX_THREADS] = { 0 };
    for (int i = 1; i < n_threads; i++) {
        started[i] = pthread_create(&tids[i], NULL, run_rows_thread, &work) == 0;  /* failure: fewer threads */
    }
    run_rows(&work);
    for (int i = 1; i < n_threads; i++) {
        if (started[i]) pthread_join(tids[i], NULL);
    }
    if (work.failed) return TK_FAIL(TK_ERR_NOMEM, "%s: cannot allocate a row of %lld floats", what, (long long) n_per_row);
    return TK_OK;
}

tk_status tk_quantize_rows(int type, const float * src, void * dst, int64_t n_rows, int64_t n_per_row, int n_threads) {
    if (type < 0) return TK_FAIL(TK_ERR_UNSUPPORTED, "quantize: ggml type %d is not supported", type);
    return rows_parallel(-1, type, src, dst, n_rows, n_per_row, NULL, n_threads, "quantize");
}

tk_status tk_dequantize_rows(int type, const void * src, float * dst, int64_t n_rows, int64_t n_per_row, int n_threads) {
    if (type < 0) return TK_FAIL(TK_ERR_UNSUPPORTED, "dequantize: ggml type %d is not supported", type);
    return rows_parallel(type, -1, src, dst, n_rows, n_per_row, NULL, n_threads, "dequantize");
}

tk_status tk_convert_rows(int src_type, const void * src, int dst_type, void * dst,
                          int64_t n_rows, int64_t n_per_row, int n_threads) {
    return tk_convert_rows_imatrix(src_type, src, dst_type, dst, n_rows, n_per_row, NULL, n_threads);
}

tk_status tk_convert_rows_imatrix(int src_type, const void * src, int dst_type, void * dst,
                                  int64_t n_rows, int64_t n_per_row, const float * imatrix, int n_threads) {
    if (dst_type < 0) return TK_FAIL(TK_ERR_UNSUPPORTED, "convert: bad ggml type %d -> %d", src_type, dst_type);
    /* a float32 source is read as is (no scratch copy) */
    return rows_parallel(src_type == TKQ_T_F32 ? -1 : src_type, dst_type, src, dst, n_rows, n_per_row, imatrix,
                         n_threads, "convert");
}
