/* ssm.c: the recurrent kernels: causal depthwise conv with carried state, selective scans
 * (Mamba-1; Mamba-2 one token, and over a run: the recurrence here, the chunked SSD in ssd.c).
 *
 * All update their state in place (no per-token state copies, but for the speculative window's
 * snapshots: tk_ssm_mamba2_run_snap).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"
#include "kernels/kernels.h"

/* ==== ssm_conv: causal depthwise conv1d with carried state ========================== */
/* Contract:
 *   x:     [n_tok, channels] (row stride x_stride floats), the tokens of ONE sequence
 *   w:     [channels, d_conv]  (ggml ssm_conv1d.weight [d_conv, channels])
 *   b:     [channels] or NULL  (conv bias)
 *   state: [channels, d_conv-1] the last d_conv-1 inputs, oldest first; updated in place
 *   y:     [n_tok, channels] (row stride y_stride) = conv + bias (no activation)
 *   y[t][c] = b[c] + sum_{k<d_conv} w[c][k] * win_t[c][k],  win_t = (state, x[0..t]) last d_conv
 * ref: ggml ggml_compute_forward_ssm_conv_f32; transformers MambaMixer.slow_forward
 *      (conv1d(..., padding=d_conv-1)[..., :L]). */
typedef float v8f __attribute__((vector_size(32)));   /* 8 float lanes (GCC vector extension) */

/* d_conv == 4, channels [0, channels) in blocks of 8 lanes (channel c in lane c % 8; a last
 * partial block padded with zeros), tokens in order with the window in registers.  Per
 * channel the operations are the scalar loop's: s = w0 in0, s += w1 in1, w2 in2, w3 in3,
 * then + b (fused multiply-adds in the AVX2+FMA instance). */
static inline __attribute__((always_inline)) void conv4_body(const float * x, int64_t x_stride, int32_t n_tok,
                                                             int32_t channels, const float * w, const float * b,
                                                             float * state, float * y, int64_t y_stride) {
    for (int32_t c0 = 0; c0 < channels; c0 += 8) {
        const int32_t nc = channels - c0 < 8 ? channels - c0 : 8;
        v8f w0 = {0}, w1 = {0}, w2 = {0}, w3 = {0}, bb = {0}, s0 = {0}, s1 = {0}, s2 = {0};
        for (int32_t j = 0; j < nc; j++) {
            const float * wc = w + (int64_t) (c0 + j) * 4, * st = state + (int64_t) (c0 + j) * 3;
            w0[j] = wc[0]; w1[j] = wc[1]; w2[j] = wc[2]; w3[j] = wc[3];
            s0[j] = st[0]; s1[j] = st[1]; s2[j] = st[2];
            if (b) bb[j] = b[c0 + j];
        }
        for (int32_t t = 0; t < n_tok; t++) {
            v8f in = {0};
            const float * xt = x + t * x_stride + c0;
            if (nc == 8) memcpy(&in, xt, sizeof in);
            else for (int32_t j = 0; j < nc; j++) in[j] = xt[j];
            v8f acc = w0 * s0;
            acc += w1 * s1;
            acc += w2 * s2;
            acc += w3 * in;
            if (b) acc += bb;
            float * yt = y + t * y_stride + c0;
            if (nc == 8) memcpy(yt, &acc, sizeof acc);
            else for (int32_t j = 0; j < nc; j++) yt[j] = acc[j];
            s0 = s1; s1 = s2; s2 = in;
        }
        for (int32_t j = 0; j < nc; j++) {
            float * st = state + (int64_t) (c0 + j) * 3;
            st[0] = s0[j]; st[1] = s1[j]; st[2] = s2[j];
        }
    }
}

static void conv4_plain(const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, const float * w,
                        const float * b, float * state, float * y, int64_t y_stride) {
    conv4_body(x, x_stride, n_tok, channels, w, b, state, y, y_stride);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma")))
static void conv4_avx2(const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, const float * w,
                       const float * b, float * state, float * y, int64_t y_stride) {
    conv4_body(x, x_stride, n_tok, channels, w, b, state, y, y_stride);
}
#endif

/* Channel c's result depends only on c % 8 (its lane) and the level: callers that split the
 * channels (forward.c, over threads) cut at multiples of 8. */
void tk_ssm_conv(const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, int32_t d_conv,
                 const float * w, const float * b, float * state, float * y, int64_t y_stride) {
    if (d_conv == 4) {
#if defined(__x86_64__) && defined(__GNUC__)
        if (tk_cpu_level() >= TK_CPU_AVX2) { conv4_avx2(x, x_stride, n_tok, channels, w, b, state, y, y_stride); return; }
#endif
        conv4_plain(x, x_stride, n_tok, channels, w, b, state, y, y_stride);
        return;
    }
    const int32_t ns = d_conv - 1;
    float win[64];             /* d_conv <= 64 checked at load */
    for (int32_t c = 0; c < channels; c++) {
        float * st = state + (int64_t) c * ns;
        const float * wc = w + (int64_t) c * d_conv;
        for (int32_t k = 0; k < ns; k++) win[k] = st[k];
        for (int32_t t = 0; t < n_tok; t++) {
            win[ns] = x[t * x_stride + c];
            float s = 0.0f;
            for (int32_t k = 0; k < d_conv; k++) s += wc[k] * win[k];
            y[t * y_stride + c] = b ? s + b[c] : s;
            for (int32_t k = 0; k < ns; k++) win[k] = win[k + 1];
        }
        for (int32_t k = 0; k < ns; k++) st[k] = win[k];
    }
}

/* ==== ssm_scan, Mamba-1: per-channel A ============================================== */
/* Contract (one token):
 *   s:  [d_inner, d_state] state, updated in place
 *   x:  [d_inner] conv output after SiLU;  dt: [d_inner] after softplus
 *   A:  [d_inner, d_state] (= -exp(A_log));  B, C: [d_state];  D: [d_inner]
 *   z:  [d_inner] gate (NULL: no gate);  y: [d_inner]
 *   s[c][n] = exp(dt[c] * A[c][n]) * s[c][n] + dt[c] * B[n] * x[c]
 *   y[c]    = (sum_n s[c][n] * C[n] + D[c] * x[c]) * silu(z[c])
 * ref: transformers MambaMixer.slow_forward; ggml_compute_forward_ssm_scan_f32. */
void tk_ssm_scan_mamba1(float * s, const float * x, const float * dt, const float * A, const float * B,
                        const float * C, const float * D, const float * z, int32_t d_inner, int32_t d_state,
                        float * y) {
    for (int32_t c = 0; c < d_inner; c++) {
        float * sc = s + (int64_t) c * d_state;
        const float * Ac = A + (int64_t) c * d_state;
        const float dtc = dt[c], dtx = dt[c] * x[c];
        float acc = 0.0f;
        for (int32_t n = 0; n < d_state; n++) {
            const float v = sc[n] * expf(dtc * Ac[n]) + B[n] * dtx;
            sc[n] = v;
            acc += v * C[n];
        }
        acc += D[c] * x[c];
        y[c] = z ? acc * tk_silu(z[c]) : acc;
    }
}

/* ==== ssm_scan, Mamba-2: scalar A per head, B/C shared per group ===================== */
/* Contract (one token):
 *   s:  [n_head, head_dim, d_state] state, updated in place
 *   x:  [n_head, head_dim];  dt: [n_head] after softplus;  A, D: [n_head] (A = -exp(A_log))
 *   B, C: [n_group, d_state]; head h uses group h / (n_head / n_group)
 *   y:  [n_head, head_dim]  (no gate: the gated RMSNorm follows)
 *   s[h][p][n] = exp(dt[h] * A[h]) * s[h][p][n] + dt[h] * B[g][n] * x[h][p]
 *   y[h][p]    = sum_n s[h][p][n] * C[g][n] + D[h] * x[h][p]
 * ref: transformers Mamba2Mixer.torch_forward (cache path); ggml ssm_scan (Mamba-2 branch). */
/* One head, one token: sh [P, N] state, xh [P], Bg/Cg [N], yh [P].  The C.s sum keeps 8
 * partial sums (n mod 8), added in a fixed tree, then the N mod 8 tail in order: the loop
 * vectorizes (with a plain and an AVX2+FMA instance, chosen by level) and every caller
 * -- the one-token kernel and the run recurrence -- gets the same bits at a level. */
static inline __attribute__((always_inline)) void m2_head_step_body(float * sh, const float * xh, float dth, float dA,
                                                                    const float * Bg, const float * Cg, float Dh,
                                                                    int32_t P, int32_t N, float * yh) {
    for (int32_t p = 0; p < P; p++) {
        float * sp = sh + (int64_t) p * N;
        const float dtx = dth * xh[p];
        float acc[8] = {0};
        int32_t n = 0;
        for (; n + 8 <= N; n += 8)
            for (int k = 0; k < 8; k++) {
                const float v = sp[n + k] * dA + Bg[n + k] * dtx;
                sp[n + k] = v;
                acc[k] += v * Cg[n + k];
            }
        float a = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; n < N; n++) {
            const float v = sp[n] * dA + Bg[n] * dtx;
            sp[n] = v;
            a += v * Cg[n];
        }
        yh[p] = a + Dh * xh[p];
    }
}

static void m2_head_step_plain(float * sh, const float * xh, float dth, float dA, const float * Bg, const float * Cg,
                               float Dh, int32_t P, int32_t N, float * yh) {
    m2_head_step_body(sh, xh, dth, dA, Bg, Cg, Dh, P, N, yh);
}
#if defined(__x86_64__) && defined(__GNUC__)
/* The same sums as m2_head_step_body (8 partial sums n mod 8 in one vector, then a fixed
 * tree), written out: gcc's vectorization of the body ran at 6 GB/s of state read + written,
 * this at 29 (one thread, Bamba-430m head shapes, a cold 1 MiB state per call).  Each state
 * row asks for the bytes TK_M2_PF_BYTES ahead (the hardware prefetcher stops at 4 KiB
 * pages): 29 -> 33 GB/s.  N % 8 != 0 takes the body. */
#define TK_M2_PF_BYTES 2048
__attribute__((target("avx2,fma")))
static void m2_head_step_avx2(float * sh, const float * xh, float dth, float dA, const float * Bg, const float * Cg,
                              float Dh, int32_t P, int32_t N, float * yh) {
    if (N % 8 != 0) { m2_head_step_body(sh, xh, dth, dA, Bg, Cg, Dh, P, N, yh); return; }
    const __m256 vdA = _mm256_set1_ps(dA);
    for (int32_t p = 0; p < P; p++) {
        float * sp = sh + (int64_t) p * N;
        const __m256 vdtx = _mm256_set1_ps(dth * xh[p]);
        __m256 acc = _mm256_setzero_ps();
        for (int32_t n = 0; n < N; n += 8) {
            if ((n & 15) == 0) _mm_prefetch((const char *) (sp + n) + TK_M2_PF_BYTES, _MM_HINT_T0);
            const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(sp + n), vdA, _mm256_mul_ps(_mm256_loadu_ps(Bg + n), vdtx));
            _mm256_storeu_ps(sp + n, v);
            acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(Cg + n), acc);
        }
        yh[p] = tk_hsum8_avx2(acc) + Dh * xh[p];
    }
}
#endif

static void m2_head_step(int level, float * sh, const float * xh, float dth, float dA, const float * Bg,
                         const float * Cg, float Dh, int32_t P, int32_t N, float * yh) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (level >= TK_CPU_AVX2) { m2_head_step_avx2(sh, xh, dth, dA, Bg, Cg, Dh, P, N, yh); return; }
#endif
    (void) level;
    m2_head_step_plain(sh, xh, dth, dA, Bg, Cg, Dh, P, N, yh);
}

void tk_ssm_scan_mamba2(float * s, const float * x, const float * dt, const float * A, const float * B,
                        const float * C, const float * D, int32_t n_head, int32_t head_dim, int32_t d_state,
                        int32_t n_group, float * y) {
    const int32_t heads_per_group = n_head / n_group;
    const int level = tk_cpu_level();
    for (int32_t h = 0; h < n_head; h++) {
        const int32_t g = h / heads_per_group;
        const int64_t o = (int64_t) h * head_dim;
        m2_head_step(level, s + o * d_state, x + o, dt[h], expf(dt[h] * A[h]), B + (int64_t) g * d_state,
                     C + (int64_t) g * d_state, D[h], head_dim, d_state, y + o);
    }
}

/* ==== Mamba-2 over a run of tokens: recurrence or chunked SSD (ssd.c), threads over heads ==== */
/* Contract (n_tok consecutive tokens of ONE sequence):
 *   s:   [n_head, head_dim, d_state] state, updated in place
 *   xBC: token t at xBC + t*xbc_stride: x [n_head*head_dim], then B [n_group, d_state],
 *        then C [n_group, d_state] (the conv output after SiLU)
 *   dt:  token t at dt + t*dt_stride: [n_head], after softplus;  A, D: [n_head]
 *   y:   token t at y + t*y_stride: [n_head*head_dim]
 *   ws:  ws_bytes of workspace for the SSD path, at least tk_ssd_workspace_bytes(n_tok, ...,
 *        threads of pool) (the recurrence needs none); too small: TK_ERR_INVALID, nothing done
 * Same result as n_tok calls of tk_ssm_scan_mamba2 (bit for bit when n_tok < the SSD
 * threshold, tk_ssd_threshold(); to float rounding otherwise). */
typedef struct {
    TK_M2_RUN_FIELDS
    int level;                 /* tk_cpu_level() */
    float * const * snap;      /* [n_tok] NULL, or per token the whole state's snapshot (or NULL) */
} m2_job;

/* Pool task: heads [h0, h1), each through the whole run token by token. */
static void m2_heads(void * arg, int64_t h0, int64_t h1, int thread) {
    const m2_job * j = arg;
    const int32_t P = j->P, N = j->N;
    (void) thread;
    for (int64_t hh = h0; hh < h1; hh++) {
        const int32_t h = (int32_t) hh, g = h / (j->H / j->G);
        float * sh = j->s + (int64_t) h * P * N;
        for (int32_t t = 0; t < j->n_tok; t++) {
            const float * xt = j->xBC + t * j->xbc_stride;
            const float dth = j->dt[t * j->dt_stride + h];
            m2_head_step(j->level, sh, xt + (int64_t) h * P, dth, expf(dth * j->A[h]), xt + j->DI + (int64_t) g * N,
                         xt + j->DI + (int64_t) j->G * N + (int64_t) g * N, j->D[h], P, N,
                         j->y + t * j->y_stride + (int64_t) h * P);
            if (j->snap && j->snap[t]) memcpy(j->snap[t] + (int64_t) h * P * N, sh, (size_t) P * N * sizeof(float));
        }
    }
}

tk_status tk_ssm_mamba2_run(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                            int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                            int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride, void * ws,
                            size_t ws_bytes, int32_t min_chunk) {
    if (n_tok <= 0) return TK_OK;
    const int thr = tk_chunk_min(min_chunk, tk_ssd_threshold());
    /* one token of a small model: not worth waking the workers */
    if ((int64_t) n_tok * n_head * head_dim * d_state < 32768) pool = NULL;
    if (thr > 0 && n_tok >= thr)
        return tk_ssd_scan(pool, s, xBC, xbc_stride, dt, dt_stride, A, D, n_tok, n_head, head_dim, d_state, n_group, y,
                           y_stride, ws, ws_bytes);
    m2_job j = {s, xBC, dt, A, D, xbc_stride, dt_stride, y_stride, n_tok, n_head, head_dim, d_state, n_group,
                n_head * head_dim, y, tk_cpu_level()};
    tk_pool_run(pool, n_head, m2_heads, &j);
    return TK_OK;
}

/* The recurrence over the run (never the SSD), copying the state after token t into snap[t]
 * when that is not NULL (the speculative window; memory_rs.c).  Same bits as
 * tk_ssm_mamba2_run's recurrence. */
tk_status tk_ssm_mamba2_run_snap(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                                 int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                                 int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride,
                                 float * const * snap) {
    if (n_tok <= 0) return TK_OK;
    if ((int64_t) n_tok * n_head * head_dim * d_state < 32768) pool = NULL;
    m2_job j = {s, xBC, dt, A, D, xbc_stride, dt_stride, y_stride, n_tok, n_head, head_dim, d_state, n_group,
                n_head * head_dim, y, tk_cpu_level(), snap};
    tk_pool_run(pool, n_head, m2_heads, &j);
    return TK_OK;
}

/* Test entry: a pool of n_threads and an SSD workspace for this run, made and freed here. */
tk_status tk_ssm_mamba2_seq(float * s, const float * xBC, int64_t xbc_stride, const float * dt, int64_t dt_stride,
                            const float * A, const float * D, int32_t n_tok, int32_t n_head, int32_t head_dim,
                            int32_t d_state, int32_t n_group, float * y, int64_t y_stride, int n_threads) {
    if (!s || !xBC || !dt || !A || !D || !y || n_tok < 0 || n_head <= 0 || head_dim <= 0 || d_state <= 0 ||
        n_group <= 0 || n_head % n_group)
        return TK_FAIL(TK_ERR_INVALID, "tk_ssm_mamba2_seq: bad arguments");
    tk_pool * pool = NULL;
    if (n_threads > 1) TK_CHECK(tk_pool_new(n_threads, &pool));
    const size_t ws_bytes = tk_ssd_workspace_bytes(n_tok, n_head, head_dim, d_state, n_group, tk_pool_size(pool));
    void * ws = ws_bytes ? malloc(ws_bytes) : NULL;
    tk_status st = ws_bytes && !ws ? TK_FAIL(TK_ERR_NOMEM, "tk_ssm_mamba2_seq: no memory for %zu bytes of SSD workspace", ws_bytes)
                                   : tk_ssm_mamba2_run(pool, s, xBC, xbc_stride, dt, dt_stride, A, D, n_tok, n_head, head_dim,
                                                       d_state, n_group, y, y_stride, ws, ws_bytes, 0);
    free(ws);
    tk_pool_free(pool);
    return st;
}
