/* perf workload: busy in the executable, then dlopen()s the library named by argv[1] midway (its
 * mmap events arrive during the recording) and spends the rest of its time inside it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))

/* Written by before(), so that the compiler cannot move the call past dlopen(). */
volatile unsigned long sink;

NOINLINE static unsigned long before(long n)
{
    unsigned long x = 1;
    for (long i = 0; i < n; i++)
        x = x * 2862933555777941757ul + 3037000493ul;
    sink = x;
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIBRARY [ITERATIONS]\n", argv[0]);
        return 2;
    }
    long n = argc > 2 ? atol(argv[2]) : 150000000;
    unsigned long check = before(n);
    void *library = dlopen(argv[1], RTLD_NOW);
    if (library == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    unsigned long (*work)(long) = (unsigned long (*)(long))dlsym(library, "plugin_work");
    if (work == NULL) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    check += work(n);
    printf("%lu\n", check);
    return 0;
}
