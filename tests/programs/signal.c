/* A SIGALRM handler interrupting a busy loop at the bottom of a call chain. Stopping in
 * handler_leaf() leaves the kernel's signal frame (returning to libc's __restore_rt, or the
 * vdso's sigreturn trampoline on aarch64) between the handler and the interrupted spin(). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile sig_atomic_t fired;
volatile int sink;

NOINLINE int handler_leaf(int sig)
{
    sink = sig;
    return sig + 1;
}

NOINLINE void on_alarm(int sig)
{
    volatile int keep = sig;
    int r = handler_leaf(sig);
    fired = r + keep;
}

/* A frameless leaf at -O2: the interrupted pc is somewhere in this loop. */
NOINLINE long spin(long n)
{
    while (!fired)
        n = n * 3 + 1;
    return n;
}

NOINLINE long depth(int d)
{
    volatile int keep = d;
    long r = d == 0 ? spin(d) : depth(d - 1);
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
    timer.it_value.tv_usec = 20000;
    setitimer(ITIMER_REAL, &timer, NULL);
    printf("%ld\n", depth(6));
    return 0;
}
