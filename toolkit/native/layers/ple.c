/* ple.c: qwen4exp's per-layer n-gram embedding (PLE) on a gated-delta-net layer il with
 * hp.ple.index[il] = k >= 0 (PLE module k), run by residual_hc.c before the layer's mixer.
 *
 * Shapes (U ubatch tokens, D n_embd, hc streams, hcD = hc D, n = ple_ngram_size, hpn =
 * ple_heads_per_ngram, NH = (n - 1) hpn table heads of dh (the table's row width),
 * Ep = NH dh, Kp = ple_conv_kernel):
 *   the table: per_layer_token_embd.weight [dh, rows] for module 0 (llama.cpp's name),
 *     blk.<il>.per_layer_token_embd.weight for module k > 0 (ours: HF gives each PLE layer
 *     its own table); any row type tk_weight_row reads, gathered row by row from the mapping
 *   blk.<il>.ple_key [Ep, hcD], ple_value [Ep, D], ple_norm_{key,query,conv} [hcD] ((1 + w)
 *     folded in), ple_conv1d [Kp, hcD]
 *   hp.ple.consts, module k at k (n + 2 NH): multipliers m [n], head offsets [NH], head
 *     vocab sizes [NH] (uint64, exact)
 *   state per sequence (recurrent pieces after the layer's own): "ple_conv" [(Kp-1) n, hcD]
 *     the last (Kp - 1) n conv inputs (oldest first), "ple_hist" [n] the n - 1 previous
 *     context ids (most recent first) and a set flag (int32 bits; unset = a fresh sequence)
 * Formula (HF Qwen4ExpTextNGramEmbedding / Qwen4ExpTextPLELayer; docs/specs/gdn-family.md §2.5.4):
 *   context of the token x at position p: t_0 = x, t_s = the token s back, or eos before the
 *     sequence start or when an eos lies in [p - s, p - 1] (an eos hides what precedes it;
 *     its own context is not cut): kept as the history h, h <- [x, h[0..n-3]], or all eos
 *     after an eos
 *   for order o = 2..n: mix = XOR_{s<o} t_s m[s] (uint64, wrapping); head hh = (o - 2) hpn + j:
 *     row = mix % vocab[hh] + offset[hh];  e = concat_hh table[row]  [Ep]
 *   Kp_c = rmsnorm(ple_key e)_c * norm_key_c;  V = ple_value e  [D];  Q_c = rmsnorm(X_c) * norm_query_c
 *   s_c = <Kp_c, Q_c> / sqrt(D);  gamma_c = sigmoid(sign(s_c) sqrt(max(|s_c|, 1e-6)))
 *   G_c = gamma_c V;  N = rmsnorm(G)_c * norm_conv_c
 *   Cv[ch, t] = silu(sum_k w[k, ch] N[ch, t - (Kp - 1 - k) n])  (dilation n, causal, zeros before the start)
 *   X += G + Cv
 * The table is read at random (MADV_RANDOM at load; the rows of a ubatch are asked for with
 * MADV_WILLNEED before the gather), so only the touched pages become resident.
 * ref: transformers 5.24 models/qwen4_exp/modeling_qwen4_exp.py; llama.cpp 0c1e570
 *      qwen4exp.cpp llm_graph_input_qwen4exp_ple::set_input, build_ple.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "layers/layer.h"

static int32_t ple_nh(const tk_hparams * hp) { return (hp->ple.ngram_size - 1) * hp->ple.heads_per_ngram; }

int32_t tk_ple_rs_pieces(const tk_model * m, int il, tk_rs_piece * out) {
    const tk_hparams * hp = &m->hp;
    if (!m->ple_index || m->ple_index[il] < 0) return 0;
    const size_t HD = (size_t) hp->hc.count * (size_t) hp->n_embd;
    out[0] = (tk_rs_piece) {"ple_conv", (size_t) (hp->ple.conv_kernel - 1) * (size_t) hp->ple.ngram_size * HD, 1};
    out[1] = (tk_rs_piece) {"ple_hist", (size_t) hp->ple.ngram_size, 1};
    return 2;
}

tk_status tk_ple_bind(tk_model * m, const tk_table * tab, int il, tk_layer * l) {
    const tk_hparams * hp = &m->hp;
    const int32_t k = m->ple_index[il], n = hp->ple.ngram_size, NH = ple_nh(hp);
    const int64_t D = hp->n_embd, HD = (int64_t) hp->hc.count * D;
    char nm[128];
    const char * tname = k == 0 ? "per_layer_token_embd.weight" : tk_blk_name(nm, sizeof nm, il, "per_layer_token_embd.weight");
    const tk_tensor_desc * td = tk_table_find(tab, tname);
    if (!td) return TK_FAIL(TK_ERR_INVALID, "%s: missing tensor '%s' (the n-gram table of PLE layer %d)", tab->path, tname, il);
    if (td->n_dims != 2 || td->ne[0] <= 0 || td->ne[1] <= 0)
        return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' must be 2-D [row_dim, rows]", tab->path, tname);
    const int64_t dh = td->ne[0], rows = td->ne[1], Ep = dh * NH;
    if (m->ple_row_dim && m->ple_row_dim != dh)
        return TK_FAIL(TK_ERR_INVALID, "%s: tensor '%s' has rows of %lld, another PLE table %d", tab->path, tname,
                       (long long) dh, m->ple_row_dim);
    m->ple_row_dim = (int32_t) dh;
    TK_CHECK(tk_bind_weight(m, tab, tname, TK_SHAPE(dh, rows), 1, &l->ple_table));
    const uint64_t * c = m->ple_consts + (size_t) k * (size_t) (n + 2 * NH);
    for (int32_t h = 0; h < NH; h++) {
        const uint64_t off = c[n + h], voc = c[n + NH + h];
        if (voc == 0 || off + voc > (uint64_t) rows || off + voc < off)
            return TK_FAIL(TK_ERR_INVALID, "%s: PLE layer %d head %d: rows [%llu, %llu + %llu) outside the %lld rows of '%s'",
                           tab->path, il, h, (unsigned long long) off, (unsigned long long) off, (unsigned long long) voc,
                           (long long) rows, tname);
    }
#define NAME(s) tk_blk_name(nm, sizeof nm, il, s)
    TK_CHECK(tk_bind_weight(m, tab, NAME("ple_key.weight"), TK_SHAPE(Ep, HD), 1, &l->ple_key));
    TK_CHECK(tk_bind_weight(m, tab, NAME("ple_value.weight"), TK_SHAPE(Ep, D), 1, &l->ple_value));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ple_norm_key.weight"), TK_SHAPE(HD), 1, &l->ple_norm_key));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ple_norm_query.weight"), TK_SHAPE(HD), 1, &l->ple_norm_query));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ple_norm_conv.weight"), TK_SHAPE(HD), 1, &l->ple_norm_conv));
    TK_CHECK(tk_bind_vec(m, tab, NAME("ple_conv1d.weight"), TK_SHAPE(hp->ple.conv_kernel, HD), 1, &l->ple_conv1d));
#undef NAME
    /* gather-only: random-access advice (harmless when refused) */
    const uintptr_t pg = (uintptr_t) sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t) l->ple_table.data, e = a + l->ple_table.row_bytes * (size_t) rows;
    a &= ~(pg - 1);
    madvise((void *) a, e - a, MADV_RANDOM);
    return TK_OK;
}

/* ctx->pe [U, Ep]: the n-gram rows of every token; the history piece updated per sequence */
static tk_status ple_gather(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, const tk_rs_view * rv, int hp_i) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t n = hp->ple.ngram_size, hpn = hp->ple.heads_per_ngram, NH = ple_nh(hp), dh = m->ple_row_dim;
    const int32_t nst = ub->n_seq_tokens, eos = hp->ple.eos_token;
    const uint64_t * c = m->ple_consts + (size_t) m->ple_index[il] * (size_t) (n + 2 * NH);
    const uint64_t * mul = c, * off = c + n, * voc = c + n + NH;
    int64_t * rows = malloc((size_t) ub->n_tokens * (size_t) NH * sizeof(int64_t));
    if (!rows) return TK_FAIL(TK_ERR_NOMEM, "out of memory (PLE rows)");
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        float * piece = rv->piece[hp_i] + (size_t) rv->ub_cells[s] * rv->piece_n[hp_i];
        int32_t h[64], set;
        memcpy(&set, piece + n - 1, sizeof set);
        if (!set || ub->pos[s * nst] == 0) for (int32_t i = 0; i < n - 1; i++) h[i] = eos;
        else memcpy(h, piece, (size_t) (n - 1) * sizeof(int32_t));
        for (int32_t i = 0; i < nst; i++) {
            const int32_t t = s * nst + i, x = ub->token[t];
            uint64_t mix = (uint64_t) (uint32_t) x * mul[0];
            for (int32_t o = 2; o <= n; o++) {
                mix ^= (uint64_t) (uint32_t) h[o - 2] * mul[o - 1];
                for (int32_t j = 0; j < hpn; j++) {
                    const int32_t hh = (o - 2) * hpn + j;
                    rows[(size_t) t * NH + hh] = (int64_t) (mix % voc[hh] + off[hh]);
                }
            }
            if (x == eos) for (int32_t k = 0; k < n - 1; k++) h[k] = eos;
            else {
                for (int32_t k = n - 2; k > 0; k--) h[k] = h[k - 1];
                if (n > 1) h[0] = x;
            }
            float * snap = tk_rs_snap(rv, hp_i, s, nst, i);   /* speculative window: the piece after token i */
            if (snap) {
                const int32_t one = 1;
                memcpy(snap, h, (size_t) (n - 1) * sizeof(int32_t));
                memcpy(snap + n - 1, &one, sizeof one);
            }
        }
        memcpy(piece, h, (size_t) (n - 1) * sizeof(int32_t));
        set = 1;
        memcpy(piece + n - 1, &set, sizeof set);
    }
    /* ask for the pages of every row first (one pass of advice), then gather */
    const uintptr_t pg = (uintptr_t) sysconf(_SC_PAGESIZE);
    const size_t nr = (size_t) ub->n_tokens * (size_t) NH;
    for (size_t i = 0; i < nr; i++) {
        uintptr_t a = (uintptr_t) (l->ple_table.data + (size_t) rows[i] * l->ple_table.row_bytes);
        uintptr_t e = a + l->ple_table.row_bytes;
        a &= ~(pg - 1);
        madvise((void *) a, e - a, MADV_WILLNEED);
    }
    tk_status st = TK_OK;
    for (size_t i = 0; i < nr && st == TK_OK; i++) st = tk_weight_row(&l->ple_table, rows[i], ctx->pe + i * (size_t) dh);
    free(rows);
    return st;
}

tk_status tk_ple_forward(tk_context * ctx, const tk_layer * l, int il, const tk_ubatch * ub, int first_piece) {
    const tk_model * m = ctx->model;
    const tk_hparams * hp = &m->hp;
    const int32_t U = ub->n_tokens, D = hp->n_embd, hc = hp->hc.count, HD = hc * D, nst = ub->n_seq_tokens;
    const int32_t n = hp->ple.ngram_size, Kp = hp->ple.conv_kernel, hist = (Kp - 1) * n;
    tk_rs_view rv;
    TK_CHECK(ctx->mem->rs_view(ctx->mem, il, &rv));
    if (rv.n_pieces < first_piece + 2) return TK_FAIL(TK_ERR_STATE, "layer %d: no PLE state pieces", il);
    TK_CHECK(ple_gather(ctx, l, il, ub, &rv, first_piece + 1));

    /* key [U, hcD] -> hg, value [U, D] -> out, query -> hn */
    TK_CHECK(tk_matmul(&l->ple_key, 0, ctx->pe, U, ctx->hg, &ctx->mm));
    TK_CHECK(tk_matmul(&l->ple_value, 0, ctx->pe, U, ctx->out, &ctx->mm));
    const float isq = (float) (1.0 / sqrt((double) D));
    for (int32_t t = 0; t < U; t++) {
        for (int32_t c = 0; c < hc; c++) {
            const size_t o = (size_t) t * HD + (size_t) c * D;
            tk_rms_norm(ctx->hg + o, l->ple_norm_key + (size_t) c * D, hp->rms_eps, D, ctx->hg + o);
            tk_rms_norm(ctx->hx + o, l->ple_norm_query + (size_t) c * D, hp->rms_eps, D, ctx->hn + o);
            float sc = 0.0f;
            for (int32_t i = 0; i < D; i++) sc += ctx->hg[o + i] * ctx->hn[o + i];
            sc *= isq;
            const float a = sqrtf(fabsf(sc) > 1e-6f ? fabsf(sc) : 1e-6f);
            const float g = tk_sigmoid(sc > 0.0f ? a : sc < 0.0f ? -a : 0.0f);
            const float * v = ctx->out + (size_t) t * D;
            for (int32_t i = 0; i < D; i++) ctx->hg[o + i] = g * v[i];      /* G_c */
            tk_rms_norm(ctx->hg + o, l->ple_norm_conv + (size_t) c * D, hp->rms_eps, D, ctx->hn + o);   /* N_c */
        }
    }
    /* the dilated causal conv over N per sequence, its last `hist` inputs carried */
    for (int32_t s = 0; s < ub->n_seqs; s++) {
        float * st = rv.piece[first_piece] + (size_t) rv.ub_cells[s] * rv.piece_n[first_piece];   /* [hist, HD] */
        const float * N = ctx->hn + (size_t) s * nst * HD;
        for (int32_t i = 0; i < nst; i++) {
            float * y = ctx->pc + ((size_t) s * nst + i) * HD;
            for (int32_t ch = 0; ch < HD; ch++) {
                float acc = 0.0f;
                for (int32_t k = 0; k < Kp; k++) {
                    const int32_t back = (Kp - 1 - k) * n, j = i - back;
                    const float xv = j >= 0 ? N[(size_t) j * HD + ch] : st[(size_t) (hist + j) * HD + ch];
                    acc += l->ple_conv1d[(size_t) ch * Kp + k] * xv;
                }
                y[ch] = tk_silu(acc);
            }
        }
        /* speculative window: after token i, the last `hist` frames of [state | N[0..i]] */
        for (int32_t i = 0; i < nst; i++) {
            float * snap = tk_rs_snap(&rv, first_piece, s, nst, i);
            if (!snap) continue;
            for (int32_t f = 0; f < hist; f++) {
                const int32_t e = i + 1 + f;
                memcpy(snap + (size_t) f * HD, e < hist ? st + (size_t) e * HD : N + (size_t) (e - hist) * HD, (size_t) HD * sizeof(float));
            }
        }
        /* the window: the last `hist` frames of [state | N] */
        if (nst >= hist) memcpy(st, N + (size_t) (nst - hist) * HD, (size_t) hist * HD * sizeof(float));
        else {
            memmove(st, st + (size_t) nst * HD, (size_t) (hist - nst) * HD * sizeof(float));
            memcpy(st + (size_t) (hist - nst) * HD, N, (size_t) nst * HD * sizeof(float));
        }
    }
    for (size_t i = 0; i < (size_t) U * HD; i++) ctx->hx[i] += ctx->hg[i] + ctx->pc[i];
    return TK_OK;
}
