/* stackwalk's demo program: a chain of calls, built at -O2 -fomit-frame-pointer (no frame
 * pointers: only CFI can unwind it), that goes through libc's qsort into a comparator and
 * stops in demo_stop(). */
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

volatile int demo_sink;

NOINLINE void demo_stop(int depth) { demo_sink = depth; }

static int compare(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (x == 3 || y == 3)
        demo_stop(x + y);
    return (x > y) - (x < y);
}

NOINLINE int sort_numbers(int n)
{
    int v[8] = {5, 1, 4, 3, 8, 2, 7, 6};
    qsort(v, (size_t)(n < 8 ? n : 8), sizeof v[0], compare);
    return v[0];
}

NOINLINE int recurse(int depth, int n)
{
    volatile int pad[depth + 4];
    pad[0] = depth;
    int r = depth > 0 ? recurse(depth - 1, n) : sort_numbers(n);
    return r + pad[0];
}

int main(int argc, char **argv)
{
    (void)argv;
    return recurse(3 + argc, 8) & 1;
}
