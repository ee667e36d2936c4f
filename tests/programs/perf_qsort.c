/* perf workload: most of the time goes to libc's qsort() (its merge sort, msort_with_tmp, calls
 * the comparator through a function pointer), the rest to filling the array in main(). Built at
 * -O2 -fomit-frame-pointer, so unwinding must use the CFI. */
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))

NOINLINE static int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

NOINLINE static void fill(int *values, int n, int round)
{
    for (int i = 0; i < n; i++)
        values[i] = (int)(((unsigned)i * 2654435761u + (unsigned)round) % (unsigned)n);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 30;
    enum { N = 200000 };
    int *values = malloc(N * sizeof *values);
    long check = 0;
    for (int round = 0; round < rounds; round++) {
        fill(values, N, round);
        qsort(values, N, sizeof *values, compare_ints);
        check += values[N / 2];
    }
    printf("%ld\n", check);
    free(values);
    return 0;
}
