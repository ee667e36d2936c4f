/* A NULL store at the bottom of a call chain, built without any CFI for its own functions
 * (-fno-omit-frame-pointer -fno-asynchronous-unwind-tables -fno-unwind-tables): the frames
 * can only be found by following the frame-pointer chain. The leaf that crashes, a frame
 * with a big buffer, recursion, and main, whose caller is libc's (which has CFI).
 *
 * -DMODE selects damage done to the stack before the crash:
 *   0  none
 *   1  the frame record of damage() points at itself: the chain loops
 *   2  the frame record of damage() points below itself: the chain goes backwards
 *   3  damage() overruns a buffer over its saved fp and return address with garbage
 */
#include <stdio.h>
#include <string.h>

#ifndef MODE
#define MODE 0
#endif

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;
volatile int sink;
volatile size_t overrun = 0;

NOINLINE int crash_here(int x)
{
    *target = x; /* SIGSEGV: target is NULL */
    return x + 1;
}

NOINLINE int damage(int x)
{
    volatile long buf[4];
    void **fp = __builtin_frame_address(0);
    buf[0] = x;
    if (MODE == 1)
        fp[0] = fp;
    else if (MODE == 2)
        fp[0] = (char *)fp - 64;
    else if (MODE == 3)
        memset((char *)buf, 0x41, sizeof buf + overrun);
    int r = crash_here(buf[0]);
    sink = r;
    return r + 1;
}

NOINLINE int big_frame(int x)
{
    volatile char buf[3000];
    memset((char *)buf, x & 0x7f, sizeof buf);
    int r = damage(buf[x % (int)sizeof buf]);
    return r + buf[0];
}

NOINLINE int recurse(int depth, int n)
{
    volatile int keep = depth;
    int r = depth == 0 ? big_frame(n) : recurse(depth - 1, n + 1);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    /* Far enough to reach the saved fp and return address above buf[4] (whatever the
     * compiler puts between: the stack protector's canary, padding). */
    overrun = 64;
    printf("%d\n", recurse(3, argc));
    return 0;
}
