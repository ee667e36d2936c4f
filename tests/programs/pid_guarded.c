/* A running program for `stackwalk pid` (test_pid.py): three threads whose stacks lie in one
 * mapping, each with a guard page at its bottom installed by madvise(MADV_GUARD_INSTALL), as
 * glibc 2.42 and later guard the stacks it allocates: the pages cannot be read (ptrace and
 * process_vm_readv fail there) while the mapping around them can. Each thread recurses to a
 * depth of its own and waits in pause(). It prints "ready" once every thread has started;
 * without MADV_GUARD_INSTALL (Linux before 6.13) it says so and exits 1. */
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#define THREADS 3
#define STACK (256 * 1024)
#define NOINLINE __attribute__((noinline))

static pthread_barrier_t started;
volatile int sink;

NOINLINE int descend(int n) {
    if (n == 0) {
        pthread_barrier_wait(&started);
        for (;;) pause();
    }
    sink += descend(n - 1);
    return sink;
}

NOINLINE void *run(void *depth) { return (void *)(long)descend((int)(long)depth); }

int main(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *stacks = mmap(NULL, THREADS * STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stacks == MAP_FAILED) return perror("mmap"), 1;
    pthread_barrier_init(&started, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++) {
        char *stack = stacks + (long)i * STACK;
        if (madvise(stack, page, MADV_GUARD_INSTALL) != 0) return perror("MADV_GUARD_INSTALL"), 1;
        pthread_attr_t attr;
        pthread_t t;
        pthread_attr_init(&attr);
        pthread_attr_setstack(&attr, stack, STACK);
        if (pthread_create(&t, &attr, run, (void *)(long)(3 + 2 * i)) != 0) return 1;
    }
    pthread_barrier_wait(&started);
    printf("ready\n");
    fflush(stdout);
    for (;;) pause();
}
