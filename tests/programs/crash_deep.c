/* A NULL store at the bottom of a deep call chain, for core-file tests.
 *
 * Built at -O2 -fomit-frame-pointer: frames whose CFA is rsp-based, callee-saved registers
 * pushed, a big frame, recursion. Every caller reads a volatile after its call, so no call is a
 * tail call. The store's target comes from a volatile pointer, so GCC cannot prove it NULL and
 * replace the store by a trap. -DDEPTH=N sets how deep the recursion goes (default 4); with
 * -DABORT, crash_here sleeps a nanosecond, then calls abort() instead (SIGABRT, raised inside
 * libc): the sleep's calls leave their return addresses on the stack where abort's run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

#ifndef DEPTH
#define DEPTH 4
#endif

int *volatile target;
volatile int sink;

NOINLINE int crash_here(int x)
{
#ifdef ABORT
    if (x != -1) {
        struct timespec nap = {0, 1};
        nanosleep(&nap, NULL);
        abort();
    }
#else
    *target = x; /* SIGSEGV: target is NULL */
#endif
    return x + 1;
}

NOINLINE int small_frame(int x)
{
    volatile int keep = x;
    int r = crash_here(keep);
    return r + keep;
}

NOINLINE int big_frame(int x)
{
    volatile char buf[5000];
    memset((char *)buf, x & 0x7f, sizeof buf);
    int r = small_frame(buf[x % (int)sizeof buf]);
    return r + buf[0];
}

NOINLINE int recurse(int depth, int n)
{
    volatile int keep = depth;
    int r = depth == 0 ? big_frame(n) : recurse(depth - 1, n + 1);
    return r + keep;
}

NOINLINE int many_saved(int a, int b, int c, int d)
{
    int x = a * 3, y = b * 5, z = c * 7, w = d * 11, v = a ^ d, u = b ^ c;
    int r = recurse(DEPTH, a);
    volatile int keep = r;
    return keep + x + y + z + w + v + u;
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", many_saved(argc, 2, 3, 4));
    return 0;
}
