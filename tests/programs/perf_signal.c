/* A workload for `stackwalk perf` (test_perf.py) that spends much of its time in a signal
 * handler: a profiling timer every millisecond of CPU time, whose handler spins for a while
 * before it returns through the signal trampoline (glibc's __restore_rt) to the loop it
 * interrupted.
 *
 * The kernel fires the timer at most once a tick (1-4 ms): the handler's spin, SPIN_NS of CPU
 * time, leaves the loop time to run. The run lasts until the handler has run HANDLED times,
 * however long that takes: the CPU time spent in the handler, which is what the tests count
 * samples of, is then the same on a loaded machine as on an idle one, and on a fast machine as
 * on a slow one (a run of a fixed CPU time, with a spin of a fixed count, saw a third of the
 * handler's samples on a loaded machine, where the timer fired less often, and fewer again on a
 * faster one). The handler stops the timer then, so that a machine slow enough for
 * the handler to outlast a tick does not keep a new signal waiting at every return; and
 * MAX_RUN_NS of CPU time ends the run whatever happens. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))
#define HANDLED 400
#define SPIN_NS 500000L
#define MAX_RUN_NS 30000000000L

volatile unsigned long sink;
static volatile int handled;
static struct timespec start;

static long elapsed_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec);
}

NOINLINE void spin_in_handler(void)
{
    long until = elapsed_ns() + SPIN_NS;
    do {
        for (int i = 0; i < 20000; i++)
            sink += (unsigned long)i * 3;
    } while (elapsed_ns() < until);
}

NOINLINE void on_prof(int sig)
{
    spin_in_handler();
    sink += (unsigned long)sig;
    if (++handled >= HANDLED || elapsed_ns() >= MAX_RUN_NS) {
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
    }
}

NOINLINE void main_loop(void)
{
    do {
        for (int i = 0; i < 100000; i++)
            sink ^= (unsigned long)i;
    } while (handled < HANDLED && elapsed_ns() < MAX_RUN_NS);
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
