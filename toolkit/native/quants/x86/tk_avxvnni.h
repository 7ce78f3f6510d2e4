/* tk_avxvnni.h: what the AVX-VNNI kernel file (qdot_avxvnni.c) includes instead of
 * <immintrin.h> directly, its target attribute and its two VNNI instructions.
 *
 * Normal builds: <immintrin.h> (through tk_cpu.h); TK_AVXVNNI_TARGET = the AVX2 set plus
 * "avxvnni" (the VEX-encoded vpdpbusd / vpdpwssd on 128/256 bits; gcc >= 11, clang >= 12),
 * TK_AVXVNNI_INLINE = static inline, always inlined.  The type table hands these kernels
 * out only at TK_CPU_AVX2 where cpu.c found AVX-VNNI (tk_cpu_avxvnni; ggml_types.c).
 *   TK_DPBUSD256(src, u, s): src + per int32 lane the sum of the 4 products u8 * s8
 *                            (_mm256_dpbusd_avx_epi32; no saturation, wraps like vpaddd)
 *   TK_DPWSSD256(src, a, b): src + per int32 lane the sum of the 2 products i16 * i16
 *                            (_mm256_dpwssd_avx_epi32; no saturation)
 * Intel SDM vol. 2 VPDPBUSD / VPDPWSSD (the VEX forms have the EVEX forms' semantics).
 *
 * Test builds with -DTK_EMULATE_AVXVNNI (tests/unit/test_avx512_emulated.py, on machines
 * without AVX-VNNI): the AVX-512 emulation of tk_avx512.h, whose SIMDe (0.7.4, Debian's
 * libsimde-dev) replaces <immintrin.h> and whose fused multiply-adds round once as the
 * instruction does; the two instructions are SIMDe's simde_mm256_dpbusd_epi32 /
 * simde_mm256_dpwssd_epi32, the AVX512VL + VNNI forms with the same semantics (SIMDe 0.7.4
 * has no _avx_ names); the target attribute is empty, so the object holds no VEX or EVEX
 * VNNI instruction (the test checks with objdump).
 */
#ifndef TK_AVXVNNI_H
#define TK_AVXVNNI_H

#if defined(TK_EMULATE_AVXVNNI) && !defined(TK_EMULATE_AVX512)
#define TK_EMULATE_AVX512   /* the same SIMDe build as the AVX-512 kernels' (tk_avx512.h) */
#endif
#include "quants/x86/tk_avx512.h"

#ifdef TK_EMULATE_AVX512
#define TK_AVXVNNI_TARGET
#define TK_AVXVNNI_INLINE static
#define TK_DPBUSD256(src, u, s) simde_mm256_dpbusd_epi32((src), (u), (s))
#define TK_DPWSSD256(src, a, b) simde_mm256_dpwssd_epi32((src), (a), (b))
#else
#define TK_AVXVNNI_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define TK_AVXVNNI_INLINE static inline __attribute__((always_inline))
#define TK_DPBUSD256(src, u, s) _mm256_dpbusd_avx_epi32((src), (u), (s))
#define TK_DPWSSD256(src, a, b) _mm256_dpwssd_avx_epi32((src), (a), (b))
#endif

#endif
