/* A running program for `stackwalk pid` (test_pid.py): eight threads blocked in different
 * calls, the main thread in a recursion that ends in pthread_join. It prints "ready" once every
 * thread has started (each may still be on its way into its call: the tests stop the program
 * before they look at it, so every tool sees the same moment). */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t started;
static int pipe_fds[2];
volatile int sink;

NOINLINE void *in_pause(void *a) { pthread_barrier_wait(&started); for (;;) pause(); return a; }
NOINLINE void *in_sleep(void *a) { pthread_barrier_wait(&started); for (;;) sleep(100); return a; }
NOINLINE void *in_read(void *a) {
    char c;
    pthread_barrier_wait(&started);
    sink = (int)read(pipe_fds[0], &c, 1);
    return a;
}
NOINLINE void *in_lock(void *a) {
    pthread_barrier_wait(&started);
    pthread_mutex_lock(&held); /* main holds it */
    return a;
}
NOINLINE void *in_cond(void *a) {
    pthread_barrier_wait(&started);
    pthread_mutex_lock(&cond_lock);
    for (;;) pthread_cond_wait(&never, &cond_lock);
    return a;
}
NOINLINE void *in_poll(void *a) { pthread_barrier_wait(&started); for (;;) poll(NULL, 0, 100000); return a; }
NOINLINE void *in_select(void *a) {
    pthread_barrier_wait(&started);
    for (;;) { struct timeval tv = {100, 0}; select(0, NULL, NULL, NULL, &tv); }
    return a;
}
NOINLINE int nested(int depth) {
    if (depth == 0) { struct timespec ts = {100, 0}; for (;;) nanosleep(&ts, NULL); }
    return nested(depth - 1) + 1;
}
NOINLINE void *in_nested(void *a) { pthread_barrier_wait(&started); sink = nested(12); return a; }

NOINLINE int join_all(pthread_t *threads, int n, int depth) {
    if (depth > 0) return join_all(threads, n, depth - 1) + 1;
    for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
    return 0;
}

int main(void) {
    void *(*bodies[])(void *) = {in_pause, in_sleep, in_read, in_lock, in_cond, in_poll,
                                 in_select, in_nested};
    enum { N = sizeof bodies / sizeof *bodies };
    pthread_t threads[N];
    if (pipe(pipe_fds)) return 1;
    pthread_mutex_lock(&held);
    pthread_barrier_init(&started, NULL, N + 1);
    for (int i = 0; i < N; i++) pthread_create(&threads[i], NULL, bodies[i], NULL);
    pthread_barrier_wait(&started);
    puts("ready");
    fflush(stdout);
    return join_all(threads, N, 3);
}
