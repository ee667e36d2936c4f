/* A workload for `stackwalk perf` (test_perf.py) that spends much of its time in a signal
 * handler: a profiling timer every millisecond of CPU time, whose handler spins for a while
 * before it returns through the signal trampoline (glibc's __restore_rt) to the loop it
 * interrupted.
 *
 * The kernel fires the timer at most once a tick (1-4 ms): the handler's spin (some 0.3-0.6
 * ms on this project's machines) leaves the loop time to run. On a machine slow enough for the
 * handler to outlast a tick, a new signal would wait at every return and the loop would never
 * run again, so the handler also stops the timer once the run's time is up. The run's time is
 * the process's CPU time, not the wall clock's: a loaded machine gives the program less of the
 * CPU in a second, and the test would then see fewer samples in the handler. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))
#define RUN_NS 1000000000L

volatile unsigned long sink;
static struct timespec start;

static long elapsed_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec);
}

NOINLINE void spin_in_handler(void)
{
    for (int i = 0; i < 200000; i++)
        sink += (unsigned long)i * 3;
}

NOINLINE void on_prof(int sig)
{
    spin_in_handler();
    sink += (unsigned long)sig;
    if (elapsed_ns() >= RUN_NS) {
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
    }
}

NOINLINE void main_loop(void)
{
    do {
        for (int i = 0; i < 100000; i++)
            sink ^= (unsigned long)i;
    } while (elapsed_ns() < RUN_NS);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    struct itimerval timer = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_PROF, &timer, NULL);
    main_loop();
    return 0;
}
