/* A loop calling clock_gettime(), which glibc forwards to the vdso: a breakpoint on the vdso's
 * clock_gettime stops with frame 0 in the kernel-supplied image, whose CFI exists only in
 * the process's memory. */
#include <stdio.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

NOINLINE long read_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_nsec;
}

NOINLINE long poll_clock(int rounds)
{
    volatile long total = 0;
    for (int i = 0; i < rounds; i++)
        total += read_clock();
    return total;
}

int main(void)
{
    printf("%ld\n", poll_clock(1000) > 0);
    return 0;
}
