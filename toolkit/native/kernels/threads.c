/* threads.c: a small persistent pthread pool for data-parallel loops (tk_pool).
 *
 * tk_pool_run(pool, n, fn, arg) cuts [0, n) into chunks (about TK_POOL_CHUNKS per thread,
 * boundaries at multiples of 4 or 12 when chunks are large enough) that the threads claim one
 * at a time from a shared counter; the calling thread claims too, and returns when every
 * chunk is done.  fn(arg, i0, i1, thread) may thus be called several times per thread, on
 * disjoint ranges that together cover [0, n); `thread` (0 = caller) indexes per-thread
 * scratch.  Each item is computed by exactly one call with the same loop as the serial
 * path, so results do not depend on the thread count, the chunking or which thread ran what.
 *
 * Why claimed chunks and not one fixed slice per thread: on a machine shared with other
 * processes a thread is often descheduled or slow to wake; with fixed slices every mat-vec
 * then waits for it (measured on the 2-core EPYC: 150 jobs per generated token, the caller
 * or the worker slept in half of them, 1.33 of 2 cores busy).  With claimed chunks the
 * running threads take the late one's share.  ggml's CPU backend does the same (a shared
 * chunk counter in ggml_compute_forward_mul_mat).
 *
 * Waiting: a worker spins on the job ticket for up to TK_POOL_SPIN_NS after its last job
 * (pause, then sched_yield), then sleeps on a condition variable; the caller wakes sleepers only when there are
 * any.  The caller, once no chunk is left to claim, spins on the chunks still running, then
 * yields the CPU (their thread may be waiting for this core).
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "tk_internal.h"

#ifndef TK_POOL_CHUNKS
#define TK_POOL_CHUNKS 8              /* chunks per thread */
#endif
#ifndef TK_POOL_SPIN_NS
#define TK_POOL_SPIN_NS 2000000       /* a worker spins 2 ms for the next job before sleeping */
#endif
#ifndef TK_POOL_PAUSE_NS
#define TK_POOL_PAUSE_NS 100000       /* ... pausing for the first 0.1 ms, yielding after */
#endif
#define TK_POOL_WAIT_SPINS 20000      /* caller: pauses (~0.6 ms on Zen 3) before yielding */

/* The job ticket packs (generation << 32) | (n_chunks << 16) | next_chunk in one 64-bit
 * atomic: a claim is a compare-and-swap that checks the generation, so a late worker can
 * never take a chunk of a job other than the one it read. */
#define TK_POOL_MAX_CHUNKS 0xFFFF
#define T_GEN(t)   ((uint32_t) ((t) >> 32))
#define T_N(t)     ((int64_t) (((t) >> 16) & 0xFFFF))
#define T_NEXT(t)  ((int64_t) ((t) & 0xFFFF))

struct tk_pool {
    int n;                     /* threads including the caller */
    pthread_t * tid;           /* [n-1] workers */
    pthread_mutex_t mu;
    pthread_cond_t go;         /* sleeping workers wait for a new ticket */
    int stop;                  /* atomic */
    int sleepers;              /* atomic: workers in (or entering) the condition wait */
    uint32_t gen;              /* caller only: generation of the last job */
    /* current job: written by the caller before it publishes the ticket; read by a worker
     * only after it claimed a chunk of that ticket (the job cannot end before the chunk) */
    tk_task_fn fn;
    void * arg;
    int64_t total, chunk;      /* items, items per chunk */
    _Alignas(64) uint64_t ticket;   /* atomic */
    _Alignas(64) int64_t done;      /* atomic: chunks finished */
};

typedef struct { tk_pool * pool; int index; } worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* next chunk of job `gen`, or -1 when none is left (or the job is over) */
static int64_t claim(tk_pool * pool, uint32_t gen) {
    uint64_t t = __atomic_load_n(&pool->ticket, __ATOMIC_ACQUIRE);
    for (;;) {
        if (T_GEN(t) != gen || T_NEXT(t) >= T_N(t)) return -1;
        if (__atomic_compare_exchange_n(&pool->ticket, &t, t + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return T_NEXT(t);
    }
}

/* claim and run chunks of job `gen` until none is left */
static void run_chunks(tk_pool * pool, uint32_t gen, int thread) {
    int64_t c;
    while ((c = claim(pool, gen)) >= 0) {
        const int64_t i0 = c * pool->chunk;
        const int64_t i1 = i0 + pool->chunk < pool->total ? i0 + pool->chunk : pool->total;
        pool->fn(pool->arg, i0, i1, thread);
        __atomic_add_fetch(&pool->done, 1, __ATOMIC_RELEASE);
    }
}

static void * worker(void * p) {
    worker_arg * wa = p;
    tk_pool * pool = wa->pool;
    const int index = wa->index;
    free(wa);
    uint32_t seen = 0;
    for (;;) {
        /* spin for the next job (a decode issues one every few microseconds to a few
         * milliseconds; a condition-variable wake-up costs tens of microseconds), then sleep */
        int found = 0, yielding = 0;
        int64_t t0 = 0;
        for (int i = 0; !found; i++) {
            if (T_GEN(__atomic_load_n(&pool->ticket, __ATOMIC_ACQUIRE)) != seen || __atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) {
                found = 1;
                break;
            }
            if ((i & 255) == 0) {
                const int64_t t = now_ns();
                if (i == 0) t0 = t;
                else if (t - t0 > TK_POOL_SPIN_NS) break;
                yielding = t - t0 > TK_POOL_PAUSE_NS;
            }
            /* past the first TK_POOL_PAUSE_NS, yield instead of pause: with more threads
             * than free cores the spinner then gives its core away */
            if (yielding) sched_yield();
            else cpu_relax();
        }
        if (!found) {
            pthread_mutex_lock(&pool->mu);
            __atomic_add_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            while (!__atomic_load_n(&pool->stop, __ATOMIC_SEQ_CST) && T_GEN(__atomic_load_n(&pool->ticket, __ATOMIC_SEQ_CST)) == seen)
                pthread_cond_wait(&pool->go, &pool->mu);
            __atomic_sub_fetch(&pool->sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool->mu);
        }
        if (__atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) return NULL;
        seen = T_GEN(__atomic_load_n(&pool->ticket, __ATOMIC_ACQUIRE));
        run_chunks(pool, seen, index);
    }
}

tk_status tk_pool_new(int n_threads, tk_pool ** out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256;
    tk_pool * pool = NULL;
    if (posix_memalign((void **) &pool, 64, sizeof *pool) != 0) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    *pool = (tk_pool) {0};
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->go, NULL);
    if (n_threads > 1) {
        pool->tid = calloc((size_t) n_threads - 1, sizeof(pthread_t));
        if (!pool->tid) { pool->n = 1; tk_pool_free(pool); return TK_FAIL(TK_ERR_NOMEM, "out of memory"); }
        for (int i = 1; i < n_threads; i++) {
            worker_arg * wa = malloc(sizeof *wa);
            if (wa) { wa->pool = pool; wa->index = i; }
            if (!wa || pthread_create(&pool->tid[i - 1], NULL, worker, wa) != 0) {
                free(wa);
                pool->n = i;   /* only the started workers are joined */
                tk_pool_free(pool);
                return TK_FAIL(TK_ERR_NOMEM, "cannot start thread %d of %d", i, n_threads);
            }
        }
    }
    *out = pool;
    return TK_OK;
}

void tk_pool_free(tk_pool * pool) {
    if (!pool) return;
    if (pool->tid) {
        pthread_mutex_lock(&pool->mu);
        __atomic_store_n(&pool->stop, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&pool->go);
        pthread_mutex_unlock(&pool->mu);
        for (int i = 1; i < pool->n; i++) pthread_join(pool->tid[i - 1], NULL);
        free(pool->tid);
    }
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->go);
    free(pool);
}

int tk_pool_size(const tk_pool * pool) { return pool ? pool->n : 1; }

void tk_pool_run(tk_pool * pool, int64_t n, tk_task_fn fn, void * arg) {
    if (n <= 0) return;
    if (!pool || pool->n == 1 || n == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    /* chunk size: about TK_POOL_CHUNKS chunks per thread; a multiple of 4 items from 8 up
     * and of 12 from 24 up (the AVX2 mat-vec takes rows 4 at a time, the mat-mat tiles 3),
     * so that few rows fall to the one-row remainder loops; at most TK_POOL_MAX_CHUNKS */
    int64_t chunk = (n + (int64_t) pool->n * TK_POOL_CHUNKS - 1) / ((int64_t) pool->n * TK_POOL_CHUNKS);
    if (chunk >= 24) chunk = (chunk + 11) / 12 * 12;
    else if (chunk >= 8) chunk = (chunk + 3) & ~(int64_t) 3;
    if ((n + chunk - 1) / chunk > TK_POOL_MAX_CHUNKS) chunk = (n + TK_POOL_MAX_CHUNKS - 1) / TK_POOL_MAX_CHUNKS;
    const int64_t n_chunks = (n + chunk - 1) / chunk;
    /* every chunk of the previous job is done (we waited for it): no worker reads these now */
    pool->fn = fn;
    pool->arg = arg;
    pool->total = n;
    pool->chunk = chunk;
    __atomic_store_n(&pool->done, 0, __ATOMIC_RELAXED);
    const uint32_t gen = ++pool->gen;
    __atomic_store_n(&pool->ticket, ((uint64_t) gen << 32) | ((uint64_t) n_chunks << 16), __ATOMIC_SEQ_CST);
    /* a worker about to sleep either sees the new ticket or is counted in sleepers
     * (both sides seq_cst), so no wake-up is lost */
    if (__atomic_load_n(&pool->sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->go);
        pthread_mutex_unlock(&pool->mu);
    }
    run_chunks(pool, gen, 0);
    for (int i = 0; __atomic_load_n(&pool->done, __ATOMIC_ACQUIRE) < n_chunks; i++) {
        if (i < TK_POOL_WAIT_SPINS) cpu_relax();
        else sched_yield();
    }
}
