/* indexer_select.c: what the two sparse-attention indexers share (mixer_qsa.c, qwen4exp's QSA
 * block indexer; dsa.c, GLM-5-Next's DSA k-pool indexer): a sequence's KV cells in position
 * order, and the top-k of block scores in torch.topk's order among equal scores. */
#include <string.h>

#include "layers/layer.h"

int32_t tk_kv_seq_cells(const tk_kv_view * kv, uint64_t bit, int32_t pmax, int32_t * cells) {
    int32_t n = 0;
    for (int32_t c = 0; c < kv->n_cells; c++)
        if ((kv->seqs[c] & bit) && kv->pos[c] >= 0 && kv->pos[c] <= pmax) cells[n++] = c;
    /* cells are claimed in position order (memory_kv.c); sort defensively by position */
    for (int32_t i = 1; i < n; i++) {
        const int32_t c = cells[i];
        int32_t k = i;
        while (k > 0 && kv->pos[cells[k - 1]] > kv->pos[c]) { cells[k] = cells[k - 1]; k--; }
        cells[k] = c;
    }
    return n;
}

/* The k best of n scores, chosen as torch.topk on CPU chooses them (HF's reference): the
 * queue of (score, block) pairs goes through libstdc++'s std::nth_element (introselect:
 * median-of-three pivot, unguarded partition, insertion sort of the last <= 3) with the
 * comparator "x > y", and the first k pairs are taken (aten TopKImpl.h topk_impl_loop, the
 * nth_element branch: k * 64 > n; the partial_sort branch, k * 64 <= n, is a heap select
 * whose choice among equal scores this does not reproduce).  Which of several blocks with
 * equal scores wins matters: the per-head ReLU makes exact zeros, so ties at the cut are
 * common.  keep[b] = 1 for the chosen blocks (b < n_blk). */
static int topk_gt(const tk_topk_elem * x, const tk_topk_elem * y) { return x->v > y->v; }
static void topk_swap(tk_topk_elem * a, tk_topk_elem * b) { const tk_topk_elem t = *a; *a = *b; *b = t; }

static void topk_median_to_first(tk_topk_elem * r, tk_topk_elem * a, tk_topk_elem * b, tk_topk_elem * c) {
    if (topk_gt(a, b)) {
        if (topk_gt(b, c)) topk_swap(r, b);
        else if (topk_gt(a, c)) topk_swap(r, c);
        else topk_swap(r, a);
    } else if (topk_gt(a, c)) topk_swap(r, a);
    else if (topk_gt(b, c)) topk_swap(r, c);
    else topk_swap(r, b);
}

static int32_t topk_partition(tk_topk_elem * q, int32_t first, int32_t last, const tk_topk_elem * pivot) {
    for (;;) {
        while (topk_gt(&q[first], pivot)) first++;
        last--;
        while (topk_gt(pivot, &q[last])) last--;
        if (!(first < last)) return first;
        topk_swap(&q[first], &q[last]);
        first++;
    }
}

static void topk_insertion_sort(tk_topk_elem * q, int32_t first, int32_t last) {
    if (first == last) return;
    for (int32_t i = first + 1; i < last; i++) {
        const tk_topk_elem v = q[i];
        if (topk_gt(&v, &q[first])) {
            memmove(&q[first + 1], &q[first], (size_t) (i - first) * sizeof v);
            q[first] = v;
        } else {
            int32_t j = i;
            while (topk_gt(&v, &q[j - 1])) { q[j] = q[j - 1]; j--; }
            q[j] = v;
        }
    }
}

void tk_topk_torch(const float * score, int32_t n_blk, int32_t k, tk_topk_elem * q, uint8_t * keep) {
    for (int32_t b = 0; b < n_blk; b++) { q[b] = (tk_topk_elem) {score[b], b}; keep[b] = 0; }
    const int32_t nth = k - 1;
    int32_t first = 0, last = n_blk, depth = 0;
    for (int32_t n = n_blk; n > 1; n >>= 1) depth++;
    depth *= 2;
    while (last - first > 3) {
        if (depth == 0) {      /* libstdc++'s heap-select fallback: a plain selection here */
            for (int32_t i = first; i <= nth; i++) {
                int32_t best = i;
                for (int32_t j = i + 1; j < last; j++) if (topk_gt(&q[j], &q[best])) best = j;
                topk_swap(&q[i], &q[best]);
            }
            first = last;
            break;
        }
        depth--;
        const int32_t mid = first + (last - first) / 2;
        topk_median_to_first(&q[first], &q[first + 1], &q[mid], &q[last - 1]);
        const int32_t cut = topk_partition(q, first + 1, last, &q[first]);
        if (cut <= nth) first = cut;
        else last = cut;
    }
    if (first < last) topk_insertion_sort(q, first, last);
    for (int32_t i = 0; i < k; i++) keep[q[i].i] = 1;
}

