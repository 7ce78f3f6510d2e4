/* threads.c: a small persistent pthread pool for data-parallel loops (tk_pool).
 *
 * tk_pool_run(pool, n, fn, arg) splits [0, n) into one contiguous chunk per thread
 * (static partition: chunk t = [n*t/T, n*(t+1)/T)); the calling thread runs chunk 0 and
 * waits for the others.  Each output element is computed by exactly one thread with the
 * same loop as the serial path, so results do not depend on the thread count.
 */
#include <pthread.h>
#include <stdlib.h>

#include "tk_internal.h"

struct tk_pool {
    int n;                     /* threads including the caller */
    pthread_t * tid;           /* [n-1] workers */
    pthread_mutex_t mu;
    pthread_cond_t go;         /* workers wait for a new generation */
    pthread_cond_t done;       /* caller waits for pending == 0 */
    uint64_t generation;
    int pending;
    int stop;
    /* current job */
    tk_task_fn fn;
    void * arg;
    int64_t total;
};

typedef struct { tk_pool * pool; int index; } worker_arg;

/* Bounded spin before sleeping (workers waiting for a job, the caller waiting for them):
 * ~2000 pause instructions, tens of microseconds. Shared variables are read with atomics
 * while spinning and written with atomics under the mutex, so the spin is only a hint. */
#define TK_POOL_SPIN 2000
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void chunk(int64_t n, int T, int t, int64_t * i0, int64_t * i1) {
    *i0 = n * t / T;
    *i1 = n * (t + 1) / T;
}

static void * worker(void * p) {
    worker_arg * wa = p;
    tk_pool * pool = wa->pool;
    const int index = wa->index;
    free(wa);
    uint64_t seen = 0;
    for (;;) {
        /* spin a little first: a decode issues a job every few tens of microseconds, and a
         * condition-variable wake-up costs about that much; then sleep */
        for (int i = 0; i < TK_POOL_SPIN; i++) {
            if (__atomic_load_n(&pool->generation, __ATOMIC_ACQUIRE) != seen || __atomic_load_n(&pool->stop, __ATOMIC_ACQUIRE)) break;
            cpu_relax();
        }
        pthread_mutex_lock(&pool->mu);
        while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->go, &pool->mu);
        if (pool->stop) { pthread_mutex_unlock(&pool->mu); return NULL; }
        seen = pool->generation;
        tk_task_fn fn = pool->fn;
        void * arg = pool->arg;
        const int64_t total = pool->total;
        pthread_mutex_unlock(&pool->mu);

        int64_t i0, i1;
        chunk(total, pool->n, index, &i0, &i1);
        if (i1 > i0) fn(arg, i0, i1, index);

        pthread_mutex_lock(&pool->mu);
        if (__atomic_sub_fetch(&pool->pending, 1, __ATOMIC_ACQ_REL) == 0) pthread_cond_signal(&pool->done);
        pthread_mutex_unlock(&pool->mu);
    }
}

tk_status tk_pool_new(int n_threads, tk_pool ** out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256;
    tk_pool * pool = calloc(1, sizeof *pool);
    if (!pool) return TK_FAIL(TK_ERR_NOMEM, "out of memory");
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->go, NULL);
    pthread_cond_init(&pool->done, NULL);
    if (n_threads > 1) {
        pool->tid = calloc((size_t) n_threads - 1, sizeof(pthread_t));
        if (!pool->tid) { tk_pool_free(pool); return TK_FAIL(TK_ERR_NOMEM, "out of memory"); }
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
        __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&pool->go);
        pthread_mutex_unlock(&pool->mu);
        for (int i = 1; i < pool->n; i++) pthread_join(pool->tid[i - 1], NULL);
        free(pool->tid);
    }
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->go);
    pthread_cond_destroy(&pool->done);
    free(pool);
}

int tk_pool_size(const tk_pool * pool) { return pool ? pool->n : 1; }

void tk_pool_run(tk_pool * pool, int64_t n, tk_task_fn fn, void * arg) {
    if (n <= 0) return;
    if (!pool || pool->n == 1 || n == 1) {
        fn(arg, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->total = n;
    __atomic_store_n(&pool->pending, pool->n - 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&pool->go);
    pthread_mutex_unlock(&pool->mu);

    int64_t i0, i1;
    chunk(n, pool->n, 0, &i0, &i1);
    if (i1 > i0) fn(arg, i0, i1, 0);

    for (int i = 0; i < TK_POOL_SPIN && __atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) > 0; i++) cpu_relax();
    pthread_mutex_lock(&pool->mu);
    while (__atomic_load_n(&pool->pending, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
