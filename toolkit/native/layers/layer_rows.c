/* layer_rows.c: row loops the layer kinds share (contracts in layer.h): RMSNorm rows, the
 * residual add, the SwiGLU and Mamba-2 gates, the causal conv + activation, and bias rows (+ GeLU-tanh,
 * RecurrentGemma), each split over
 * the context's threads so that every row's result is the same at any thread count.
 */
#include <math.h>

#include "layers/layer.h"

void tk_par_rows(tk_pool * pool, int64_t n_rows, int64_t width, tk_task_fn fn, void * job) {
    if (n_rows * width < TK_PAR_MIN) fn(job, 0, n_rows, 0);
    else tk_pool_run(pool, n_rows, fn, job);
}

/* y[t] = rmsnorm(a[t]) * b */
static void rms_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) tk_rms_norm(j->a + t * j->a_stride, j->b, j->f, j->n, j->y + t * j->y_stride);
}

void tk_rms_norm_rows(tk_context * ctx, const float * x, const float * w, float eps, int64_t n, int32_t U, float * y) {
    tk_rows_job j = {x, w, y, n, n, n, eps, 1};
    tk_par_rows(ctx->pool, U, n, rms_rows, &j);
}

/* y[t] += a[t] * f */
void tk_add_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    for (int64_t i = t0 * j->n; i < t1 * j->n; i++) j->y[i] += j->a[i] * j->f;
}

/* y[t] = act(y[t]) * a[t] (act j->act, TK_ACT_*: 0 silu); with f > 0 (GLM-5-Next's SwiGLU clamp) first y <- min(y, f), a <- clamp(a, -f, f) */
void tk_silu_mul_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    if (j->f > 0.0f) {
        const float L = j->f;
        for (int64_t t = t0; t < t1; t++) {
            float * y = j->y + t * j->y_stride, * a = (float *) j->a + t * j->a_stride;
            for (int64_t i = 0; i < j->n; i++) {
                if (y[i] > L) y[i] = L;
                a[i] = a[i] > L ? L : (a[i] < -L ? -L : a[i]);
            }
        }
    }
    if (j->act == TK_ACT_SILU) {   /* the vectorised SiLU, unchanged */
        for (int64_t t = t0; t < t1; t++) tk_silu_mul_row(j->y + t * j->y_stride, j->a + t * j->a_stride, j->n);
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        const float * a = j->a + t * j->a_stride;
        for (int64_t i = 0; i < j->n; i++) y[i] = tk_act(j->act, y[i]) * a[i];
    }
}

/* act(x) for the TK_ACT_* of layer.h, as HF's ACT2FN computes them in float32:
 * gelu x/2 (1 + erf(x / sqrt 2)); gelu_tanh x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (gelu_pytorch_tanh, gelu_new, gelu_fast); relu max(x, 0); relu2 relu(x)^2; quick_gelu
 * x sigmoid(1.702 x); sigmoid; tanh.  silu x sigmoid(x) (tk_silu). */
float tk_act(int32_t act, float x) {
    switch (act) {
    case TK_ACT_GELU: return 0.5f * x * (1.0f + erff(x * (float) M_SQRT1_2));
    case TK_ACT_GELU_TANH: return tk_gelu_tanh(x);
    case TK_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case TK_ACT_RELU2: return x > 0.0f ? x * x : 0.0f;
    case TK_ACT_QUICK_GELU: return x / (1.0f + expf(-1.702f * x));
    case TK_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case TK_ACT_TANH: return tanhf(x);
    default: return tk_silu(x);
    }
}

/* Mamba-2 gate: y[t] *= silu(z[t]); then RMSNorm over each of `groups` groups, weight b */
void tk_gated_norm_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    const int64_t gs = j->n / j->groups;
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        const float * z = j->a + t * j->a_stride;
        tk_mul_silu_row(y, z, j->n);
        for (int32_t g = 0; g < j->groups; g++) tk_rms_norm(y + g * gs, j->b + g * gs, j->f, gs, y + g * gs);
    }
}

/* causal conv over a channel range of one sequence's run, then the activation (contract: tk_ssm_conv) */
typedef struct {
    const float * x;
    int64_t x_stride;
    int32_t n_tok, d_conv;
    const float * w, * b;
    float * state;
    float * y;
    int64_t y_stride;
    int64_t channels;
    int32_t act;               /* TK_ACT_* after the conv (TK_ACT_SILU: the vectorised row); -1: none */
} conv_job;

/* [b0, b1): blocks of 8 channels (tk_ssm_conv's lanes: a split at a multiple of 8 keeps
 * every channel's result) */
static void conv_act_channels(void * arg, int64_t b0, int64_t b1, int thread) {
    const conv_job * j = arg;
    (void) thread;
    const int64_t c0 = 8 * b0, c1 = 8 * b1 < j->channels ? 8 * b1 : j->channels;
    const int32_t nc = (int32_t) (c1 - c0), ns = j->d_conv - 1;
    tk_ssm_conv(j->x + c0, j->x_stride, j->n_tok, nc, j->d_conv, j->w + c0 * j->d_conv, j->b ? j->b + c0 : NULL,
                j->state + c0 * ns, j->y + c0, j->y_stride);
    if (j->act == TK_ACT_SILU) {   /* the vectorised SiLU, unchanged */
        for (int32_t t = 0; t < j->n_tok; t++) tk_silu_row(j->y + t * j->y_stride + c0, nc);
    } else if (j->act > 0) {
        for (int32_t t = 0; t < j->n_tok; t++) {
            float * y = j->y + t * j->y_stride + c0;
            for (int32_t i = 0; i < nc; i++) y[i] = tk_act(j->act, y[i]);
        }
    }
}

void tk_conv_act(tk_context * ctx, int32_t act, const float * x, int64_t x_stride, int32_t n_tok, int32_t channels,
                 int32_t d_conv, const float * w, const float * b, float * state, float * y, int64_t y_stride) {
    conv_job j = {x, x_stride, n_tok, d_conv, w, b, state, y, y_stride, channels, act};
    tk_par_rows(ctx->pool, (channels + 7) / 8, 8 * (int64_t) n_tok, conv_act_channels, &j);
}

void tk_conv_rows(tk_context * ctx, const float * x, int64_t x_stride, int32_t n_tok, int32_t channels, int32_t d_conv,
                  const float * w, const float * b, float * state, float * y, int64_t y_stride) {
    conv_job j = {x, x_stride, n_tok, d_conv, w, b, state, y, y_stride, channels, -1};
    tk_par_rows(ctx->pool, (channels + 7) / 8, 8 * (int64_t) n_tok, conv_act_channels, &j);
}

void tk_rs_snap_conv(const tk_rs_view * rv, int k, int32_t s, const float * x, int64_t x_stride, int32_t n_tok,
                     int32_t channels, int32_t d_conv) {
    const int32_t ns = d_conv - 1;
    const float * state = rv->piece[k] + (size_t) rv->ub_cells[s] * rv->piece_n[k];
    for (int32_t i = 0; i < n_tok; i++) {
        float * snap = tk_rs_snap(rv, k, s, n_tok, i);
        if (!snap) continue;
        /* window after token i: entries i + 1 .. i + ns of (state[0..ns), x[0..n_tok)) */
        for (int32_t c = 0; c < channels; c++)
            for (int32_t j = 0; j < ns; j++) {
                const int32_t e = i + 1 + j;
                snap[(int64_t) c * ns + j] = e < ns ? state[(int64_t) c * ns + e] : x[(int64_t) (e - ns) * x_stride + c];
            }
    }
}

/* y[t] += b over rows [t0, t1) (a the bias) */
static void bias_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        for (int64_t i = 0; i < j->n; i++) y[i] += j->a[i];
    }
}

/* x <- scale x / sqrt(sum x^2 + eps) over n floats, the sum in double: the q / k l2 norm of
 * the gated delta net (mixer_gdn.c) and of KDA (mixer_kda.c), eps inside the root as fla's
 * l2norm */
void tk_l2_norm(float * x, int32_t n, float eps, float scale) {
    double ss = 0.0;
    for (int32_t i = 0; i < n; i++) ss += (double) x[i] * (double) x[i];
    const float inv = (float) (1.0 / sqrt(ss + (double) eps));
    for (int32_t i = 0; i < n; i++) x[i] = x[i] * inv * scale;
}

/* gelu_pytorch_tanh: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
float tk_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

/* y[t] = act(y[t] + a) over rows [t0, t1) (j->act, TK_ACT_*; gelu_tanh through tk_gelu_tanh as before) */
static void bias_gelu_rows(void * arg, int64_t t0, int64_t t1, int thread) {
    const tk_rows_job * j = arg;
    (void) thread;
    if (j->act == TK_ACT_GELU_TANH) {
        for (int64_t t = t0; t < t1; t++) {
            float * y = j->y + t * j->y_stride;
            for (int64_t i = 0; i < j->n; i++) y[i] = tk_gelu_tanh(y[i] + j->a[i]);
        }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        float * y = j->y + t * j->y_stride;
        for (int64_t i = 0; i < j->n; i++) y[i] = tk_act(j->act, y[i] + j->a[i]);
    }
}

void tk_bias_rows(tk_context * ctx, float * y, const float * b, int64_t n, int32_t U, int act) {
    tk_rows_job j = {b, NULL, y, 0, n, n, 0.0f, 1};
    j.act = TK_ACT_GELU_TANH;
    tk_par_rows(ctx->pool, U, n, act ? bias_gelu_rows : bias_rows, &j);
}

void tk_bias_act_rows(tk_context * ctx, float * y, const float * b, int64_t n, int32_t U, int32_t act) {
    tk_rows_job j = {b, NULL, y, 0, n, n, 0.0f, 1};
    j.act = act;
    tk_par_rows(ctx->pool, U, n, bias_gelu_rows, &j);
}
