/* qsort() with a comparator: stopping in compare_ints() leaves libc's sort internals
 * (qsort -> qsort_r -> the recursive merge sort) between main and the comparator. */
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE int compare_ints(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    sink = x;
    return (x > y) - (x < y);
}

int main(void)
{
    enum { N = 1000 };
    static int values[N];
    for (int i = 0; i < N; i++)
        values[i] = (i * 7919) % N;
    qsort(values, N, sizeof values[0], compare_ints);
    printf("%d %d\n", values[0], values[N - 1]);
    return 0;
}
