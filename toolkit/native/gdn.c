/* gdn.c: the gated delta rule, one value head of one sequence (contract: tk_testing.h,
 * tk_gdn_head).  Two forms of the same recurrence:
 *   - recurrent: token by token, O(n_tok Dk Dv); the decode path and the reference;
 *   - chunked (WY/UT, chunks of 64): for prefill runs of at least tk_gdn_threshold() tokens.
 * ref: transformers modeling_qwen3_next.py torch_recurrent_gated_delta_rule /
 *      torch_chunk_gated_delta_rule; flash-linear-attention chunk_gated_delta_rule;
 *      llama.cpp ggml-cpu ops.cpp ggml_compute_forward_gated_delta_net (state layout).
 */
#include <math.h>
#include <stdlib.h>

#include "tk_internal.h"
#include "tk_cpu.h"

/* S (Dv rows of Dk: row j = S[:, j]) through one token; o = S^T q after the update */
static void gdn_step_scalar(float * S, int32_t dk, int32_t dv, const float * q, const float * k, const float * v,
                            float g, float beta, float * o) {
    const float decay = expf(g);
    for (int32_t j = 0; j < dv; j++) {
        float * Sj = S + (int64_t) j * dk;
        float kv = 0.0f;                       /* (S^T k)_j after the decay */
        for (int32_t i = 0; i < dk; i++) { Sj[i] *= decay; kv += Sj[i] * k[i]; }
        const float u = beta * (v[j] - kv);
        float oj = 0.0f;
        for (int32_t i = 0; i < dk; i++) { Sj[i] += k[i] * u; oj += Sj[i] * q[i]; }
        o[j] = oj;
    }
}

void tk_gdn_recurrent(const tk_gdn_head * h) {
    for (int32_t t = 0; t < h->n_tok; t++)
        gdn_step_scalar(h->S, h->dk, h->dv, h->q + t * h->q_stride, h->k + t * h->k_stride, h->v + t * h->v_stride,
                        h->g[t * h->gb_stride], h->beta[t * h->gb_stride], h->o + t * h->o_stride);
}

int64_t tk_gdn_work_floats(int32_t dk, int32_t dv) { (void) dk; (void) dv; return 0; }

static int g_gdn_threshold = 0;   /* chunked form: not yet */
int tk_gdn_threshold(void) { return g_gdn_threshold; }
int tk_gdn_set_threshold(int n) { g_gdn_threshold = n < 0 ? 0 : n; return g_gdn_threshold; }

void tk_gdn_run(const tk_gdn_head * h) { tk_gdn_recurrent(h); }
