/* A crash handler on an alternate signal stack (sigaltstack) that lies above the stack it
 * interrupted, as crash reporters' handlers (Breakpad's, Crashpad's, Rust's stack-overflow
 * guard) run: a thread stores through a NULL pointer a few calls deep, and its SIGSEGV handler,
 * on the alternate stack, reports and aborts. Past the kernel's signal frame the walk goes down
 * to the thread's own stack, so the stack pointer does not only grow along the stack.
 *
 * The alternate stack is mapped above the thread's stack on purpose (the kernel's allocator
 * would usually put it below): the program asks for places above it until it gets one, and
 * exits with status 2 if none is free.
 *
 * With -DOVERFLOW, the main thread overflows its stack instead, recursing until it reaches
 * the guard page, and the handler runs on a small alternate stack the kernel's allocator
 * places below the main stack (as Rust's runtime handles every stack overflow): the stack the
 * walk goes on past the signal frame holds many times the frames the handler's can. */
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
/* Set once pthread_create has returned: the worker crashes only when the main thread is
 * waiting in pthread_join, not still inside clone. */
volatile int created;

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

/* SIGSEGV handled by on_segv on the alternate stack [alt, alt + size). */
static void handle_on(void *alt, size_t size)
{
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt;
    ss.ss_size = size;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
}

static void *map(void *hint, size_t size)
{
    return mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

#ifdef OVERFLOW
#define SMALL_ALT (8 * 1024)

NOINLINE int overflow(int depth)
{
    volatile char frame[256];
    frame[depth % sizeof frame] = (char)depth;
    return overflow(depth + 1) + frame[0];
}

int main(void)
{
    handle_on(map(NULL, SMALL_ALT), SMALL_ALT);
    return overflow(0);
}
#else
/* A mapping above `above`, or NULL. */
static void *map_above(uintptr_t above)
{
    uintptr_t base = (above + (1 << 20)) & ~(uintptr_t)0xfffff;
    for (int i = 0; i < 4096; i++) {
        void *p = map((void *)(base + (uintptr_t)i * (1 << 20)), ALT_SIZE);
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
    handle_on(alt, ALT_SIZE);
    while (!created)
        usleep(1000);
    usleep(20000);
    sink = descend(3);
    return arg;
}

int main(void)
{
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    created = 1;
    pthread_join(thread, NULL);
    return 0;
}
#endif
