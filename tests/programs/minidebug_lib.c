/* libminidebug.so for minidebug_main.c: an exported entry, then two static functions; the
 * innermost stores through a NULL pointer, or (the program's argument count x above 1) spins
 * for (x - 1) * 300 million iterations first, and returns. */
#define NOINLINE __attribute__((noinline, noclone))

int *volatile minidebug_target;
volatile long minidebug_sink;

static NOINLINE int lib_static_leaf(int x)
{
    if (x > 1) {
        for (long i = 0; i < (x - 1) * 300000000L; i++)
            minidebug_sink++;
        return x;
    }
    *minidebug_target = x; /* SIGSEGV: minidebug_target is NULL */
    return x + 1;
}

static NOINLINE int lib_static_middle(int x)
{
    volatile int keep = x;
    int r = lib_static_leaf(keep);
    return r + keep;
}

NOINLINE int minidebug_lib_entry(int x)
{
    volatile int keep = x;
    int r = lib_static_middle(keep);
    return r + keep;
}
