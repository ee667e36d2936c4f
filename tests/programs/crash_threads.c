/* Several threads blocked at different depths, then one of them crashes.
 *
 * Thread "waiter" blocks in pthread_cond_wait() two calls deep, "sleeper" in nanosleep() at the
 * bottom of a recursion, "reader" in read() on a pipe nobody writes to, "joiner" in
 * pthread_join() on the sleeper. When all four are asleep in the kernel (checked through
 * /proc/self/task/TID/stat), the "crasher" thread stores through a NULL pointer three calls
 * deep, while the main thread waits for it in pthread_join().
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))
#define BLOCKED 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pid_t tids[BLOCKED];
static int pipe_fds[2];
static pthread_t sleeper_thread;
int *volatile target;
volatile int sink;

static void announce(int slot)
{
    __atomic_store_n(&tids[slot], (pid_t)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
}

NOINLINE int wait_forever(int n)
{
    volatile int keep = n;
    pthread_mutex_lock(&lock);
    for (;;)
        pthread_cond_wait(&never, &lock);
    return keep;
}

NOINLINE void *waiter(void *arg)
{
    (void)arg;
    announce(0);
    sink = wait_forever(1);
    return NULL;
}

NOINLINE int sleep_deep(int depth)
{
    volatile int keep = depth;
    if (depth == 0) {
        struct timespec forever = {1000000, 0};
        while (nanosleep(&forever, NULL) == 0)
            ;
        return keep;
    }
    int r = sleep_deep(depth - 1);
    return r + keep;
}

NOINLINE void *sleeper(void *arg)
{
    (void)arg;
    announce(1);
    sink = sleep_deep(5);
    return NULL;
}

NOINLINE void *reader(void *arg)
{
    (void)arg;
    char byte;
    announce(2);
    sink = (int)read(pipe_fds[0], &byte, 1);
    return NULL;
}

NOINLINE void *joiner(void *arg)
{
    (void)arg;
    announce(3);
    pthread_join(sleeper_thread, NULL);
    return NULL;
}

/* Whether the thread `tid` sleeps in the kernel. */
static int asleep(pid_t tid)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    char *state = strrchr(stat, ')');
    return state != NULL && state[2] == 'S';
}

/* Whether every blocked thread has announced itself and sleeps in the kernel, and so does the
 * main thread (in pthread_join: until then it may still be inside pthread_create). */
static int all_asleep(void)
{
    for (int i = 0; i < BLOCKED; i++) {
        pid_t tid = __atomic_load_n(&tids[i], __ATOMIC_SEQ_CST);
        if (tid == 0 || !asleep(tid))
            return 0;
    }
    return asleep(getpid());
}

NOINLINE int crash_here(int x)
{
    *target = x; /* SIGSEGV: target is NULL */
    return x + 1;
}

NOINLINE int crash_middle(int x)
{
    volatile int keep = x;
    int r = crash_here(keep);
    return r + keep;
}

NOINLINE void *crasher(void *arg)
{
    (void)arg;
    struct timespec pause = {0, 1000000};
    while (!all_asleep())
        nanosleep(&pause, NULL);
    sink = crash_middle(7);
    return NULL;
}

int main(void)
{
    pthread_t threads[BLOCKED], crash_thread;
    if (pipe(pipe_fds) != 0)
        return 1;
    pthread_create(&threads[0], NULL, waiter, NULL);
    pthread_create(&sleeper_thread, NULL, sleeper, NULL);
    pthread_create(&threads[2], NULL, reader, NULL);
    pthread_create(&threads[3], NULL, joiner, NULL);
    pthread_create(&crash_thread, NULL, crasher, NULL);
    pthread_join(crash_thread, NULL);
    puts("not reached");
    return 0;
}
