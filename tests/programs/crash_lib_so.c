/* libcrashlib.so for crash_lib.c: lib_entry() recurses, then stores through a NULL pointer.
 *
 * Built twice by the tests: as is, and with -DREBUILT (another build id, extra code in front
 * that moves every function, and -- with -fno-asynchronous-unwind-tables -g0 -- no CFI at all),
 * to stand for "the library on this machine is not the one the crashed process loaded". */
#define NOINLINE __attribute__((noinline, noclone))

int *volatile lib_target;
volatile int lib_sink;

#ifdef REBUILT
NOINLINE int rebuilt_padding(int x)
{
    int total = 0;
    for (int i = 0; i < x; i++)
        total += i * x + lib_sink;
    return total;
}
#endif

NOINLINE int lib_crash(int x)
{
    *lib_target = x; /* SIGSEGV: lib_target is NULL */
    return x + 1;
}

NOINLINE int lib_recurse(int depth)
{
    volatile int keep = depth;
    int r = depth == 0 ? lib_crash(keep) : lib_recurse(depth - 1);
    return r + keep;
}

int lib_entry(int depth)
{
    volatile int keep = depth;
    int r = lib_recurse(depth);
    return r + keep;
}
