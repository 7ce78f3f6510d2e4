/* aarch64 smoke test under qemu-user: mat_mul vs a double reference, SSD vs recurrence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "toolkit.h"
#include "tk_cpu.h"
#include "qdot.h"
static float rnd(void) { return (float) rand() / RAND_MAX * 2.0f - 1.0f; }
int main(void) {
    int fails = 0;
    printf("level %s features %s\n", tk_cpu_level_name(tk_cpu_level()), tk_cpu_features());
    enum { K = 256, M = 7, T = 5 };
    static float w[M * K], x[T * K], y[T * M], wd[M * K];
    for (int i = 0; i < M * K; i++) w[i] = rnd();
    for (int i = 0; i < T * K; i++) x[i] = rnd();
    int types[] = {0, 8, 12, 14};
    for (int ti = 0; ti < 4; ti++) {
        int ty = types[ti];
        int64_t rs = tk_quant_row_size(ty, K);
        unsigned char * q = malloc((size_t) rs * M);
        if (ty == 0) { for (int i = 0; i < M * K; i++) ((float *) q)[i] = w[i]; }
        else if (tk_quantize_rows(ty, w, q, M, K, 1) != TK_OK) { printf("quantize %d failed\n", ty); return 1; }
        if (ty == 0) for (int i = 0; i < M * K; i++) wd[i] = w[i];
        else tk_dequantize_rows(ty, q, wd, M, K, 1);
        if (tk_mat_mul(ty, q, K, M, x, T, y) != TK_OK) { printf("mat_mul failed\n"); return 1; }
        /* quantized weights take the integer path: x as the kernel sees it (qdot.h) */
        static float xs[T * K];
        for (int t = 0; t < T; t++) {
            if (ty == 8) {
                blk_q8_0 b[K / 32];
                tk_quantize_act_q8_0(x + t * K, b, K);
                for (int k = 0; k < K; k++) xs[t * K + k] = tkq_fp16_to_fp32(b[k / 32].d) * b[k / 32].qs[k % 32];
            } else if (ty == 12 || ty == 14) {
                blk_q8_K b[K / 256];
                tk_quantize_act_q8_K(x + t * K, b, K);
                for (int k = 0; k < K; k++) xs[t * K + k] = b[k / 256].d * b[k / 256].qs[k % 256];
            } else {
                for (int k = 0; k < K; k++) xs[t * K + k] = x[t * K + k];
            }
        }
        double maxerr = 0;
        for (int t = 0; t < T; t++) for (int r = 0; r < M; r++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) { s += (double) wd[r * K + k] * xs[t * K + k]; a += fabs((double) wd[r * K + k] * xs[t * K + k]); }
            double e = fabs(y[t * M + r] - s) / a;
            if (e > maxerr) maxerr = e;
        }
        printf("type %2d: max |err| / sum|wx| = %.2e\n", ty, maxerr);
        if (maxerr > 1e-5) fails++;
        free(q);
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
