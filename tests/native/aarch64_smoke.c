/* aarch64 smoke test under qemu-user: NEON detected; mat_mul at the scalar and NEON levels
 * against a double reference and against each other, a token alone = in a batch; SSD vs
 * the recurrence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "toolkit.h"
#include "tk_testing.h"
#include "quants/qdot.h"
static float rnd(void) { return (float) rand() / RAND_MAX * 2.0f - 1.0f; }
enum { K = 288, M = 7, T = 5, NTYPES = 6 };
static const int types[NTYPES] = {0, 1, 30, 8, 12, 14};   /* F32 F16 BF16 Q8_0 Q4_K Q6_K */

/* mat-mul of every type at the level in force against a double reference over the values
 * the kernel sees (dequantized weights; for the integer path, the quantized activations):
 * y[ti] gets the outputs, mag[ti] the sums of |w x| */
static int check_types(const float * w, const float * x, float y[NTYPES][T * M], double mag[NTYPES][T * M]) {
    int fails = 0;
    static float wd[M * K], xs[T * K];
    for (int ti = 0; ti < NTYPES; ti++) {
        const int ty = types[ti];
        /* K per type: a float tail (K % 8 = 5), 9 Q8_0 blocks, one k-quant super-block */
        const int kq = ty == 12 || ty == 14, K_ = kq ? 256 : ty == 8 ? K : 261;
        int64_t rs = tk_quant_row_size(ty, K_);
        unsigned char * q = malloc((size_t) rs * M);
        float wk[M * K];
        for (int r = 0; r < M; r++) for (int k = 0; k < K_; k++) wk[r * K_ + k] = w[r * K + k];
        if (ty == 0) { for (int i = 0; i < M * K_; i++) ((float *) q)[i] = wk[i]; }
        else if (tk_quantize_rows(ty, wk, q, M, K_, 1) != TK_OK) { printf("quantize %d failed\n", ty); return 1; }
        if (ty == 0) for (int i = 0; i < M * K_; i++) wd[i] = wk[i];
        else tk_dequantize_rows(ty, q, wd, M, K_, 1);
        float xk[T * K];
        for (int t = 0; t < T; t++) for (int k = 0; k < K_; k++) xk[t * K_ + k] = x[t * K + k];
        if (tk_mat_mul(ty, q, K_, M, xk, T, y[ti]) != TK_OK) { printf("mat_mul failed\n"); return 1; }
        /* a token alone gives the bits it gets in the batch */
        for (int t = 0; t < T; t++) {
            float y1[M];
            tk_mat_mul(ty, q, K_, M, xk + t * K_, 1, y1);
            for (int r = 0; r < M; r++)
                if (y1[r] != y[ti][t * M + r]) { printf("type %d token %d row %d: alone %g, in batch %g\n", ty, t, r, y1[r], y[ti][t * M + r]); fails++; }
        }
        /* quantized weights take the integer path: x as the kernel sees it (qdot.h) */
        for (int t = 0; t < T; t++) {
            if (ty == 8) {
                blk_q8_0 b[K / 32];
                tk_quantize_act_q8_0(xk + t * K_, b, K_);
                for (int k = 0; k < K_; k++) xs[t * K_ + k] = tkq_fp16_to_fp32(b[k / 32].d) * b[k / 32].qs[k % 32];
            } else if (kq) {
                blk_q8_K b[1];
                tk_quantize_act_q8_K(xk + t * K_, b, K_);
                for (int k = 0; k < K_; k++) xs[t * K_ + k] = b[0].d * b[0].qs[k];
            } else {
                for (int k = 0; k < K_; k++) xs[t * K_ + k] = xk[t * K_ + k];
            }
        }
        double maxerr = 0;
        for (int t = 0; t < T; t++) for (int r = 0; r < M; r++) {
            double s = 0, a = 0;
            for (int k = 0; k < K_; k++) { s += (double) wd[r * K_ + k] * xs[t * K_ + k]; a += fabs((double) wd[r * K_ + k] * xs[t * K_ + k]); }
            mag[ti][t * M + r] = a;
            double e = fabs(y[ti][t * M + r] - s) / a;
            if (e > maxerr) maxerr = e;
        }
        printf("  type %2d: max |err| / sum|wx| = %.2e\n", ty, maxerr);
        if (maxerr > 1e-5) fails++;
        free(q);
    }
    return fails;
}

int main(void) {
    int fails = 0;
    printf("detected %s, features %s\n", tk_cpu_level_name(tk_cpu_detected()), tk_cpu_features());
    if (tk_cpu_detected() != TK_CPU_NEON) { printf("NEON not detected\n"); fails++; }
    static float w[M * K], x[T * K];
    static float ys[NTYPES][T * M], yn[NTYPES][T * M];
    static double mag[NTYPES][T * M];
    for (int i = 0; i < M * K; i++) w[i] = rnd();
    for (int i = 0; i < T * K; i++) x[i] = rnd();
    printf("level %s\n", tk_cpu_level_name(tk_cpu_set_level(TK_CPU_SCALAR)));
    fails += check_types(w, x, ys, mag);
    printf("level %s\n", tk_cpu_level_name(tk_cpu_set_level(TK_CPU_NEON)));
    fails += check_types(w, x, yn, mag);
    /* NEON against scalar: float reordering only */
    for (int ti = 0; ti < NTYPES; ti++) {
        double e = 0;
        for (int i = 0; i < T * M; i++) { double d = fabs((double) yn[ti][i] - ys[ti][i]) / mag[ti][i]; if (d > e) e = d; }
        printf("type %2d: NEON vs scalar %.2e of sum|wx|\n", types[ti], e);
        if (e > 1e-5) fails++;
    }
    enum { H = 4, P = 8, N = 16, G = 2, L = 150, DI = H * P, W = DI + 2 * G * N };
    static float xbc[L * W], dt[L * H], A[H], D[H], s1[H * P * N], s2[H * P * N], y1[L * DI], y2[L * DI];
    for (int i = 0; i < L * W; i++) xbc[i] = rnd();
    for (int i = 0; i < L * H; i++) dt[i] = log1pf(expf(rnd() - 3.0f));
    for (int h = 0; h < H; h++) { A[h] = -expf(fabsf(rnd()) * 2.0f); D[h] = rnd(); }
    for (int i = 0; i < H * P * N; i++) s1[i] = s2[i] = rnd() * 0.5f;
    tk_ssd_set_threshold(0);
    tk_ssm_mamba2_seq(s1, xbc, W, dt, H, A, D, L, H, P, N, G, y1, DI, 2);
    tk_ssd_set_threshold(1);
    tk_ssm_mamba2_seq(s2, xbc, W, dt, H, A, D, L, H, P, N, G, y2, DI, 2);
    double num = 0, den = 0;
    for (int i = 0; i < L * DI; i++) { num += (double) (y1[i] - y2[i]) * (y1[i] - y2[i]); den += (double) y1[i] * y1[i]; }
    printf("SSD vs recurrence: rel L2 %.2e\n", sqrt(num / den));
    if (sqrt(num / den) > 1e-6) fails++;
    printf("%s\n", fails ? "FAIL" : "OK");
    return fails != 0;
}
