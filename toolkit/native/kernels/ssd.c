/* ssd.c: Mamba-2 over a run of tokens in the chunked SSD form ("state space duality"),
 * as four named stages.
 *
 * Contract of the whole (n_tok consecutive tokens of ONE sequence; tk_ssd_scan):
 *   s:   [n_head, head_dim, d_state] state, updated in place
 *   xBC: token t at xBC + t*xbc_stride: x [n_head*head_dim], then B [n_group, d_state],
 *        then C [n_group, d_state] (the conv output after SiLU)
 *   dt:  token t at dt + t*dt_stride: [n_head], after softplus;  A, D: [n_head]
 *   y:   token t at y + t*y_stride: [n_head*head_dim]
 * Same result as n_tok calls of tk_ssm_scan_mamba2, to float rounding.
 *
 * Chunk [t0, t0+L) of head h (group g), a_k = dt_k*A_h, cum_i = sum_{k<=i} a_k (double),
 * s0 the state entering the chunk:
 *   y_i[p]   = sum_{j<=i} exp(cum_i - cum_j) dt_j (C_i.B_j) x_j[p]       (intra-chunk)
 *            + exp(cum_i) sum_n C_i[n] s0[p][n] + D_h x_i[p]            (carried state)
 *   s[p][n] <- exp(cum_L) s0[p][n] + sum_j exp(cum_L - cum_j) dt_j x_j[p] B_j[n]
 * which is the recurrence unrolled over the chunk.  ref: Dao & Gu, "Transformers are SSMs"
 * (2024), sec. 6 (the chunked SSD algorithm); transformers Mamba2Mixer.torch_forward
 * (segment_sum / chunked path); state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py.
 *
 * The stages, named after ssd_combined.py's:
 *   1. ssd_chunk_cumsum    (_chunk_cumsum_fwd)   cum_i, exp(a_i) of one head over a chunk
 *   2. ssd_bmm_chunk       (_bmm_chunk_fwd)      CB[i][k] = C_i.B_k of one group over a chunk
 *   3. ssd_chunk_scan      (_chunk_scan_fwd)     y of a chunk: intra-chunk + carried state + D x
 *   4. ssd_state_passing   (_chunk_state_fwd + _state_passing_fwd) the state across the chunk
 * Stage 2 runs first for every (chunk, group) (the products are shared by the group's
 * heads); then each thread takes whole heads and runs 1, 3, 4 chunk after chunk, the head's
 * state held transposed (sT [N][P]) from the first chunk to the last.
 *
 * Stages 2-4 have a plain reference (*_ref: scalar loops, every inner loop an axpy over
 * contiguous floats, vectorizable without reassociation) and an AVX2+FMA instance
 * (*_avx2), chosen by tk_cpu_level().  A shape the AVX2 kernels don't take runs the
 * reference loops inside the AVX2 instance (inlined there: compiled with FMA contraction),
 * so each level keeps one order of operations.  Stage 1 is scalar at every level.
 *
 * Workspace: allocated by the caller once (tk_ssd_workspace_bytes: tk_context_new for the
 * context's n_ubatch and threads); per thread (ssd_scratch) plus per (chunk, group) (the
 * products of stage 2).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"
#include "kernels/kernels.h"

#define TK_SSD_CHUNK 64
/* Runs from this length take SSD.  Why 32: the recurrence reads and writes the whole state
 * (H P N floats: 1 MiB per layer at Bamba-430m's H=32 P=64 N=128) once per token, SSD once per
 * chunk, at the price of per-chunk work (the C.B products, the chunk's own state) that a
 * short run does not amortize.  Measured (bench/run.py --ssd, those shapes, 1 thread): 0.91x
 * at 16 tokens, 1.20x at 32, 1.5-2.2x from 64 on (bench/README.md, "Kernel thresholds").
 * Shorter ubatches take the recurrence, the path generation takes (a short prompt split
 * into single-token ubatches then gives the same bits). */
#define TK_SSD_MIN_DEFAULT 32

static int g_ssd_min = -1;     /* run length from which SSD is used; -1: the default */

int tk_ssd_threshold(void) { return tk_threshold_get(&g_ssd_min, TK_SSD_MIN_DEFAULT); }

int tk_ssd_set_threshold(int n) { return tk_threshold_set(&g_ssd_min, n, TK_SSD_MIN_DEFAULT); }

/* ==== workspace ====================================================================== */

/* Per-thread scratch of stages 1, 3, 4 (one head, one chunk at a time), carved from
 * ssd_ws_floats(P, N) floats (cum, da are doubles, counted twice). */
typedef struct {
    float * xh;                /* [LC][P] the chunk's x rows of the head */
    float * xw;                /* [LC][P] x_k weighted for the end-of-chunk state (stage 4) */
    float * sT;                /* [N][P] the head's state, transposed */
    float * dth;               /* [LC] dt of the head (stage 1) */
    float * wk;                /* [LC] exp(cum_L - cum_k) dt_k (stage 4) */
    double * cum, * da;        /* [LC] cum_i and exp(a_i) (stage 1) */
    float * coef;              /* [max(LC, N)] coefficients of one accumulate (stage 3) */
    float * coef4;             /* [4][N] carried-state coefficients of 4 tokens (stage 3, AVX2) */
} ssd_scratch;

static size_t ssd_ws_floats(int32_t P, int32_t N) {
    const size_t L = TK_SSD_CHUNK;
    return 2 * L * (size_t) P + (size_t) N * P + 6 * L + 16 + L + 5 * (size_t) N;
}

static ssd_scratch ssd_scratch_at(float * ws, int32_t P, int32_t N) {
    const int32_t LC = TK_SSD_CHUNK;
    ssd_scratch w;
    w.xh = ws;
    w.xw = w.xh + (size_t) LC * P;
    w.sT = w.xw + (size_t) LC * P;
    w.dth = w.sT + (size_t) N * P;
    w.wk = w.dth + LC;
    w.cum = (double *) (void *) (w.wk + LC + ((uintptr_t) (w.wk + LC) % 8 ? 1 : 0));
    w.da = w.cum + LC;
    w.coef = (float *) (void *) (w.da + LC);
    w.coef4 = w.coef + (LC > N ? LC : N);
    return w;
}

/* What every head of a group reads in a chunk, in floats: C_i . B_k, C, B transposed. */
static size_t ssd_pre_floats(int32_t N) {
    const size_t L = TK_SSD_CHUNK;
    return L * L + 2 * L * (size_t) N;
}

size_t tk_ssd_workspace_bytes(int32_t n_tok, int32_t n_head, int32_t head_dim, int32_t d_state, int32_t n_group,
                              int n_threads) {
    if (n_tok <= 0 || n_head <= 0 || head_dim <= 0 || d_state <= 0 || n_group <= 0) return 0;
    const size_t n_chunk = ((size_t) n_tok + TK_SSD_CHUNK - 1) / TK_SSD_CHUNK;
    const size_t nt = n_threads > 1 ? (size_t) n_threads : 1;
    return (nt * ssd_ws_floats(head_dim, d_state) + n_chunk * (size_t) n_group * ssd_pre_floats(d_state)) * sizeof(float);
}

typedef struct {
    TK_M2_RUN_FIELDS
    float * ws;                /* per-thread scratch, ws_stride floats per thread */
    size_t ws_stride;
    float * pre;               /* per (chunk, group): CB [LC][LC], C [LC][N], B^T [N][LC] */
    size_t pre_stride;         /* floats per (chunk, group) */
    int32_t n_chunk;
    int level;                 /* tk_cpu_level() */
} ssd_job;

/* ==== shared inner kernels ============================================================ */

static inline float dot8(const float * a, const float * b, int32_t n) {
    float acc[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

#ifdef TK_HAVE_X86
/* out[0:P] += sum_j c[j] * M[j*ldm + 0:P], j in [0, J): P a multiple of 8, at most 64;
 * the P outputs stay in registers across j (one broadcast, P/8 loads and FMAs per j). */
__attribute__((target("avx2,fma"))) static void acc_rows_avx2(float * out, const float * c, const float * M,
                                                              int64_t ldm, int32_t J, int32_t P) {
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

/* ==== stage 1: chunk cumsum =========================================================== */
/* Contract (one head h, one chunk of L <= LC tokens):
 *   dt:  dt of the chunk's first token for head h, tokens dt_stride floats apart;  Ah = A[h]
 *   dth[i] = dt_i;  a_i = (double) (dt_i * Ah) (the product rounded to float, as the
 *   recurrence's exp argument);  cum[i] = sum_{k<=i} a_k (double, in order);  da[i] = exp(a_i)
 * ref: mamba_ssm ssd_chunk_state.py _chunk_cumsum_fwd (dA_cumsum = cumsum(dt * A) per chunk;
 * there over all heads at once, here per head as its chunks come).  Scalar at every level
 * (no multiply-add to contract: the same bits from either instance). */
static void ssd_chunk_cumsum(const float * dt, int64_t dt_stride, float Ah, int32_t L, float * dth, double * cum,
                             double * da) {
    double cs = 0.0;
    for (int32_t i = 0; i < L; i++) {
        dth[i] = dt[i * dt_stride];
        const double a = (double) (dth[i] * Ah);
        cs += a;
        cum[i] = cs;
        da[i] = exp(a);
    }
}

/* The chunk's x rows of head h, copied contiguous: xh[i][0:P] = x_i[h*P : h*P+P]. */
static void ssd_gather_x(const float * x, int64_t x_stride, int32_t L, int32_t P, float * xh) {
    for (int32_t i = 0; i < L; i++) memcpy(xh + (size_t) i * P, x + i * x_stride, (size_t) P * sizeof(float));
}

/* ==== stage 2: C.B per chunk and group ================================================ */
/* Gather of one (chunk, group): r = the chunk's first token's B of group g (B_i at
 * r + i*stride, C_i G*N floats further): the chunk's C rows copied contiguous (a token's
 * row is conv_dim floats apart, which aliases in L1), Cc[i][n] = C_i[n]; B transposed,
 * BT[n][i] = B_i[n], zero for i in [L, LC). */
static void ssd_gather_cb(const float * r, int64_t stride, int32_t G, int32_t L, int32_t N, float * Cc, float * BT) {
    const int32_t LC = TK_SSD_CHUNK;
    for (int32_t i = 0; i < L; i++) {
        const float * ri = r + i * stride;
        memcpy(Cc + (size_t) i * N, ri + (int64_t) G * N, (size_t) N * sizeof(float));
        for (int32_t n = 0; n < N; n++) BT[(size_t) n * LC + i] = ri[n];
    }
    for (int32_t n = 0; n < N; n++)
        for (int32_t i = L; i < LC; i++) BT[(size_t) n * LC + i] = 0.0f;
}

/* Contract: CB[i*LC + k] = C_i . B_k for k <= i < L (entries k > i: unspecified);
 *   Cc [L][N] the chunk's C rows;  B_k at B + k*stride (the strided activations);  BT the
 *   transposed B of ssd_gather_cb.
 * ref: mamba_ssm ssd_bmm.py _bmm_chunk_fwd(C, B, chunk_size, causal=True).
 * Reference: dot8 (8 partial sums n mod 8, a fixed tree, then the N mod 8 tail). */
static inline __attribute__((always_inline)) void ssd_bmm_chunk_body(const float * Cc, const float * B, int64_t stride,
                                                                     int32_t L, int32_t N, float * CB) {
    const int32_t LC = TK_SSD_CHUNK;
    for (int32_t i = 0; i < L; i++)
        for (int32_t k = 0; k <= i; k++) CB[i * LC + k] = dot8(Cc + (size_t) i * N, B + k * stride, N);
}

static void ssd_bmm_chunk_ref(const float * Cc, const float * BT, const float * B, int64_t stride, int32_t L, int32_t N,
                              float * CB) {
    (void) BT;
    ssd_bmm_chunk_body(Cc, B, stride, L, N, CB);
}

#ifdef TK_HAVE_X86
/* N % 8 == 0: whole rows of 8-aligned length, each as acc_rows_avx2 over B^T (one FMA
 * chain over n per product); else the reference loops. */
__attribute__((target("avx2,fma")))
static void ssd_bmm_chunk_avx2(const float * Cc, const float * BT, const float * B, int64_t stride, int32_t L,
                               int32_t N, float * CB) {
    const int32_t LC = TK_SSD_CHUNK;
    if (N % 8 != 0) { ssd_bmm_chunk_body(Cc, B, stride, L, N, CB); return; }
    const int32_t L8 = (L + 7) & ~7;
    for (int32_t i = 0; i < L; i++) {
        memset(CB + i * LC, 0, (size_t) L8 * sizeof(float));
        acc_rows_avx2(CB + i * LC, Cc + (size_t) i * N, BT, LC, N, L8);
    }
}
#endif

/* Pool task, items = (chunk, group) pairs: gather, then stage 2, into j->pre. */
static void ssd_bmm_task(void * arg, int64_t i0, int64_t i1, int thread) {
    const ssd_job * j = arg;
    const int32_t N = j->N, G = j->G, LC = TK_SSD_CHUNK;
    (void) thread;
    for (int64_t it = i0; it < i1; it++) {
        const int32_t c = (int32_t) (it / G), g = (int32_t) (it % G), t0 = c * LC;
        const int32_t L = j->n_tok - t0 < LC ? j->n_tok - t0 : LC;
        float * CB = j->pre + (size_t) it * j->pre_stride, * Cc = CB + LC * LC, * BT = Cc + (size_t) LC * N;
        const float * B = j->xBC + t0 * j->xbc_stride + j->DI + (int64_t) g * N;
        ssd_gather_cb(B, j->xbc_stride, G, L, N, Cc, BT);
#ifdef TK_HAVE_X86
        if (j->level >= TK_CPU_AVX2) { ssd_bmm_chunk_avx2(Cc, BT, B, j->xbc_stride, L, N, CB); continue; }
#endif
        ssd_bmm_chunk_ref(Cc, BT, B, j->xbc_stride, L, N, CB);
    }
}

/* ==== stages 3 and 4: one head, one chunk ============================================= */

/* One head's view of one chunk: stage 1's and 2's outputs, the state, the outputs. */
typedef struct {
    int32_t L, P, N;
    float Dh;
    const float * CB, * Cc, * BT;   /* stage 2, the head's group: [LC][LC], [LC][N], [N][LC] */
    const float * xh, * dth;        /* [L][P], [L] */
    const double * cum, * da;       /* [L] stage 1 */
    float * sT;                     /* [N][P] state entering the chunk; stage 4 carries it on */
    float * y;                      /* y of the chunk's first token, head h; rows y_stride apart */
    int64_t y_stride;
    ssd_scratch * w;                /* coef, coef4, wk, xw */
} ssd_head_chunk;

/* ---- stage 3: chunk scan ---- */
/* Contract: for i < L, y_i[0:P] =
 *     D_h x_i                                                  (then, in this order,)
 *   + sum_{n<N}  (exp(cum_i) C_i[n]) sT[n][0:P]                (carried state, n ascending)
 *   + sum_{k=i..0} (exp(cum_i - cum_k) dt_k CB[i][k]) x_k      (intra-chunk, k descending)
 * with exp(cum_i) rounded to float, and e_k = exp(cum_i - cum_k) as the product of da[k+1..i]
 * (double, e = 1 at k = i; underflows to 0 gracefully as a <= 0), rounded to float, times
 * dt_k, times CB[i][k].
 * ref: mamba_ssm ssd_chunk_scan.py _chunk_scan_fwd(cb, x, dt, dA_cumsum, C, states, D). */
static inline __attribute__((always_inline)) void ssd_chunk_scan_body(const ssd_head_chunk * hc) {
    const int32_t P = hc->P, N = hc->N, L = hc->L, LC = TK_SSD_CHUNK;
    const float Dh = hc->Dh, * CB = hc->CB, * Cc = hc->Cc, * xh = hc->xh, * dth = hc->dth, * sT = hc->sT;
    const double * cum = hc->cum, * da = hc->da;
    for (int32_t i = 0; i < L; i++) {
        float * yi = hc->y + i * hc->y_stride;
        const float * xi = xh + (size_t) i * P;
        for (int32_t p = 0; p < P; p++) yi[p] = Dh * xi[p];
        const float dec = (float) exp(cum[i]);
        for (int32_t n = 0; n < N; n++) {
            const float cn = dec * Cc[(size_t) i * N + n];
            const float * sn = sT + (size_t) n * P;
            for (int32_t p = 0; p < P; p++) yi[p] += cn * sn[p];
        }
        double e = 1.0;
        for (int32_t k = i; k >= 0; k--) {
            if (k < i) e *= da[k + 1];
            const float m = (float) e * dth[k] * CB[i * LC + k];
            const float * xk = xh + (size_t) k * P;
            for (int32_t p = 0; p < P; p++) yi[p] += m * xk[p];
        }
    }
}

static void ssd_chunk_scan_ref(const ssd_head_chunk * hc) { ssd_chunk_scan_body(hc); }

#ifdef TK_HAVE_X86
/* P % 8 == 0, P <= 64: the same products, accumulated in registers: the carried state of 4
 * tokens at a time (acc_rows4_avx2, P % 16 == 0) or one (acc_rows_avx2), then the
 * intra-chunk sum of each token as one acc_rows_avx2 over k; else the reference loops. */
__attribute__((target("avx2,fma"))) static void ssd_chunk_scan_avx2(const ssd_head_chunk * hc) {
    const int32_t P = hc->P, N = hc->N, L = hc->L, LC = TK_SSD_CHUNK;
    if (P % 8 != 0 || P > 64) { ssd_chunk_scan_body(hc); return; }
    const float Dh = hc->Dh, * CB = hc->CB, * Cc = hc->Cc, * xh = hc->xh, * dth = hc->dth, * sT = hc->sT;
    const double * cum = hc->cum, * da = hc->da;
    float * coef = hc->w->coef, * coef4 = hc->w->coef4;
    int32_t i = 0;
    if (P % 16 == 0)
        for (; i + 4 <= L; i += 4) {
            float * yr[4];
            const float * cr[4];
            for (int r = 0; r < 4; r++) {
                yr[r] = hc->y + (i + r) * hc->y_stride;
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
        float * yi = hc->y + i * hc->y_stride;
        const float * xi = xh + (size_t) i * P;
        for (int32_t p = 0; p < P; p++) yi[p] = Dh * xi[p];
        const float dec = (float) exp(cum[i]);
        for (int32_t n = 0; n < N; n++) coef[n] = dec * Cc[(size_t) i * N + n];
        acc_rows_avx2(yi, coef, sT, P, N, P);
    }
    for (i = 0; i < L; i++) {
        double e = 1.0;
        for (int32_t k = i; k >= 0; k--) {
            if (k < i) e *= da[k + 1];
            coef[k] = (float) e * dth[k] * CB[i * LC + k];
        }
        acc_rows_avx2(hc->y + i * hc->y_stride, coef, xh, P, i + 1, P);
    }
}
#endif

/* ---- stage 4: state passing ---- */
/* Contract: sT[n][0:P] <- exp(cum_{L-1}) sT[n][0:P] + sum_{k<L} B_k[n] xw_k[0:P]  (k ascending)
 *   where xw_k = wk_k x_k, wk_k = exp(cum_{L-1} - cum_k) rounded to float, times dt_k; the
 *   decay exp(cum_{L-1}) rounded to float.
 * ref: mamba_ssm ssd_chunk_state.py _chunk_state_fwd (the sum: the chunk's own state) and
 * ssd_state_passing.py _state_passing_fwd (s <- exp(dA_chunk) s + chunk state), fused: the
 * sum is accumulated onto the decayed state in place, one term at a time (materializing
 * the chunk's state first would round differently). */
static inline __attribute__((always_inline)) void ssd_chunk_state_weights(const ssd_head_chunk * hc) {
    const int32_t P = hc->P, L = hc->L;
    const float * xh = hc->xh, * dth = hc->dth;
    const double * cum = hc->cum;
    float * wk = hc->w->wk, * xw = hc->w->xw;
    for (int32_t k = 0; k < L; k++) {
        wk[k] = (float) exp(cum[L - 1] - cum[k]) * dth[k];
        for (int32_t p = 0; p < P; p++) xw[(size_t) k * P + p] = wk[k] * xh[(size_t) k * P + p];
    }
}

static inline __attribute__((always_inline)) void ssd_state_passing_body(const ssd_head_chunk * hc) {
    const int32_t P = hc->P, N = hc->N, L = hc->L, LC = TK_SSD_CHUNK;
    const float dec_all = (float) exp(hc->cum[L - 1]), * BT = hc->BT, * xw = hc->w->xw;
    float * sT = hc->sT;
    ssd_chunk_state_weights(hc);
    for (int32_t n = 0; n < N; n++) {
        float * sn = sT + (size_t) n * P;
        const float * bn = BT + (size_t) n * LC;
        for (int32_t p = 0; p < P; p++) sn[p] *= dec_all;
        for (int32_t k = 0; k < L; k++) {
            const float b = bn[k];
            const float * xk = xw + (size_t) k * P;
            for (int32_t p = 0; p < P; p++) sn[p] += b * xk[p];
        }
    }
}

static void ssd_state_passing_ref(const ssd_head_chunk * hc) { ssd_state_passing_body(hc); }

#ifdef TK_HAVE_X86
/* P % 8 == 0, P <= 64: the sum over k of each sT row as one acc_rows_avx2 over xw (one FMA
 * chain per element, k ascending); else the reference loops. */
__attribute__((target("avx2,fma"))) static void ssd_state_passing_avx2(const ssd_head_chunk * hc) {
    const int32_t P = hc->P, N = hc->N, L = hc->L, LC = TK_SSD_CHUNK;
    if (P % 8 != 0 || P > 64) { ssd_state_passing_body(hc); return; }
    const float dec_all = (float) exp(hc->cum[L - 1]), * BT = hc->BT, * xw = hc->w->xw;
    float * sT = hc->sT;
    ssd_chunk_state_weights(hc);
    for (int32_t n = 0; n < N; n++) {
        float * sn = sT + (size_t) n * P;
        for (int32_t p = 0; p < P; p++) sn[p] *= dec_all;
        acc_rows_avx2(sn, BT + (size_t) n * LC, xw, P, L, P);
    }
}
#endif

/* ==== driver =========================================================================== */

/* Pool task, heads [h0, h1) over the whole run: per chunk, stage 1, then 3, then 4. */
static void ssd_heads_task(void * arg, int64_t h0, int64_t h1, int thread) {
    const ssd_job * j = arg;
    const int32_t P = j->P, N = j->N, G = j->G, hpg = j->H / j->G, LC = TK_SSD_CHUNK;
    ssd_scratch w = ssd_scratch_at(j->ws + (size_t) thread * j->ws_stride, P, N);
    for (int64_t hh = h0; hh < h1; hh++) {
        const int32_t h = (int32_t) hh, g = h / hpg;
        float * sh = j->s + (int64_t) h * P * N;
        for (int32_t p = 0; p < P; p++)
            for (int32_t n = 0; n < N; n++) w.sT[(size_t) n * P + p] = sh[(size_t) p * N + n];
        for (int32_t c = 0; c < j->n_chunk; c++) {
            const int32_t t0 = c * LC, L = j->n_tok - t0 < LC ? j->n_tok - t0 : LC;
            const float * CB = j->pre + ((size_t) c * G + g) * j->pre_stride, * Cc = CB + LC * LC;
            ssd_chunk_cumsum(j->dt + t0 * j->dt_stride + h, j->dt_stride, j->A[h], L, w.dth, w.cum, w.da);
            ssd_gather_x(j->xBC + t0 * j->xbc_stride + (int64_t) h * P, j->xbc_stride, L, P, w.xh);
            const ssd_head_chunk hc = {L, P, N, j->D[h], CB, Cc, Cc + (size_t) LC * N, w.xh, w.dth, w.cum, w.da,
                                       w.sT, j->y + t0 * j->y_stride + (int64_t) h * P, j->y_stride, &w};
#ifdef TK_HAVE_X86
            if (j->level >= TK_CPU_AVX2) {
                ssd_chunk_scan_avx2(&hc);
                ssd_state_passing_avx2(&hc);
                continue;
            }
#endif
            ssd_chunk_scan_ref(&hc);
            ssd_state_passing_ref(&hc);
        }
        for (int32_t p = 0; p < P; p++)
            for (int32_t n = 0; n < N; n++) sh[(size_t) p * N + n] = w.sT[(size_t) n * P + p];
    }
}

tk_status tk_ssd_scan(tk_pool * pool, float * s, const float * xBC, int64_t xbc_stride, const float * dt,
                      int64_t dt_stride, const float * A, const float * D, int32_t n_tok, int32_t n_head,
                      int32_t head_dim, int32_t d_state, int32_t n_group, float * y, int64_t y_stride, void * ws,
                      size_t ws_bytes) {
    if (n_tok <= 0) return TK_OK;
    const int nt = tk_pool_size(pool);
    const size_t need = tk_ssd_workspace_bytes(n_tok, n_head, head_dim, d_state, n_group, nt);
    if (!ws || ws_bytes < need || (uintptr_t) ws % sizeof(float))
        return TK_FAIL(TK_ERR_INVALID, "SSD workspace of %zu bytes at %p, %zu needed (n_tok %d, %d threads)", ws_bytes,
                       ws, need, n_tok, nt);
    ssd_job j = {s, xBC, dt, A, D, xbc_stride, dt_stride, y_stride, n_tok, n_head, head_dim, d_state, n_group,
                 n_head * head_dim, y, ws, ssd_ws_floats(head_dim, d_state), NULL, ssd_pre_floats(d_state),
                 (n_tok + TK_SSD_CHUNK - 1) / TK_SSD_CHUNK, tk_cpu_level()};
    j.pre = j.ws + (size_t) nt * j.ws_stride;
    tk_pool_run(pool, (int64_t) j.n_chunk * n_group, ssd_bmm_task, &j);
    tk_pool_run(pool, n_head, ssd_heads_task, &j);
    return TK_OK;
}
