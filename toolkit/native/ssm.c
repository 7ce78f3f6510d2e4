/* ssm.c: the recurrent kernels: causal depthwise conv with carried state, selective scans.
 *
 * All three update their state in place (no per-token state copies).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

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

/* ==== Mamba-2 over a run of tokens: recurrence or chunked SSD, threads over heads ==== */
/* Contract (n_tok consecutive tokens of ONE sequence):
 *   s:   [n_head, head_dim, d_state] state, updated in place
 *   xBC: token t at xBC + t*xbc_stride: x [n_head*head_dim], then B [n_group, d_state],
 *        then C [n_group, d_state] (the conv output after SiLU)
 *   dt:  token t at dt + t*dt_stride: [n_head], after softplus;  A, D: [n_head]
 *   y:   token t at y + t*y_stride: [n_head*head_dim]
 * Same result as n_tok calls of tk_ssm_scan_mamba2 (bit for bit when n_tok < the SSD
 * threshold; to float rounding otherwise).
 *
 * SSD, chunk [t0, t0+L) of head h (group g), a_k = dt_k*A_h, cum_i = sum_{k<=i} a_k
 * (double), s0 the state entering the chunk:
 *   y_i[p]   = sum_{j<=i} exp(cum_i - cum_j) dt_j (C_i.B_j) x_j[p]       (intra-chunk)
 *            + exp(cum_i) sum_n C_i[n] s0[p][n] + D_h x_i[p]            (carried state)
 *   s[p][n] <- exp(cum_L) s0[p][n] + sum_j exp(cum_L - cum_j) dt_j x_j[p] B_j[n]
 * which is the recurrence unrolled over the chunk.  ref: Dao & Gu, "Transformers are SSMs"
 * (2024), sec. 6 (the chunked SSD algorithm); transformers Mamba2Mixer.torch_forward
 * (segment_sum / chunked path).  The C_i.B_j products of a group are shared by its heads. */
#define TK_SSD_CHUNK 64
/* Runs from this length take SSD.  Measured crossover (bench/run.py --ssd, Bamba-430m
 * shapes H=32 P=64 N=128, 1 thread), with the AVX2 recurrence and the two-pass SSD:
 * SSD/recurrence speed-up 0.24x at 2 tokens, 0.53x at 8, 0.91x at 16, 1.20x at 32,
 * 1.5-2.2x from 64 on (us/token/layer: recurrence 40-70, SSD 28-34 from 64 tokens).
 * So the default is 32: shorter ubatches take the recurrence, the path generation takes
 * (a short prompt split into single-token ubatches then gives the same bits). */
#define TK_SSD_MIN_DEFAULT 32

static int g_ssd_min = -1;     /* run length from which SSD is used; -1: not read yet */

int tk_ssd_threshold(void) {
    int v = __atomic_load_n(&g_ssd_min, __ATOMIC_RELAXED);
    if (v < 0) {
        const char * e = getenv("TOOLKIT_SSD_MIN");
        v = TK_SSD_MIN_DEFAULT;
        if (e && *e) {
            char * end;
            long l = strtol(e, &end, 10);
            if (*end == '\0' && l >= 0) v = l > INT32_MAX ? INT32_MAX : (int) l;
        }
        __atomic_store_n(&g_ssd_min, v, __ATOMIC_RELAXED);
    }
    return v;
}

int tk_ssd_set_threshold(int n) {
    if (n < 0) { __atomic_store_n(&g_ssd_min, -1, __ATOMIC_RELAXED); return tk_ssd_threshold(); }
    __atomic_store_n(&g_ssd_min, n, __ATOMIC_RELAXED);
    return n;
}

typedef struct {
    float * s;
    const float * xBC, * dt, * A, * D;
    int64_t xbc_stride, dt_stride, y_stride;
    int32_t n_tok, H, P, N, G, DI;
    int use_ssd;
    float * y;
    float * ws;                /* SSD workspace, ws_stride floats per thread */
    size_t ws_stride;
    float * pre;               /* SSD, per chunk and group: CB [LC][LC], C [LC][N], B^T [N][LC] */
    size_t pre_stride;         /* floats per (chunk, group) */
    int32_t n_chunk;
    int level;                 /* tk_cpu_level() */
} m2_job;

static void m2_recurrence(const m2_job * j, int32_t h) {
    const int32_t P = j->P, N = j->N, g = h / (j->H / j->G);
    float * sh = j->s + (int64_t) h * P * N;
    for (int32_t t = 0; t < j->n_tok; t++) {
        const float * xt = j->xBC + t * j->xbc_stride;
        const float dth = j->dt[t * j->dt_stride + h];
        m2_head_step(j->level, sh, xt + (int64_t) h * P, dth, expf(dth * j->A[h]), xt + j->DI + (int64_t) g * N,
                     xt + j->DI + (int64_t) j->G * N + (int64_t) g * N, j->D[h], P, N, j->y + t * j->y_stride + (int64_t) h * P);
    }
}

static inline float dot8(const float * a, const float * b, int32_t n) {
    float acc[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* out[0:P] += sum_j c[j] * M[j*ldm + 0:P], j in [0, J): P a multiple of 8, at most 64;
 * the P outputs stay in registers across j (one broadcast, P/8 loads and FMAs per j). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static void acc_rows_avx2(float * out, const float * c,
                                                                                      const float * M, int64_t ldm,
                                                                                      int32_t J, int32_t P) {
    __m256 a[8];
    const int32_t V = P / 8;
    for (int v = 0; v < 8; v++) a[v] = v < V ? _mm256_loadu_ps(out + 8 * v) : _mm256_setzero_ps();
    for (int32_t j = 0; j < J; j++) {
        const __m256 cj = _mm256_set1_ps(c[j]);
        const float * m = M + (int64_t) j * ldm;
        if (V == 8) {
            for (int v = 0; v < 8; v++) a[v] = _mm256_fmadd_ps(cj, _mm256_loadu_ps(m + 8 * v), a[v]);
        } else {
            for (int v = 0; v < V; v++) a[v] = _mm256_fmadd_ps(cj, _mm256_loadu_ps(m + 8 * v), a[v]);
        }
    }
    for (int v = 0; v < V; v++) _mm256_storeu_ps(out + 8 * v, a[v]);
}

/* acc_rows_avx2 for 4 outputs at once: out[r][0:P] += sum_j c[r][j] * M[j*ldm + 0:P],
 * r < 4, P a multiple of 16; 16 columns at a time, so that each load of M feeds 4 FMAs
 * (the 1-row kernel loads all of M for every output row: for the SSD's carried-state term
 * that is N*P floats, 32 KiB, per token, from L2).  Each output gets the same FMA chain
 * over j as from acc_rows_avx2, so the two are interchangeable bit for bit. */
__attribute__((target("avx2,fma"))) static void acc_rows4_avx2(float * const out[4], const float * const c[4],
                                                               const float * M, int64_t ldm, int32_t J, int32_t P) {
    for (int32_t p0 = 0; p0 < P; p0 += 16) {
        __m256 a[4][2];
        for (int r = 0; r < 4; r++) {
            a[r][0] = _mm256_loadu_ps(out[r] + p0);
            a[r][1] = _mm256_loadu_ps(out[r] + p0 + 8);
        }
        for (int32_t j = 0; j < J; j++) {
            const float * m = M + (int64_t) j * ldm + p0;
            const __m256 m0 = _mm256_loadu_ps(m), m1 = _mm256_loadu_ps(m + 8);
            for (int r = 0; r < 4; r++) {
                const __m256 cj = _mm256_broadcast_ss(c[r] + j);
                a[r][0] = _mm256_fmadd_ps(cj, m0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(cj, m1, a[r][1]);
            }
        }
        for (int r = 0; r < 4; r++) {
            _mm256_storeu_ps(out[r] + p0, a[r][0]);
            _mm256_storeu_ps(out[r] + p0 + 8, a[r][1]);
        }
    }
}
#endif

/* Per-thread workspace of the SSD path, in floats (cum, da are doubles, counted twice). */
static size_t ssd_ws_floats(int32_t P, int32_t N) {
    const size_t L = TK_SSD_CHUNK;
    return 2 * L * (size_t) P + (size_t) N * P + 6 * L + 16 + L + 5 * (size_t) N;
}

/* What every head of a group reads in a chunk, in floats: C_i . B_k, C, B transposed. */
static size_t ssd_pre_floats(int32_t N) {
    const size_t L = TK_SSD_CHUNK;
    return L * L + 2 * L * (size_t) N;
}

/* Pass 1 of SSD, items = (chunk, group) pairs: copy the chunk's C rows out of the strided
 * activations (a token's row is conv_dim floats apart, which aliases in L1), B transposed
 * (zero past the chunk's end), and the products CB[i][k] = C_i . B_k (k <= i; the SIMD
 * instance computes whole rows of 8-aligned length, as acc_rows_avx2 over B^T). */
static inline __attribute__((always_inline)) void ssd_prep_body(const m2_job * j, int64_t i0, int64_t i1, int simd) {
    const int32_t N = j->N, G = j->G, DI = j->DI, LC = TK_SSD_CHUNK;
#if defined(__x86_64__) && defined(__GNUC__)
    simd = simd && N % 8 == 0;
#else
    (void) simd;
#endif
    for (int64_t it = i0; it < i1; it++) {
        const int32_t c = (int32_t) (it / G), g = (int32_t) (it % G), t0 = c * LC;
        const int32_t L = j->n_tok - t0 < LC ? j->n_tok - t0 : LC;
        float * CB = j->pre + (size_t) it * j->pre_stride, * Cc = CB + LC * LC, * BT = Cc + (size_t) LC * N;
        for (int32_t i = 0; i < L; i++) {
            const float * r = j->xBC + (t0 + i) * j->xbc_stride + DI;
            memcpy(Cc + (size_t) i * N, r + (int64_t) G * N + (int64_t) g * N, (size_t) N * sizeof(float));
            for (int32_t n = 0; n < N; n++) BT[(size_t) n * LC + i] = r[(int64_t) g * N + n];
        }
        for (int32_t n = 0; n < N; n++)
            for (int32_t i = L; i < LC; i++) BT[(size_t) n * LC + i] = 0.0f;
#if defined(__x86_64__) && defined(__GNUC__)
        if (simd) {
            const int32_t L8 = (L + 7) & ~7;
            for (int32_t i = 0; i < L; i++) {
                memset(CB + i * LC, 0, (size_t) L8 * sizeof(float));
                acc_rows_avx2(CB + i * LC, Cc + (size_t) i * N, BT, LC, N, L8);
            }
            continue;
        }
#endif
        for (int32_t i = 0; i < L; i++)
            for (int32_t k = 0; k <= i; k++)
                CB[i * LC + k] = dot8(Cc + (size_t) i * N, j->xBC + (t0 + k) * j->xbc_stride + DI + (int64_t) g * N, N);
    }
}

/* Pass 2 of SSD: heads [h0, h1) over the whole run, chunk after chunk; the head's state
 * is held transposed (sT [N][P]) from the first chunk to the last.  Every inner loop is an
 * axpy over P contiguous floats (vectorizable without reassociation).  Inlined into a
 * plain and an AVX2+FMA instance below. */
static inline __attribute__((always_inline)) void ssd_heads_body(const m2_job * j, int64_t h0, int64_t h1, float * ws,
                                                                 int simd) {
    const int32_t P = j->P, N = j->N, G = j->G, hpg = j->H / j->G;
    const int32_t LC = TK_SSD_CHUNK;
    float * xh = ws, * xw = xh + (size_t) LC * P, * sT = xw + (size_t) LC * P;
    float * dth = sT + (size_t) N * P, * wk = dth + LC;
    double * cum = (double *) (void *) (wk + LC + ((uintptr_t) (wk + LC) % 8 ? 1 : 0)), * da = cum + LC;
    float * coef = (float *) (void *) (da + LC);   /* [max(LC, N)] coefficients of one accumulate */
#if defined(__x86_64__) && defined(__GNUC__)
    float * coef4 = coef + (LC > N ? LC : N);       /* [4][N]: carried-state coefficients of 4 tokens */
#else
    (void) coef;
#endif
#if defined(__x86_64__) && defined(__GNUC__)
    simd = simd && P % 8 == 0 && P <= 64;
#else
    (void) simd;
#endif
    for (int64_t hh = h0; hh < h1; hh++) {
        const int32_t h = (int32_t) hh, g = h / hpg;
        const float Ah = j->A[h], Dh = j->D[h];
        float * sh = j->s + (int64_t) h * P * N;
        for (int32_t p = 0; p < P; p++)
            for (int32_t n = 0; n < N; n++) sT[(size_t) n * P + p] = sh[(size_t) p * N + n];
        for (int32_t c = 0; c < j->n_chunk; c++) {
            const int32_t t0 = c * LC, L = j->n_tok - t0 < LC ? j->n_tok - t0 : LC;
            const float * CB = j->pre + ((size_t) c * G + g) * j->pre_stride, * Cc = CB + LC * LC;
            const float * BT = Cc + (size_t) LC * N;
            double cs = 0.0;
            for (int32_t i = 0; i < L; i++) {
                dth[i] = j->dt[(t0 + i) * j->dt_stride + h];
                const double a = (double) (dth[i] * Ah);
                cs += a;
                cum[i] = cs;
                da[i] = exp(a);
                memcpy(xh + (size_t) i * P, j->xBC + (t0 + i) * j->xbc_stride + (int64_t) h * P, (size_t) P * sizeof(float));
            }
            /* outputs: D x + carried state + intra-chunk */
#if defined(__x86_64__) && defined(__GNUC__)
            if (simd && P % 16 == 0) {   /* D x and the carried state of 4 tokens at a time */
                int32_t i = 0;
                for (; i + 4 <= L; i += 4) {
                    float * yr[4];
                    const float * cr[4];
                    for (int r = 0; r < 4; r++) {
                        yr[r] = j->y + (t0 + i + r) * j->y_stride + (int64_t) h * P;
                        const float * xi = xh + (size_t) (i + r) * P;
                        for (int32_t p = 0; p < P; p++) yr[r][p] = Dh * xi[p];
                        const float dec = (float) exp(cum[i + r]);
                        float * cf = coef4 + (size_t) r * N;
                        for (int32_t n = 0; n < N; n++) cf[n] = dec * Cc[(size_t) (i + r) * N + n];
                        cr[r] = cf;
                    }
                    acc_rows4_avx2(yr, cr, sT, P, N, P);
                }
                for (; i < L; i++) {
                    float * yi = j->y + (t0 + i) * j->y_stride + (int64_t) h * P;
                    const float * xi = xh + (size_t) i * P;
                    for (int32_t p = 0; p < P; p++) yi[p] = Dh * xi[p];
                    const float dec = (float) exp(cum[i]);
                    for (int32_t n = 0; n < N; n++) coef[n] = dec * Cc[(size_t) i * N + n];
                    acc_rows_avx2(yi, coef, sT, P, N, P);
                }
            }
#endif
            for (int32_t i = 0; i < L; i++) {
                float * yi = j->y + (t0 + i) * j->y_stride + (int64_t) h * P;
#if defined(__x86_64__) && defined(__GNUC__)
                if (simd) {      /* the same products, accumulated in registers */
                    if (P % 16 != 0) {
                        const float * xi = xh + (size_t) i * P;
                        for (int32_t p = 0; p < P; p++) yi[p] = Dh * xi[p];
                        const float dec = (float) exp(cum[i]);
                        for (int32_t n = 0; n < N; n++) coef[n] = dec * Cc[(size_t) i * N + n];
                        acc_rows_avx2(yi, coef, sT, P, N, P);
                    }
                    double e = 1.0;
                    for (int32_t k = i; k >= 0; k--) {
                        if (k < i) e *= da[k + 1];
                        coef[k] = (float) e * dth[k] * CB[i * LC + k];
                    }
                    acc_rows_avx2(yi, coef, xh, P, i + 1, P);
                    continue;
                }
#endif
                const float * xi = xh + (size_t) i * P;
                for (int32_t p = 0; p < P; p++) yi[p] = Dh * xi[p];
                const float dec = (float) exp(cum[i]);
                for (int32_t n = 0; n < N; n++) {
                    const float cn = dec * Cc[(size_t) i * N + n];
                    const float * sn = sT + (size_t) n * P;
                    for (int32_t p = 0; p < P; p++) yi[p] += cn * sn[p];
                }
                /* e = exp(cum_i - cum_k) for k = i, i-1, ...: one multiply per step by
                 * da[k+1] = exp(a_{k+1}) (double; underflows to 0 gracefully as a <= 0) */
                double e = 1.0;
                for (int32_t k = i; k >= 0; k--) {
                    if (k < i) e *= da[k + 1];
                    const float m = (float) e * dth[k] * CB[i * LC + k];
                    const float * xk = xh + (size_t) k * P;
                    for (int32_t p = 0; p < P; p++) yi[p] += m * xk[p];
                }
            }
            /* state at the end of the chunk */
            const float dec_all = (float) exp(cum[L - 1]);
            for (int32_t k = 0; k < L; k++) {
                wk[k] = (float) exp(cum[L - 1] - cum[k]) * dth[k];
                for (int32_t p = 0; p < P; p++) xw[(size_t) k * P + p] = wk[k] * xh[(size_t) k * P + p];
            }
            for (int32_t n = 0; n < N; n++) {
                float * sn = sT + (size_t) n * P;
                const float * bn = BT + (size_t) n * LC;
                for (int32_t p = 0; p < P; p++) sn[p] *= dec_all;
#if defined(__x86_64__) && defined(__GNUC__)
                if (simd) {
                    acc_rows_avx2(sn, bn, xw, P, L, P);
                    continue;
                }
#endif
                for (int32_t k = 0; k < L; k++) {
                    const float b = bn[k];
                    const float * xk = xw + (size_t) k * P;
                    for (int32_t p = 0; p < P; p++) sn[p] += b * xk[p];
                }
            }
        }
        for (int32_t p = 0; p < P; p++)
            for (int32_t n = 0; n < N; n++) sh[(size_t) p * N + n] = sT[(size_t) n * P + p];
    }
}

static void ssd_prep_plain(const m2_job * j, int64_t i0, int64_t i1) { ssd_prep_body(j, i0, i1, 0); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma")))
static void ssd_prep_avx2(const m2_job * j, int64_t i0, int64_t i1) { ssd_prep_body(j, i0, i1, 1); }
#endif

static void m2_prep(void * arg, int64_t i0, int64_t i1, int thread) {
    const m2_job * j = arg;
    (void) thread;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->level >= TK_CPU_AVX2) { ssd_prep_avx2(j, i0, i1); return; }
#endif
    ssd_prep_plain(j, i0, i1);
}

static void ssd_heads_plain(const m2_job * j, int64_t h0, int64_t h1, float * ws) { ssd_heads_body(j, h0, h1, ws, 0); }
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma")))
static void ssd_heads_avx2(const m2_job * j, int64_t h0, int64_t h1, float * ws) { ssd_heads_body(j, h0, h1, ws, 1); }
#endif

static void m2_heads(void * arg, int64_t h0, int64_t h1, int thread) {
    const m2_job * j = arg;
    if (!j->use_ssd) {
        for (int64_t h = h0; h < h1; h++) m2_recurrence(j, (int32_t) h);
        return;
    }
    float * ws = j->ws + (size_t) thread * j->ws_stride;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->level >= TK_CPU_AVX2) { ssd_heads_avx2(j, h0, h1, ws); return; }
#endif
    ssd_heads_plain(j, h0, h1, ws);
}

void tk_ssm_mamba2_run(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                       int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                       int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride) {
    if (n_tok <= 0) return;
    const int thr = tk_ssd_threshold();
    m2_job j = {s, xBC, dt, A, D, xbc_stride, dt_stride, y_stride, n_tok, n_head, head_dim, d_state, n_group,
                n_head * head_dim, thr > 0 && n_tok >= thr, y, NULL, 0, NULL, 0, 0, tk_cpu_level()};
    /* one token of a small model: not worth waking the workers */
    if ((int64_t) n_tok * n_head * head_dim * d_state < 32768) pool = NULL;
    if (j.use_ssd) {
        j.n_chunk = (n_tok + TK_SSD_CHUNK - 1) / TK_SSD_CHUNK;
        j.ws_stride = ssd_ws_floats(head_dim, d_state);
        j.pre_stride = ssd_pre_floats(d_state);
        j.ws = malloc(j.ws_stride * sizeof(float) * (size_t) tk_pool_size(pool));
        j.pre = malloc(j.pre_stride * sizeof(float) * (size_t) j.n_chunk * (size_t) n_group);
        if (!j.ws || !j.pre) j.use_ssd = 0;   /* no memory for the workspace: the recurrence needs none */
        else tk_pool_run(pool, (int64_t) j.n_chunk * n_group, m2_prep, &j);
    }
    tk_pool_run(pool, n_head, m2_heads, &j);
    free(j.ws);
    free(j.pre);
}

tk_status tk_ssm_mamba2_seq(float * s, const float * xBC, int64_t xbc_stride, const float * dt, int64_t dt_stride,
                            const float * A, const float * D, int32_t n_tok, int32_t n_head, int32_t head_dim,
                            int32_t d_state, int32_t n_group, float * y, int64_t y_stride, int n_threads) {
    if (!s || !xBC || !dt || !A || !D || !y || n_tok < 0 || n_head <= 0 || head_dim <= 0 || d_state <= 0 ||
        n_group <= 0 || n_head % n_group)
        return TK_FAIL(TK_ERR_INVALID, "tk_ssm_mamba2_seq: bad arguments");
    tk_pool * pool = NULL;
    if (n_threads > 1) TK_CHECK(tk_pool_new(n_threads, &pool));
    tk_ssm_mamba2_run(pool, s, xBC, xbc_stride, dt, dt_stride, A, D, n_tok, n_head, head_dim, d_state, n_group, y, y_stride);
    tk_pool_free(pool);
    return TK_OK;
}
