/* perf workload: four threads busy at different depths (descend() recursing 1, 4, 7 and 10
 * levels deep before it spins) while main() spins too. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))
#define THREADS 4

static long iterations;

NOINLINE static long spin(long seed)
{
    unsigned long x = (unsigned long)seed | 1;
    for (long i = 0; i < iterations; i++)
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    return (long)(x >> 33);
}

NOINLINE static long descend(int depth, long seed)
{
    volatile long keep = seed;
    if (depth == 0)
        return spin(seed);
    return descend(depth - 1, seed + depth) + keep;
}

static void *worker(void *arg)
{
    long index = (long)arg;
    return (void *)descend(1 + 3 * (int)index, index);
}

int main(int argc, char **argv)
{
    iterations = argc > 1 ? atol(argv[1]) : 80000000;
    pthread_t threads[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *)i);
    long total = spin(99);
    for (int i = 0; i < THREADS; i++) {
        void *result;
        pthread_join(threads[i], &result);
        total += (long)result;
    }
    printf("%ld\n", total);
    return 0;
}
