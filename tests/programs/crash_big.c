/* A crash with a large core: argv[1] MiB of heap written (so that every page is in the core),
 * then a store through a NULL pointer two calls deep. With 0 MiB, a small crash (the crash
 * storm of tests/test_collect.py). */
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;

NOINLINE void crash_here(int value)
{
    *target = value;
}

NOINLINE void fill_and_crash(size_t mib)
{
    char *block = NULL;
    if (mib > 0) {
        block = malloc(mib << 20);
        if (block == NULL)
            abort();
        memset(block, 0x5a, mib << 20);
    }
    crash_here(block != NULL ? block[mib] : 1);
    __asm__ volatile("");
}

int main(int argc, char **argv)
{
    fill_and_crash(argc > 1 ? strtoul(argv[1], NULL, 10) : 0);
    return 0;
}
