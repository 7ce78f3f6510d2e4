/* ssm.c: the recurrent kernels: causal depthwise conv with carried state, selective scans.
 *
 * All three update their state in place (no per-token state copies).
 */
#include <math.h>
#include <string.h>

#include "tk_internal.h"

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
void tk_ssm_conv(const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, int32_t d_conv,
                 const float * w, const float * b, float * state, float * y, int64_t y_stride) {
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
void tk_ssm_scan_mamba2(float * s, const float * x, const float * dt, const float * A, const float * B,
                        const float * C, const float * D, int32_t n_head, int32_t head_dim, int32_t d_state,
                        int32_t n_group, float * y) {
    const int32_t heads_per_group = n_head / n_group;
    for (int32_t h = 0; h < n_head; h++) {
        const int32_t g = h / heads_per_group;
        const float * Bg = B + (int64_t) g * d_state;
        const float * Cg = C + (int64_t) g * d_state;
        const float dA = expf(dt[h] * A[h]);
        for (int32_t p = 0; p < head_dim; p++) {
            const int64_t hp = (int64_t) h * head_dim + p;
            float * sp = s + hp * d_state;
            const float dtx = dt[h] * x[hp];
            float acc = 0.0f;
            for (int32_t n = 0; n < d_state; n++) {
                const float v = sp[n] * dA + Bg[n] * dtx;
                sp[n] = v;
                acc += v * Cg[n];
            }
            y[hp] = acc + D[h] * x[hp];
        }
    }
}
