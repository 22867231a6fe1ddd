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

#define R12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define R24(M) R12(M) M(12) M(13) M(14) M(15) M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23)
/* the chains' values are used every round: the compiler keeps every FMA, in registers */
#define KEEP(T) __asm__ volatile("" ::T(a[0]), T(a[1]), T(a[2]), T(a[3]), T(a[4]), T(a[5]), \
    T(a[6]), T(a[7]), T(a[8]), T(a[9]), T(a[10]), T(a[11]))
#define KEEP24(T) KEEP(T); __asm__ volatile("" ::T(a[12]), T(a[13]), T(a[14]), T(a[15]), \
    T(a[16]), T(a[17]), T(a[18]), T(a[19]), T(a[20]), T(a[21]), T(a[22]), T(a[23]))

static volatile float sink;

static double fma256(long n) {
    __m256 a[12], b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-6f);
#define I256(k) a[k] = _mm256_set1_ps(1.0f + k);
    R12(I256)
    double t0 = now();
    for (long i = 0; i < n; i++) {
#define F256(k) a[k] = _mm256_fmadd_ps(a[k], b, c);
        R12(F256)
        KEEP("x");
    }
    double t = now() - t0;
    for (int k = 0; k < 12; k++) sink += a[k][0];
    return 12.0 * 8 * 2 * n / t / 1e9;
}

#ifdef __AVX512F__
static double fma512(long n) {
    __m512 a[24], b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-6f);
#define I512(k) a[k] = _mm512_set1_ps(1.0f + k);
    R24(I512)
    double t0 = now();
    for (long i = 0; i < n; i++) {
#define F512(k) a[k] = _mm512_fmadd_ps(a[k], b, c);
        R24(F512)
        KEEP24("v");
    }
    double t = now() - t0;
    for (int k = 0; k < 24; k++) sink += a[k][0];
    return 24.0 * 16 * 2 * n / t / 1e9;
}
#endif

#ifdef __AVX512BF16__
static double dpbf16(long n) {
    /* bf16 0x3f7f ~ 0.996 and 0x3380 ~ 6e-8: the sums grow slowly and stay finite */
    __m512 a[24];
    __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f7f), c = (__m512bh)_mm512_set1_epi16(0x3380);
#define IBF(k) a[k] = _mm512_set1_ps(1.0f + k);
    R24(IBF)
    double t0 = now();
    for (long i = 0; i < n; i++) {
#define FBF(k) a[k] = _mm512_dpbf16_ps(a[k], b, c);
        R24(FBF)
        KEEP24("v");
    }
    double t = now() - t0;
    for (int k = 0; k < 24; k++) sink += a[k][0];
    return 24.0 * 16 * 2 * 2 * n / t / 1e9; /* 16 lanes x 2 bf16 products x (mul + add) */
}
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
