/* A workload for `stackwalk perf` (test_perf.py) that spends much of its time in a signal
 * handler: a profiling timer every millisecond of CPU time, whose handler spins for a while
 * before it returns through the signal trampoline (glibc's __restore_rt) to the loop it
 * interrupted. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

volatile unsigned long sink;

NOINLINE void spin_in_handler(void)
{
    for (int i = 0; i < 2000000; i++)
        sink += (unsigned long)i * 3;
}

NOINLINE void on_prof(int sig)
{
    spin_in_handler();
    sink += (unsigned long)sig;
}

NOINLINE void main_loop(void)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 100000; i++)
            sink ^= (unsigned long)i;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec)
             < 1000000000L);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval timer = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_PROF, &timer, NULL);
    main_loop();
    return 0;
}
