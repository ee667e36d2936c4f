/* perf workload for the SFrame tests: the time goes to functions of assorted frame shapes -- a
 * recursion, a frame of several KiB, a variable-length array (a frame pointer even at -O2), a
 * leaf -- so that samples land in prologues, bodies and epilogues alike. Argument: the rounds. */
#include <alloca.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile long sink;

NOINLINE long leaf(long x)
{
    long s = 0;
    for (long i = 0; i < 64; i++)
        s += (x ^ i) * 3;
    return s;
}

NOINLINE long big_frame(long x)
{
    volatile char buf[5000];
    memset((char *)buf, (int)(x & 0x7f), sizeof buf);
    return leaf(x + buf[x % (long)sizeof buf]);
}

NOINLINE long with_vla(long n)
{
    char vla[n];
    memset(vla, (int)(n & 0x7f), (size_t)n);
    return big_frame(vla[n - 1]) + vla[0];
}

NOINLINE long recurse(long depth, long x)
{
    if (depth == 0)
        return with_vla(16 + (x & 63));
    long r = recurse(depth - 1, x + 1);
    sink = r;
    return r + 1;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < rounds; i++)
        sink += recurse(i % 7, i);
    return 0;
}
