/* A workload for `stackwalk perf` (test_perf.py) that spends its time in write(2) from a
 * process with a second thread, so that glibc takes write's cancellable path: there its
 * DWARF has __GI___libc_write inlined into its own alias __write, at the pc after the system
 * call, which is frame 0 of most samples (perf shows that inline frame under the symbol's own
 * name, not as "(inlined)"). */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile int done;

static void *waiter(void *arg)
{
    while (!done)
        usleep(10000);
    return arg;
}

NOINLINE static void write_many(int fd, long count)
{
    char buffer[64] = {0};
    for (long i = 0; i < count; i++)
        if (write(fd, buffer, sizeof buffer) < 0)
            abort();
}

int main(int argc, char **argv)
{
    long count = argc > 1 ? atol(argv[1]) : 2000000;
    pthread_t thread;
    pthread_create(&thread, NULL, waiter, NULL);
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0)
        return 1;
    write_many(fd, count);
    done = 1;
    pthread_join(thread, NULL);
    return 0;
}
