/* perf workload: burns CPU, fork()s a child that burns CPU under the same name and then execs the
 * program named by argv[1] (a new pid, then a COMM exec event and the new program's mmaps), and
 * keeps burning CPU while it waits for the child. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

/* Written by burn(), so that the compiler cannot move its calls across fork(). */
volatile unsigned long sink;

NOINLINE static unsigned long burn(long n, unsigned long x)
{
    for (long i = 0; i < n; i++)
        x = x * 6364136223846793005ul + 1442695040888963407ul;
    sink = x;
    return x;
}

NOINLINE static unsigned long child_side(long n)
{
    return burn(n, 7);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    long n = 40000000;
    unsigned long check = burn(n, 1);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        check = child_side(n);
        printf("child %lu\n", check);
        fflush(stdout);
        execv(argv[1], argv + 1);
        perror("execv");
        _exit(127);
    }
    check += burn(2 * n, check);
    int status;
    waitpid(child, &status, 0);
    printf("parent %lu %d\n", check, WEXITSTATUS(status));
    return 0;
}
