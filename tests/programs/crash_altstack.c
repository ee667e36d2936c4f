/* A crash handler on an alternate signal stack (sigaltstack) that lies above the stack it
 * interrupted, as crash reporters' handlers (Breakpad's, Crashpad's, Rust's stack-overflow
 * guard) run: a thread stores through a NULL pointer a few calls deep, and its SIGSEGV handler,
 * on the alternate stack, reports and aborts. Past the kernel's signal frame the walk goes down
 * to the thread's own stack, so the stack pointer does not only grow along the stack.
 *
 * The alternate stack is mapped above the thread's stack on purpose (the kernel's allocator
 * would usually put it below): the program asks for places above it until it gets one, and
 * exits with status 2 if none is free. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))
#define ALT_SIZE (64 * 1024)

int *volatile target;
volatile int sink;

NOINLINE void report_crash(int sig)
{
    volatile int keep = sig;
    sink = keep;
    abort(); /* SIGABRT, raised on the alternate stack */
}

NOINLINE void on_segv(int sig)
{
    volatile int keep = sig;
    report_crash(sig);
    sink = keep;
}

NOINLINE int crash_here(int depth)
{
    *target = depth; /* SIGSEGV: target is NULL */
    return depth + 1;
}

NOINLINE int descend(int depth)
{
    volatile int keep = depth;
    int r = depth == 0 ? crash_here(depth) : descend(depth - 1);
    return r + keep;
}

/* A mapping above `above`, or NULL. */
static void *map_above(uintptr_t above)
{
    uintptr_t base = (above + (1 << 20)) & ~(uintptr_t)0xfffff;
    for (int i = 0; i < 4096; i++) {
        void *hint = (void *)(base + (uintptr_t)i * (1 << 20));
        void *p = mmap(hint, ALT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            continue;
        if ((uintptr_t)p > above)
            return p;
        munmap(p, ALT_SIZE);
    }
    return NULL;
}

static void *worker(void *arg)
{
    char here;
    void *alt = map_above((uintptr_t)&here);
    if (alt == NULL) {
        fprintf(stderr, "no room for an alternate stack above %p\n", (void *)&here);
        exit(2);
    }
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt;
    ss.ss_size = ALT_SIZE;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sink = descend(3);
    return arg;
}

int main(void)
{
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    pthread_join(thread, NULL);
    return 0;
}
