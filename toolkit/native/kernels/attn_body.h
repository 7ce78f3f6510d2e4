/* attn_body.h: one level's instance of the blocked attention's chunk and fold (contract:
 * attn.h).  Included by attn.c (plain: 4 lanes of GCC's vector extension, no target),
 * attn_avx2.c (8 lanes under avx2 + fma) and attn_avx512.c (16 lanes under AVX-512), each
 * after defining ATTN_VL (float lanes), ATTN_NB (value vectors per register block) and
 * ATTN_NAME(x) (x's name in that instance).
 *
 * Per row r and cell c of the chunk (slot i = pos[c] - the chunk's first position: the same
 * slot of S whatever the tile and wherever the cell lies in the cache):
 *   s = scale (hsum(sum_d q_r[d-vector] * k_c[d-vector]) + the scalar tail), hsum one fixed
 *   tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) after folding 16 lanes to 8 (l_i + l_{i+8});
 *   -INFINITY where r's token does not see c;  m = max s;  p = exp(s - m) (0 where s is
 *   -INFINITY);  l = hsum of the p vectors summed in slot order;  O = sum_c p v_c, one
 *   multiply-add chain per output float in slot (position) order.
 * Rows are computed in fours and value vectors in blocks of ATTN_NB; each row's and float's
 * chain is the same whichever block it falls in, so a row's results do not depend on its tile.
 * The dots of 4 rows x ATTN_VL / 4 cells are reduced together (v_hsum_lanes: the same tree per
 * lane, bit for bit v_hsum's), the cells past a multiple of ATTN_VL / 4 (and a dk with a scalar
 * tail) one at a time; the -INFINITY of unseen slots is set by the softmax pass.
 */
#include <math.h>
#include <string.h>

#include "quants/quants.h"
#if ATTN_VL > 4
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(ATTN_VL * 4)));
typedef int32_t vi __attribute__((vector_size(ATTN_VL * 4)));
typedef float vfu __attribute__((vector_size(ATTN_VL * 4), aligned(4)));   /* unaligned loads / stores */
#if ATTN_VL > 4
typedef float v8 __attribute__((vector_size(32)));
#endif
typedef float v4 __attribute__((vector_size(16)));

#define ATTN_INL static inline __attribute__((always_inline))

ATTN_INL vf v_load(const float * p) { return *(const vfu *) p; }
ATTN_INL void v_store(float * p, vf x) { *(vfu *) p = x; }
ATTN_INL vf v_set1(float x) { return (vf) {0} + x; }
/* x in every lane (v_set1 adds it to +0, which turns -0 into +0: a broadcast where that cannot
 * matter, the probabilities p >= +0) */
ATTN_INL vf v_bcast(float x) {
#if ATTN_VL == 16
    return (vf) _mm512_set1_ps(x);
#elif ATTN_VL == 8
    return (vf) _mm256_set1_ps(x);
#else
    return (vf) {x, x, x, x};
#endif
}
ATTN_INL vf v_sel(vi m, vf a, vf b) { return (vf) ((m & (vi) a) | (~m & (vi) b)); }

ATTN_INL float v_hsum(vf v) {
#if ATTN_VL == 4
    const v4 x = v;
#else
#if ATTN_VL == 16
    const v8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                 __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    const v8 h = v;
#endif
    const v4 x = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
#endif
    return (x[0] + x[2]) + (x[1] + x[3]);
}

ATTN_INL float v_hmax(vf v) {
    float mx = v[0];
    for (int i = 1; i < ATTN_VL; i++) mx = v[i] > mx ? v[i] : mx;
    return mx;
}

/* e^x for x <= 0 (clamped at -87.3): exp_avx2.h's Cephes form (n = round(x log2 e) by the
 * 1.5 2^23 shift, r = x - n ln2 in two parts, the degree-6 Taylor polynomial, 2^n in two
 * factors) */
ATTN_INL vf v_exp(vf x) {
    const vf lo = v_set1(-87.3f);
    x = v_sel(x < lo, lo, x);
    const vf t = x * 1.44269504088896341f + 12582912.0f;
    const vf n = t - 12582912.0f;
    vf r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vf p = v_set1(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const vi ni = (vi) t - 0x4B400000;
    const vi h = ni >> 1;
    const vf s1 = (vf) ((h + 127) << 23), s2 = (vf) ((ni - h + 127) << 23);
    return p * s1 * s2;
}

/* the cache's element types the chunk reads directly (attn_chunk_body's kt): float32, f16 (F16C:
 * AVX2 / AVX-512 instances only) and bf16; each conversion to float is exact, so a chunk over a
 * typed row computes what it would over the row converted first */
enum { ATTN_F32 = 0, ATTN_F16 = 1, ATTN_BF16 = 2 };

typedef uint16_t vh __attribute__((vector_size(ATTN_VL * 2), aligned(2)));
typedef uint32_t vu __attribute__((vector_size(ATTN_VL * 4)));

/* ATTN_VL values of type kt at element e of row p, as floats */
ATTN_INL vf v_load_kt(const uint8_t * p, int32_t e, const int kt) {
#if ATTN_VL == 8
    if (kt == ATTN_F16) return (vf) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (const void *) (p + 2 * (size_t) e)));
#elif ATTN_VL == 16
    if (kt == ATTN_F16) return (vf) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (const void *) (p + 2 * (size_t) e)));
#endif
    if (kt == ATTN_BF16) return (vf) (__builtin_convertvector(*(const vh *) (const void *) (p + 2 * (size_t) e), vu) << 16);
    return v_load((const float *) (const void *) p + e);
}

/* one value of type kt at element e of row p */
ATTN_INL float s_load_kt(const uint8_t * p, int32_t e, const int kt) {
    if (kt == ATTN_F32) return ((const float *) (const void *) p)[e];
    uint16_t h;
    memcpy(&h, p + 2 * (size_t) e, 2);
    return kt == ATTN_F16 ? tkq_fp16_to_fp32(h) : tkq_bf16_to_fp32(h);
}

/* S[r][i] for the 4 rows r0.. and cell c (key row kc, of type kt): q . k scaled (the rows that
 * do not see c are set to -INFINITY by attn_softmax_row) */
ATTN_INL void attn_dots4(const tk_attn_args * a, const float * const q[4], const uint8_t * kc, int32_t i, float * S,
                         int32_t r0, const int kt) {
    const int32_t dk = a->dk, nv = dk / ATTN_VL;
    vf acc[4] = {{0}, {0}, {0}, {0}};
    for (int32_t d = 0; d < nv; d++) {
        const vf kv = v_load_kt(kc, d * ATTN_VL, kt);
        for (int u = 0; u < 4; u++) acc[u] += v_load(q[u] + d * ATTN_VL) * kv;
    }
    for (int u = 0; u < 4; u++) {
        float s = v_hsum(acc[u]);
        for (int32_t d = nv * ATTN_VL; d < dk; d++) s += q[u][d] * s_load_kt(kc, d, kt);
        S[(size_t) (r0 + u) * TK_ATTN_CHUNK + i] = s * a->scale;
    }
}

/* cells per dot group: 4 rows x ATTN_NC cells, ATTN_VL sums, reduced together into one vector */
#define ATTN_NC (ATTN_VL / 4)

/* lane j = v_hsum(a[j]) bit for bit, for the ATTN_VL vectors a[]: v_hsum's tree run on all of
 * them at once, each add pairing the two operands v_hsum pairs (16 lanes folded to 8, 8 to 4,
 * then (x0 + x2) + (x1 + x3)), the vectors interleaved between the levels by shuffles */
ATTN_INL vf v_hsum_lanes(const vf * a) {
    vf e[4];                   /* e[k] lanes 4m .. 4m + 3: x (4 floats) of a[k ATTN_VL / 4 + m] */
#if ATTN_VL == 16
    vf c[8];                   /* c[k] lanes 0 .. 7: h of a[2k], 8 .. 15: h of a[2k + 1] */
    for (int k = 0; k < 8; k++)
        c[k] = __builtin_shufflevector(a[2 * k], a[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(a[2 * k], a[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    for (int k = 0; k < 4; k++)
        e[k] = __builtin_shufflevector(c[2 * k], c[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
               __builtin_shufflevector(c[2 * k], c[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    vf f[2];                   /* f[k] lanes 2n, 2n + 1: (x0 + x2, x1 + x3) of a[k ATTN_VL / 2 + n] */
    for (int k = 0; k < 2; k++)
        f[k] = __builtin_shufflevector(e[2 * k], e[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
               __builtin_shufflevector(e[2 * k], e[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    return __builtin_shufflevector(f[0], f[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
           __builtin_shufflevector(f[0], f[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#elif ATTN_VL == 8
    for (int k = 0; k < 4; k++)
        e[k] = __builtin_shufflevector(a[2 * k], a[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
               __builtin_shufflevector(a[2 * k], a[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15);
    vf f[2];
    for (int k = 0; k < 2; k++)
        f[k] = __builtin_shufflevector(e[2 * k], e[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
               __builtin_shufflevector(e[2 * k], e[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15);
    return __builtin_shufflevector(f[0], f[1], 0, 2, 4, 6, 8, 10, 12, 14) +
           __builtin_shufflevector(f[0], f[1], 1, 3, 5, 7, 9, 11, 13, 15);
#else
    for (int k = 0; k < 4; k++) e[k] = a[k];
    vf f[2];
    for (int k = 0; k < 2; k++)
        f[k] = __builtin_shufflevector(e[2 * k], e[2 * k + 1], 0, 1, 4, 5) +
               __builtin_shufflevector(e[2 * k], e[2 * k + 1], 2, 3, 6, 7);
    return __builtin_shufflevector(f[0], f[1], 0, 2, 4, 6) + __builtin_shufflevector(f[0], f[1], 1, 3, 5, 7);
#endif
}

/* attn_dots4 for the ATTN_NC cells of slots sl[0 ..] (key rows kc[]) at once, bit for bit: the
 * same multiply-add chain per (row, cell), the sums reduced together (v_hsum_lanes; lane
 * u ATTN_NC + c: row u, cell c); dk a multiple of ATTN_VL */
ATTN_INL void attn_dots_nc(const tk_attn_args * a, const float * const q[4], const uint8_t * const kc[ATTN_NC],
                           const int32_t * sl, float * S, int32_t r0, const int kt) {
    const int32_t nv = a->dk / ATTN_VL;
    vf acc[ATTN_VL];
    for (int j = 0; j < ATTN_VL; j++) acc[j] = (vf) {0};
    for (int32_t d = 0; d < nv; d++) {
        vf qv[4];
        for (int u = 0; u < 4; u++) qv[u] = v_load(q[u] + d * ATTN_VL);
        for (int c = 0; c < ATTN_NC; c++) {
            const vf kv = v_load_kt(kc[c], d * ATTN_VL, kt);
            for (int u = 0; u < 4; u++) acc[u * ATTN_NC + c] += qv[u] * kv;
        }
    }
    float s[ATTN_VL] __attribute__((aligned(64)));
    *(vf *) (void *) s = v_hsum_lanes(acc) * a->scale;
    float * S0 = S + (size_t) r0 * TK_ATTN_CHUNK;
    if (sl[ATTN_NC - 1] == sl[0] + ATTN_NC - 1) {     /* consecutive slots: a row's ATTN_NC scores together */
        for (int u = 0; u < 4; u++) memcpy(S0 + (size_t) u * TK_ATTN_CHUNK + sl[0], s + u * ATTN_NC, ATTN_NC * sizeof(float));
    } else {
        for (int u = 0; u < 4; u++)
            for (int c = 0; c < ATTN_NC; c++) S0[(size_t) u * TK_ATTN_CHUNK + sl[c]] = s[u * ATTN_NC + c];
    }
}

/* row r's probabilities in place of its scores (-INFINITY first where the row does not see the
 * slot: see[i] 0, whatever S held there); returns m, *l the sum */
typedef uint8_t vsee __attribute__((vector_size(ATTN_VL), aligned(1)));

ATTN_INL float attn_softmax_row(float * S, const uint8_t * see, float * l) {
    vf mv = v_set1(-INFINITY);
    for (int32_t i = 0; i < TK_ATTN_CHUNK; i += ATTN_VL) {
        const vi on = __builtin_convertvector(*(const vsee *) (const void *) (see + i), vi) != 0;
        const vf s = v_sel(on, v_load(S + i), v_set1(-INFINITY));
        v_store(S + i, s);
        mv = v_sel(s > mv, s, mv);
    }
    const float m = v_hmax(mv);
    if (m == -INFINITY) {      /* the row sees none of the chunk */
        memset(S, 0, TK_ATTN_CHUNK * sizeof(float));
        *l = 0.0f;
        return m;
    }
    vf sum = {0};
    for (int32_t i = 0; i < TK_ATTN_CHUNK; i += ATTN_VL) {
        const vf s = v_load(S + i);
        const vf p = v_sel(s == v_set1(-INFINITY), v_set1(0.0f), v_exp(s - m));
        v_store(S + i, p);
        sum += p;
    }
    *l = v_hsum(sum);
    return m;
}

/* O[r][j..] for 4 rows, value floats [j, j + NBV ATTN_VL): one chain per float over the seen
 * cells (value row of cell c: vb + c vcs bytes, of type kt) */
ATTN_INL void attn_pv4(const tk_attn_args * a, const uint8_t * vb, size_t vcs, const int32_t * cell, const int32_t * cl,
                       int32_t ncl, const float * S, int32_t r0, float * O, int32_t j, const int NBV, const int kt) {
    vf acc[4][4];
    for (int u = 0; u < 4; u++)
        for (int b = 0; b < NBV; b++) acc[u][b] = (vf) {0};
    for (int32_t x = 0; x < ncl; x++) {
        const int32_t i = cl[x];
        const uint8_t * vc = vb + (size_t) cell[i] * vcs;
        vf vv[4];
        for (int b = 0; b < NBV; b++) vv[b] = v_load_kt(vc, j + b * ATTN_VL, kt);
        for (int u = 0; u < 4; u++) {
            const vf p = v_bcast(S[(size_t) (r0 + u) * TK_ATTN_CHUNK + i]);
            for (int b = 0; b < NBV; b++) acc[u][b] += p * vv[b];
        }
    }
    for (int u = 0; u < 4; u++)
        for (int b = 0; b < NBV; b++) v_store(O + (size_t) (r0 + u) * a->dv + j + b * ATTN_VL, acc[u][b]);
}

/* the chunk (attn.h tk_attn_chunk_fn) over K and V of element type kt: float32 (a->k, a->v,
 * strides in floats) or a typed cache's rows read directly (a->kt, a->vt, strides in bytes) */
ATTN_INL void attn_chunk_body(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                              const uint8_t * any, float * m, float * l, float * O, float * ws, const int kt) {
    const int32_t Rp = tl->Rp, dv = a->dv;
    float * S = ws;                          /* [Rp, TK_ATTN_CHUNK] */
    int32_t cl[TK_ATTN_CHUNK], ncl = 0;      /* the chunk's slots some row sees, in order */
    for (int32_t i = 0; i < TK_ATTN_CHUNK; i++)
        if (any[i]) cl[ncl++] = i;
    const uint8_t * kb, * vb;
    size_t kcs, vcs;                         /* bytes per cell */
    if (kt == ATTN_F32) {
        kb = (const uint8_t *) (const void *) (a->k + (int64_t) tl->g * a->k_gs);
        vb = (const uint8_t *) (const void *) (a->v + (int64_t) tl->g * a->v_gs);
        kcs = (size_t) a->k_cs * sizeof(float);
        vcs = (size_t) a->v_cs * sizeof(float);
    } else {
        kb = a->kt + (size_t) tl->g * a->k_gb;
        vb = a->vt + (size_t) tl->g * a->v_gb;
        kcs = a->k_cb;
        vcs = a->v_cb;
    }
    /* S's slots outside cl are left as they are: attn_softmax_row sets them (and every slot a
     * row does not see) to -INFINITY */
    const int32_t nx = a->dk % ATTN_VL ? 0 : ncl / ATTN_NC * ATTN_NC;   /* the cells dotted ATTN_NC at a time */
    for (int32_t r0 = 0; r0 < Rp; r0 += 4) {
        const float * q[4];
        for (int u = 0; u < 4; u++) q[u] = tk_attn_qrow(a, tl, r0 + u);
        int32_t x = 0;
        for (; x < nx; x += ATTN_NC) {
            const uint8_t * kc[ATTN_NC];
            for (int c = 0; c < ATTN_NC; c++) kc[c] = kb + (size_t) cell[cl[x + c]] * kcs;
            attn_dots_nc(a, q, kc, cl + x, S, r0, kt);
        }
        for (; x < ncl; x++) attn_dots4(a, q, kb + (size_t) cell[cl[x]] * kcs, cl[x], S, r0, kt);
    }
    for (int32_t r = 0; r < Rp; r++)
        m[r] = attn_softmax_row(S + (size_t) r * TK_ATTN_CHUNK, vis + (size_t) (tk_attn_row(tl, r) / tl->grp) * TK_ATTN_CHUNK, &l[r]);
    const int32_t nv = dv / ATTN_VL;
    for (int32_t r0 = 0; r0 < Rp; r0 += 4) {
        int32_t j = 0;
        for (; j + ATTN_NB * ATTN_VL <= nv * ATTN_VL; j += ATTN_NB * ATTN_VL)
            attn_pv4(a, vb, vcs, cell, cl, ncl, S, r0, O, j, ATTN_NB, kt);
        for (; j < nv * ATTN_VL; j += ATTN_VL) attn_pv4(a, vb, vcs, cell, cl, ncl, S, r0, O, j, 1, kt);
        for (; j < dv; j++)                  /* the scalar tail of dv */
            for (int u = 0; u < 4; u++) {
                float acc = 0.0f;
                for (int32_t x = 0; x < ncl; x++)
                    acc += S[(size_t) (r0 + u) * TK_ATTN_CHUNK + cl[x]] * s_load_kt(vb + (size_t) cell[cl[x]] * vcs, j, kt);
                O[(size_t) (r0 + u) * dv + j] = acc;
            }
    }
}

void ATTN_NAME(tk_attn_chunk)(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                              const uint8_t * any, float * m, float * l, float * O, float * ws) {
    attn_chunk_body(a, tl, cell, vis, any, m, l, O, ws, ATTN_F32);
}

#if ATTN_VL > 4
/* the chunk over a cache whose K and V are both f16, or both bf16, read directly (attn.h) */
void ATTN_NAME(tk_attn_chunk_f16)(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                                  const uint8_t * any, float * m, float * l, float * O, float * ws) {
    attn_chunk_body(a, tl, cell, vis, any, m, l, O, ws, ATTN_F16);
}
#endif

void ATTN_NAME(tk_attn_chunk_bf16)(const tk_attn_args * a, const tk_attn_tile * tl, const int32_t * cell, const uint8_t * vis,
                                   const uint8_t * any, float * m, float * l, float * O, float * ws) {
    attn_chunk_body(a, tl, cell, vis, any, m, l, O, ws, ATTN_BF16);
}

/* a typed cache's row of n values (the type's whole blocks) as floats, bit for bit the type's
 * to_float (every conversion here is exact, or one rounding as ggml's: q8_0's q d): f16 (F16C,
 * AVX2 / AVX-512 instances only), bf16, q8_0; returns 0 for another type (the caller takes the
 * type's to_float) */
typedef int8_t vb __attribute__((vector_size(ATTN_VL), aligned(1)));

int ATTN_NAME(tk_attn_cvt)(int32_t type, const uint8_t * src, float * dst, int32_t n) {
    int kt;
    switch (type) {
        case TK_GGML_Q8_0: {
            const blk_q8_0 * x = (const blk_q8_0 *) (const void *) src;
            for (int32_t b = 0; b < n / QK32; b++) {
                const float d = tkq_fp16_to_fp32(x[b].d);
                for (int32_t j = 0; j < QK32; j += ATTN_VL)
                    v_store(dst + b * QK32 + j, __builtin_convertvector(*(const vb *) (const void *) (x[b].qs + j), vf) * d);
            }
            return 1;
        }
        case TK_GGML_BF16: kt = ATTN_BF16; break;
#if ATTN_VL > 4
        case TK_GGML_F16: kt = ATTN_F16; break;
#endif
        default: return 0;
    }
    int32_t i = 0;             /* f16 / bf16: the chunk's own loads (v_load_kt, s_load_kt) */
    for (; i + ATTN_VL <= n; i += ATTN_VL) v_store(dst + i, v_load_kt(src, i, kt));
    for (; i < n; i++) dst[i] = s_load_kt(src, i, kt);
    return 1;
}

void ATTN_NAME(tk_attn_fold)(int32_t dv, float * m, float * l, float * O, float m2, float l2, const float * O2) {
    if (m2 == -INFINITY) return;
    if (*m == -INFINITY) {
        *m = m2;
        *l = l2;
        memcpy(O, O2, (size_t) dv * sizeof(float));
        return;
    }
    const float M = *m > m2 ? *m : m2, fa = expf(*m - M), fb = expf(m2 - M);
    int32_t j = 0;
    for (; j + ATTN_VL <= dv; j += ATTN_VL) v_store(O + j, v_load(O + j) * fa + v_load(O2 + j) * fb);
    for (; j < dv; j++) O[j] = O[j] * fa + O2[j] * fb;
    *l = *l * fa + l2 * fb;
    *m = M;
}
