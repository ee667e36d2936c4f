/* A SIGALRM handler interrupting a busy loop at the bottom of a call chain. Stopping in
 * handler_leaf() leaves the kernel's signal frame (returning to libc's __restore_rt, or the
 * vdso's sigreturn trampoline on aarch64) between the handler and the interrupted spin().
 *
 * Built with -DSIGNAL_CONTEXT, the handler takes the interrupted context (SA_SIGINFO) and
 * passes what its ucontext_t holds (the kernel's record of the interrupted frame, read through
 * the C library's own definition of the structure) to handler_leaf's arguments: a test stopped
 * at handler_leaf reads them in its registers (aarch64: x1-x4 the interrupted pc, sp, fp and
 * lr; 32-bit ARM: r1-r3 the pc, sp and r11, and lr on the stack).
 *
 * With -DRAW_SIGACTION too, the handler is installed by the rt_sigaction system call itself,
 * with no restorer of the C library's (no SA_RESTORER): it returns through the kernel's own
 * trampoline (32-bit ARM: the `[sigpage]`; qemu-user: a page of its own), in no module. */
#ifdef SIGNAL_CONTEXT
#define _GNU_SOURCE
#include <ucontext.h>
#endif
#ifdef RAW_SIGACTION
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile sig_atomic_t fired;
volatile int sink;

#ifdef SIGNAL_CONTEXT
volatile unsigned long context_sink;

NOINLINE int handler_leaf(int sig, unsigned long pc, unsigned long sp, unsigned long fp,
                          unsigned long lr)
{
    context_sink = pc ^ sp ^ fp ^ lr;
    return sig + 1;
}

NOINLINE void on_alarm(int sig, siginfo_t *info, void *context)
{
    const ucontext_t *uc = context;
    volatile int keep = sig;
    (void)info;
#if defined(__aarch64__)
    const mcontext_t *m = &uc->uc_mcontext;
    int r = handler_leaf(sig, m->pc, m->sp, m->regs[29], m->regs[30]);
#elif defined(__arm__)
    const mcontext_t *m = &uc->uc_mcontext;
    int r = handler_leaf(sig, m->arm_pc, m->arm_sp, m->arm_fp, m->arm_lr);
#elif defined(__x86_64__)
    const greg_t *g = uc->uc_mcontext.gregs;
    int r = handler_leaf(sig, g[REG_RIP], g[REG_RSP], g[REG_RBP], 0);
#else
    int r = handler_leaf(sig, 0, 0, 0, 0);
    (void)uc;
#endif
    fired = r + keep;
}
#else
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
#endif

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

#if defined(RAW_SIGACTION) && defined(SIGNAL_CONTEXT)
/* The kernel's struct sigaction (its rt_sigaction's, with sa_restorer). */
struct kernel_sigaction {
    void (*handler)(int, siginfo_t *, void *);
    unsigned long flags;
    void (*restorer)(void);
    unsigned int mask[2];
};
#endif

int main(void)
{
#if defined(RAW_SIGACTION) && defined(SIGNAL_CONTEXT)
    struct kernel_sigaction ksa = {on_alarm, SA_SIGINFO, 0, {0, 0}};
    syscall(SYS_rt_sigaction, SIGALRM, &ksa, NULL, sizeof ksa.mask);
#else
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
#ifdef SIGNAL_CONTEXT
    sa.sa_sigaction = on_alarm;
    sa.sa_flags = SA_SIGINFO;
#else
    sa.sa_handler = on_alarm;
#endif
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
#endif
    struct itimerval timer;
    memset(&timer, 0, sizeof timer);
    timer.it_value.tv_usec = 20000;
    setitimer(ITIMER_REAL, &timer, NULL);
    printf("%ld\n", depth(6));
    return 0;
}
