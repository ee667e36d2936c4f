/* A deep call chain with assorted frame shapes, stopped in stop_here().
 *
 * Built by the tests at -O2 -fomit-frame-pointer (CFA from rsp, callee-saved registers pushed,
 * rbp used as a general register), at -O0 (frame pointer everywhere), and with only
 * .debug_frame. Every caller reads a volatile local after its call, so no call is a tail call
 * and GCC cannot turn the recursion into a loop -- except recurse()'s depth-0 branch, a sibling
 * call (a jmp at -O2) on purpose: that frame is gone from the stack, and gdb's reconstruction of
 * it from DWARF call-site information (a "tail call frame") must not be expected of an unwinder.
 */
#include <alloca.h>
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE int stop_here(int x)
{
    sink = x;
    return x + 1;
}

/* A small frame. */
NOINLINE int small_frame(int x)
{
    volatile int keep = x;
    int r = stop_here(keep);
    return r + keep;
}

/* A frame of several KiB. */
NOINLINE int big_frame(int x)
{
    volatile char buf[6000];
    memset((char *)buf, x & 0x7f, sizeof buf);
    int r = small_frame(buf[x % (int)sizeof buf]);
    return r + buf[0];
}

/* A variable-length array: the frame size is only known at run time, so GCC keeps a frame
 * pointer here even at -O2. */
NOINLINE int with_vla(int n)
{
    char vla[n];
    memset(vla, n & 0x7f, (size_t)n);
    int r = big_frame(vla[n - 1]); /* BREAK:vla */
    return r + vla[0];
}

/* alloca: the stack pointer moves after the prologue. */
NOINLINE int with_alloca(int n)
{
    char *p = alloca((size_t)n * 16);
    memset(p, 1, (size_t)n * 16);
    int r = with_vla(n + p[n]);
    return r + p[0];
}

/* Recursion, ending in a sibling call at -O2. */
NOINLINE int recurse(int depth, int n)
{
    volatile int keep = depth;
    if (depth == 0)
        return with_alloca(n);
    int r = recurse(depth - 1, n + 1);
    return r + keep;
}

/* Many values live across the call, so callee-saved registers are spilled. */
NOINLINE int many_saved(int a, int b, int c, int d)
{
    int x = a * 3, y = b * 5, z = c * 7, w = d * 11, v = a ^ d, u = b ^ c;
    int r = recurse(5, a);
    volatile int keep = r;
    return keep + x + y + z + w + v + u;
}

int main(int argc, char **argv)
{
    (void)argv;
    int r = many_saved(argc, 2, 3, 4);
    printf("%d\n", r);
    return 0;
}
