/* A live process to snapshot with gdb's gcore: nothing faults. A thread blocks in pause() two
 * calls deep, the main thread in nanosleep(); "ready" on stdout once the thread has started.
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started = PTHREAD_COND_INITIALIZER;
static int running;
volatile int sink;

NOINLINE static void wait_forever(void)
{
    for (;;)
        pause();
}

NOINLINE static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    running = 1;
    pthread_cond_signal(&started);
    pthread_mutex_unlock(&lock);
    wait_forever();
    sink++;
    return NULL;
}

NOINLINE static void idle(void)
{
    for (;;)
        sleep(60);
}

int main(void)
{
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    pthread_mutex_lock(&lock);
    while (!running)
        pthread_cond_wait(&started, &lock);
    pthread_mutex_unlock(&lock);
    puts("ready");
    fflush(stdout);
    idle();
    sink++;
    return 0;
}
