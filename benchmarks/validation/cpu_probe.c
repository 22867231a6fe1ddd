/* The C probe of benchmarks/validation/cpu_peak_vs_probe.py: one core's clock and FMA
 * throughput, measured with code a compiler wrote (the suite's own clock comes from machine
 * code it maps itself, suite/cpuinfo.py).
 *
 *   cc -O2 -march=native -o cpu_probe cpu_probe.c && ./cpu_probe SECONDS
 *
 * clock: a chain of dependent register adds, one cycle each. FMA: independent chains of
 * vfmadd (256-bit: 12, in 12 of the 16 ymm registers; 512-bit where the compiler targets
 * AVX-512F: 24, in 24 of the 32 zmm registers) and of vdpbf16ps (24, where it targets
 * AVX512_BF16): enough chains to cover the latency on two pipes, so the rate is the pipes'
 * throughput (12 chains of vdpbf16ps read 116 FLOP/cycle on Zen 5, 24 read 128); FLOP per
 * cycle = rate / clock. Operands are non-zero and stay finite
 * (x * 0.999 + 1e-6). Prints one line of key=value pairs; "na" where not compiled. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define ADD4 "add %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\tadd %1,%0\n\t"
static double clock_ghz(long n) {
    long x = 0, one = 1;
    double t0 = now();
    for (long i = 0; i < n; i++) __asm__ volatile(ADD4 ADD4 ADD4 ADD4 : "+r"(x) : "r"(one));
    double t = now() - t0;
    if (x != 16 * n) abort();
    return 16.0 * n / t / 1e9;
}

/* CHAIN_RATE(name, vector type, its set1, register constraint, chains, b, c, op, FLOP per op):
 * a function of n timing n rounds of `chains` independent chains a[k] = op(a[k], b, c), each
 * started at 1 + k and kept in a register (the empty asm uses every value every round, so the
 * compiler drops no op), fully unrolled; it returns GFLOP/s. */
#define CHAIN_RATE(name, VEC, SET1, REG, CHAINS, B, C, OP, FLOP)                  \
    static double name(long n) {                                                   \
        VEC a[CHAINS];                                                             \
        for (int k = 0; k < CHAINS; k++) a[k] = SET1(1.0f + k);                    \
        double t0 = now();                                                         \
        for (long i = 0; i < n; i++) {                                             \
            _Pragma("GCC unroll 32") for (int k = 0; k < CHAINS; k++) {            \
                a[k] = OP(a[k], B, C);                                             \
                __asm__ volatile("" ::REG(a[k]));                                  \
            }                                                                      \
        }                                                                          \
        double t = now() - t0;                                                     \
        for (int k = 0; k < CHAINS; k++) sink += a[k][0];                          \
        return (double)CHAINS * FLOP * n / t / 1e9;                                \
    }

static volatile float sink;

/* 8 lanes x (mul + add); 12 chains in 12 of the 16 ymm registers */
CHAIN_RATE(fma256, __m256, _mm256_set1_ps, "x", 12, _mm256_set1_ps(0.999f),
           _mm256_set1_ps(1e-6f), _mm256_fmadd_ps, 8 * 2)
#ifdef __AVX512F__
/* 16 lanes x (mul + add); 24 chains in 24 of the 32 zmm registers */
CHAIN_RATE(fma512, __m512, _mm512_set1_ps, "v", 24, _mm512_set1_ps(0.999f),
           _mm512_set1_ps(1e-6f), _mm512_fmadd_ps, 16 * 2)
#endif
#ifdef __AVX512BF16__
/* 16 lanes x 2 bf16 products x (mul + add); bf16 0x3f7f ~ 0.996 and 0x3380 ~ 6e-8: the sums
 * grow slowly and stay finite */
CHAIN_RATE(dpbf16, __m512, _mm512_set1_ps, "v", 24, (__m512bh)_mm512_set1_epi16(0x3f7f),
           (__m512bh)_mm512_set1_epi16(0x3380), _mm512_dpbf16_ps, 16 * 2 * 2)
#endif

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.2;
    /* calibrate each loop to about `seconds` */
    long nc = 1000000, nf = 1000000;
    double t = now(); clock_ghz(nc); nc = (long)(nc * seconds / (now() - t)) + 1;
    t = now(); fma256(nf); nf = (long)(nf * seconds / (now() - t)) + 1;
    double g0 = clock_ghz(nc), f256 = fma256(nf);
    printf("clock_ghz=%.4f fma256_gflops=%.3f", g0, f256);
#ifdef __AVX512F__
    printf(" fma512_gflops=%.3f", fma512(nf / 2));
#else
    printf(" fma512_gflops=na");
#endif
#ifdef __AVX512BF16__
    printf(" dpbf16_gflops=%.3f", dpbf16(nf / 2));
#else
    printf(" dpbf16_gflops=na");
#endif
    printf(" clock_after_ghz=%.4f\n", clock_ghz(nc));
    return 0;
}
