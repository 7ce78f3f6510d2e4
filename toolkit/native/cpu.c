/* cpu.c: run-time choice of the kernel level (scalar / AVX2 / AVX-512 with VNNI on x86-64, scalar /
 * NEON on aarch64) and of the sub-features within a level (AVX-VNNI at avx2, AVX512_BF16 at
 * avx512).
 *
 * A level needs both the CPU's instructions (cpuid) and the OS's promise to save the
 * registers they use across context switches (XCR0 read with xgetbv, valid only when
 * cpuid.1:ECX.OSXSAVE is set): a CPU can advertise AVX-512 under an OS or hypervisor that
 * does not enable ZMM state, and executing it there raises #UD.  AMX (whose tile state
 * also needs a per-process arch_prctl permission on Linux) is never used.
 * refs: Intel SDM vol. 1 sec. 13.3 / 14.3 / 15.2 ("Detection of ... support"); vol. 2 CPUID.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define TK_CPUID 1
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

static int g_detected = TK_CPU_SCALAR;
static int g_level = TK_CPU_SCALAR;
static int g_bf16 = 0;     /* AVX512_BF16 + OS ZMM state */
static int g_avxvnni = 0;  /* AVX-VNNI + the AVX2 level (OS YMM state) */
static int g_avxvnni_on = 0;   /* its kernels wanted (TOOLKIT_CPU=avx2-novnni, tk_cpu_set_avxvnni: off) */
static int g_amd = 0;      /* cpuid vendor AuthenticAMD */
static int g_bf16dot_on = 0;   /* the repacked BF16 GEMM on VDPBF16PS (else FMA on widened weights) */
static char g_features[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void add_feature(const char * name) {
    size_t n = strlen(g_features);
    if (n + strlen(name) + 2 >= sizeof g_features) return;
    if (n) g_features[n++] = ' ';
    strcpy(g_features + n, name);
}

#ifdef TK_CPUID
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t) hi << 32) | lo;
}
#endif

static int detect(void) {
    int level = TK_CPU_SCALAR;
#ifdef TK_CPUID
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return level;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    unsigned b7 = 0, c7 = 0, a71 = 0;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d);
        __cpuid_count(7, 1, a71, b, c, d);
    }
    const int avx2 = (b7 >> 5) & 1, avx512f = (b7 >> 16) & 1, avx512bw = (b7 >> 30) & 1;
    const int avx512vl = (b7 >> 31) & 1, vnni = (c7 >> 11) & 1, bf16 = (a71 >> 5) & 1;
    const int avxvnni = (a71 >> 4) & 1;                /* VEX-encoded vpdpbusd / vpdpwssd on ymm */
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    const int os_ymm = (xcr0 & 0x6) == 0x6;          /* SSE + AVX state */
    const int os_zmm = (xcr0 & 0xe6) == 0xe6;        /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (avx) add_feature("avx");
    if (avx2) add_feature("avx2");
    if (fma) add_feature("fma");
    if (f16c) add_feature("f16c");
    if (avxvnni) add_feature("avxvnni");
    if (avx512f) add_feature("avx512f");
    if (avx512bw) add_feature("avx512bw");
    if (avx512vl) add_feature("avx512vl");
    if (vnni) add_feature("avx512vnni");
    if (bf16) add_feature("avx512bf16");
    if (os_ymm) add_feature("os-ymm");
    if (os_zmm) add_feature("os-zmm");
    if (avx && avx2 && fma && f16c && os_ymm) level = TK_CPU_AVX2;
    if (level == TK_CPU_AVX2 && avx512f && avx512bw && avx512vl && vnni && os_zmm) level = TK_CPU_AVX512;
    g_bf16 = level == TK_CPU_AVX512 && bf16;
    g_avxvnni = level >= TK_CPU_AVX2 && avxvnni;     /* needs only the YMM state of the AVX2 level */
#endif
#if defined(__aarch64__) && defined(TK_HAVE_NEON)
#if defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP);
    const int asimd = (hw & HWCAP_ASIMD) != 0;
    if (hw & HWCAP_ASIMDDP) add_feature("asimddp");
#else
    const int asimd = 1;       /* part of every AArch64 CPU */
#endif
    if (asimd) {
        add_feature("asimd");
        level = TK_CPU_NEON;
    }
#endif
    if (!g_features[0]) add_feature("none");
    return level;
}

/* The level in force when `want` is asked for: on x86-64 an x86-64 level, at most the
 * detected one; on aarch64 NEON when asked for and detected; anything else scalar. */
static int clamp_level(int want) {
#if defined(__aarch64__)
    return want == TK_CPU_NEON && g_detected == TK_CPU_NEON ? TK_CPU_NEON : TK_CPU_SCALAR;
#else
    if (want < TK_CPU_SCALAR || want > TK_CPU_AVX512) return TK_CPU_SCALAR;   /* not an x86-64 level */
    return want > g_detected ? g_detected : want;
#endif
}

/* Which instruction the repacked BF16 GEMM runs on (repack.h, x86/repack_bf16_avx512.c).
 * Measured with a register-bound loop of 12 independent chains: on this project's Intel Xeon
 * (Sapphire Rapids class) one zmm VDPBF16PS (32 multiply-adds) issues every 0.60 ns and one
 * zmm VFMADD231PS (16) every 0.149 ns, so FMA on widened bf16 does twice the work per cycle; on
 * AMD Zen 4 both issue once per cycle (512-bit ops on two 256-bit pipes), so VDPBF16PS does
 * twice FMA's.  So: VDPBF16PS on AMD, FMA elsewhere (the process default; a model's
 * tk_model_params.bf16_gemm, the CLI's TOOLKIT_BF16_GEMM, chooses for its weights). */
static void choose_bf16_gemm(void) {
#ifdef TK_CPUID
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) g_amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
#endif
    g_bf16dot_on = g_bf16 && g_amd;
}

/* The library reads no environment: TOOLKIT_CPU is applied by its caller (toolkit.binding.cpu)
 * through tk_cpu_set_level and tk_cpu_set_avxvnni. */
static void init(void) {
    g_detected = detect();
    g_level = g_detected;
    g_avxvnni_on = g_avxvnni;
    choose_bf16_gemm();
}

int tk_cpu_level(void) {
    pthread_once(&g_once, init);
    return __atomic_load_n(&g_level, __ATOMIC_RELAXED);
}

int tk_cpu_detected(void) {
    pthread_once(&g_once, init);
    return g_detected;
}

int tk_cpu_set_level(int level) {
    pthread_once(&g_once, init);
    level = clamp_level(level);
    __atomic_store_n(&g_level, level, __ATOMIC_RELAXED);
    return level;
}

int tk_cpu_has_avx512bf16(void) {
    pthread_once(&g_once, init);
    return g_bf16;
}

int tk_cpu_has_avxvnni(void) {
    pthread_once(&g_once, init);
    return g_avxvnni;
}

int tk_cpu_set_avxvnni(int on) {
    pthread_once(&g_once, init);
    __atomic_store_n(&g_avxvnni_on, on && g_avxvnni, __ATOMIC_RELAXED);
    return g_avxvnni_on;
}

int tk_cpu_set_bf16dot(int on) {
    pthread_once(&g_once, init);
    __atomic_store_n(&g_bf16dot_on, on && g_bf16, __ATOMIC_RELAXED);
    return g_bf16dot_on;
}

int tk_cpu_bf16dot(void) {
    pthread_once(&g_once, init);
    return __atomic_load_n(&g_bf16dot_on, __ATOMIC_RELAXED);
}

int tk_cpu_avxvnni(void) {
    pthread_once(&g_once, init);
    return __atomic_load_n(&g_avxvnni_on, __ATOMIC_RELAXED);
}

const char * tk_cpu_level_name(int level) {
    switch (level) {
        case TK_CPU_SCALAR: return "scalar";
        case TK_CPU_AVX2: return "avx2";
        case TK_CPU_AVX512: return "avx512";
        case TK_CPU_NEON: return "neon";
        default: return "?";
    }
}

const char * tk_cpu_features(void) {
    pthread_once(&g_once, init);
    return g_features;
}
