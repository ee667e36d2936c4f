/* The library perf_dlopen.c loads midway: plugin_work() spends its time two frames down. */
#define NOINLINE __attribute__((noinline, noclone))

NOINLINE static unsigned long mix(unsigned long x, long n)
{
    for (long i = 0; i < n; i++)
        x = (x ^ (x >> 13)) * 0x9e3779b97f4a7c15ul + (unsigned long)i;
    return x;
}

NOINLINE static unsigned long middle(long n)
{
    volatile unsigned long keep = (unsigned long)n;
    return mix(keep, n) + keep;
}

unsigned long plugin_work(long n)
{
    return middle(n / 2) + middle(n - n / 2);
}
