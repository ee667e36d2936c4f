/* `stackwalk pid` on a process whose main thread has exited (pthread_exit) while two others run
 * on: the main thread waits as a zombie, whose /proc files show no memory, until they end. One
 * blocks in pause() two calls deep, the other in nanosleep(). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static pthread_barrier_t ready;

NOINLINE static void wait_forever(void)
{
    for (;;)
        pause();
}

NOINLINE static void *pauser(void *arg)
{
    pthread_barrier_wait(&ready);
    wait_forever();
    return arg;
}

NOINLINE static void *sleeper(void *arg)
{
    pthread_barrier_wait(&ready);
    struct timespec long_time = {3600, 0};
    for (;;)
        nanosleep(&long_time, NULL);
    return arg;
}

int main(void)
{
    pthread_t threads[2];
    pthread_barrier_init(&ready, NULL, 3);
    pthread_create(&threads[0], NULL, pauser, NULL);
    pthread_create(&threads[1], NULL, sleeper, NULL);
    pthread_barrier_wait(&ready);
    printf("ready\n");
    fflush(stdout);
    pthread_exit(NULL);
}
