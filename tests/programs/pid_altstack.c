/* A running program for `stackwalk pid` (test_pid.py): two threads, each inside a signal
 * handler on an alternate stack (sigaltstack), blocked in pause(). The main thread's alternate
 * stack is mapped where the kernel puts it, below the main stack; the worker's is mapped above
 * the worker's own stack, so that past the signal frame its walk goes down. A live copy of each
 * thread's stack from its sp up holds only the handler's stack: the stack each was interrupted
 * on is elsewhere. It prints "ready" once both are in their handlers. */
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

static volatile sig_atomic_t in_handlers;
volatile int sink;

NOINLINE void wait_in_handler(int sig)
{
    volatile int keep = sig;
    if (__sync_add_and_fetch(&in_handlers, 1) == 2) {
        static const char ready[] = "ready\n";
        sink = (int)write(1, ready, sizeof ready - 1);
    }
    for (;;)
        pause();
    sink = keep;
}

NOINLINE void on_usr1(int sig)
{
    volatile int keep = sig;
    wait_in_handler(sig);
    sink = keep;
}

NOINLINE int descend(int depth)
{
    volatile int keep = depth;
    if (depth == 0)
        pthread_kill(pthread_self(), SIGUSR1);
    else
        sink = descend(depth - 1);
    return keep;
}

static void *map(void *hint)
{
    return mmap(hint, ALT_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static void use_alternate_stack(void *alt)
{
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = alt;
    ss.ss_size = ALT_SIZE;
    if (alt == MAP_FAILED || sigaltstack(&ss, NULL) != 0)
        exit(2);
}

static void *worker(void *arg)
{
    char here;
    uintptr_t above = ((uintptr_t)&here + (1 << 20)) & ~(uintptr_t)0xfffff;
    void *alt = MAP_FAILED;
    for (int i = 0; i < 4096 && alt == MAP_FAILED; i++) {
        alt = map((void *)(above + (uintptr_t)i * (1 << 20)));
        if (alt != MAP_FAILED && (uintptr_t)alt < (uintptr_t)&here) {
            munmap(alt, ALT_SIZE);
            alt = MAP_FAILED;
        }
    }
    use_alternate_stack(alt);
    sink = descend(3);
    return arg;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    use_alternate_stack(map(NULL));
    sink = descend(2);
    pthread_join(thread, NULL);
    return 0;
}
