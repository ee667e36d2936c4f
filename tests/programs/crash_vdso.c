/* A crash inside the vdso: clock_gettime() with a pointer the vdso's code cannot write to
 * faults in the kernel-supplied image, whose CFI exists only in the process's memory. Before
 * that, a second thread calls clock_gettime() in a tight loop; it is stopped wherever it is
 * when the main thread crashes (usually inside the vdso too). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile int started;
struct timespec *volatile bad_pointer = (struct timespec *)16;
volatile long sink;

NOINLINE long read_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_nsec;
}

NOINLINE void *poll_clock(void *arg)
{
    (void)arg;
    for (;;) {
        sink += read_clock();
        started = 1;
    }
    return NULL;
}

NOINLINE long crash_in_vdso(int n)
{
    volatile int keep = n;
    clock_gettime(CLOCK_MONOTONIC, bad_pointer); /* SIGSEGV inside the vdso */
    return keep;
}

int main(void)
{
    pthread_t thread;
    pthread_create(&thread, NULL, poll_clock, NULL);
    while (!started)
        ;
    struct timespec pause = {0, 20000000};
    nanosleep(&pause, NULL);
    printf("%ld\n", crash_in_vdso(1));
    return 0;
}
