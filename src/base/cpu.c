/*
 * cpu.c — the CPU-feature checks of cpu.h: the SIMD extensions
 * (__builtin_cpu_supports, once), and AMX: CPUID, XGETBV and, on Linux, the
 * one-time request for the tile data permission, cached in an atomic.
 *
 * Data: `features`, filled once under pthread_once.
 * Data: `avail` (-1 unknown, 0 no, 1 yes), written once by whichever thread asks
 * first (every thread computes the same answer); `enabled`, the switch of
 * cpu_amx_set() (starts on). cpu_amx_on() = avail && enabled.
 */
#include "base/cpu.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define CPUID7_EDX_AMX_BF16 (1u << 22)
#define CPUID7_EDX_AMX_TILE (1u << 24)
#define CPUID7_EDX_AMX_INT8 (1u << 25)
#define CPUID1_ECX_OSXSAVE (1u << 27)
#define CPUID1_ECX_F16C (1u << 29)
#define XCR0_TILECFG (1ull << 17)
#define XCR0_TILEDATA (1ull << 18)
#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux arch_prctl: request an XSAVE feature */
#define XFEATURE_XTILEDATA 18

static cpu_feature_set features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void features_detect(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    cpu_feature_set *f = &features;
    f->fma = __builtin_cpu_supports("fma");
    /* F16C from CPUID itself: clang's __builtin_cpu_supports does not know "f16c" */
    unsigned a, b, c, d;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & CPUID1_ECX_F16C);
    f->avx2 = __builtin_cpu_supports("avx2") && f->fma && f16c;
    f->avx512f = __builtin_cpu_supports("avx512f");
    f->avx512 =
        f->avx2 && f->avx512f && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    f->avx512_vnni = __builtin_cpu_supports("avx512vnni");
    f->avx512_bf16 = f->avx512f && __builtin_cpu_supports("avx512bf16");
#endif
}

const cpu_feature_set *cpu_features(void)
{
    pthread_once(&features_once, features_detect);
    return &features;
}

static _Atomic int avail = -1;
static _Atomic int enabled = 1;

static int detect(void)
{
#if defined(__linux__) && defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & CPUID1_ECX_OSXSAVE)) return 0;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned need = CPUID7_EDX_AMX_BF16 | CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_INT8;
    if ((d & need) != need) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    const unsigned long long xcr0 = ((unsigned long long)hi << 32) | lo;
    if ((xcr0 & (XCR0_TILECFG | XCR0_TILEDATA)) != (XCR0_TILECFG | XCR0_TILEDATA)) return 0;
    /* per process; asking again after a grant is harmless */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    return 1;
#else
    return 0;
#endif
}

int cpu_amx_available(void)
{
    int v = atomic_load_explicit(&avail, memory_order_acquire);
    if (v < 0) {
        v = detect();
        atomic_store_explicit(&avail, v, memory_order_release);
    }
    return v;
}

void cpu_amx_set(int on) { atomic_store_explicit(&enabled, on ? 1 : 0, memory_order_relaxed); }

int cpu_amx_on(void)
{
    /* switched off: not even the tile permission is asked for */
    return atomic_load_explicit(&enabled, memory_order_relaxed) && cpu_amx_available();
}
