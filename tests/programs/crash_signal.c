/* A crash inside a signal handler: a SIGALRM timer interrupts a frameless busy loop at the
 * bottom of a recursion, and the handler stores through a NULL pointer two calls deep. The
 * stack crosses the kernel's signal frame (returning to libc's __restore_rt), and the frame
 * below it was interrupted, not calling: its pc must not be adjusted. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;
static volatile sig_atomic_t fired;
volatile int sink;

NOINLINE int crash_in_handler(int sig)
{
    *target = sig; /* SIGSEGV: target is NULL */
    return sig + 1;
}

NOINLINE void on_alarm(int sig)
{
    volatile int keep = sig;
    int r = crash_in_handler(sig);
    fired = r + keep;
}

/* A frameless leaf at -O2: the interrupted pc is somewhere in this loop. */
NOINLINE long spin(long n)
{
    while (!fired)
        n = n * 3 + 1;
    return n;
}

NOINLINE long descend(int d)
{
    volatile int keep = d;
    long r = d == 0 ? spin(d) : descend(d - 1);
    return r + keep;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval timer;
    memset(&timer, 0, sizeof timer);
    timer.it_value.tv_usec = 10000;
    setitimer(ITIMER_REAL, &timer, NULL);
    printf("%ld\n", descend(3));
    return 0;
}
