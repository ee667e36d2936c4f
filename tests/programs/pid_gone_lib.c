/* A library the tests delete while a program has it loaded (test_pid.py). */
#include <unistd.h>
volatile int gone_sink;
__attribute__((noinline)) int gone_wait(int n) {
    if (n == 0) for (;;) pause();
    int depth = gone_wait(n - 1);
    gone_sink = depth; /* work after the call: a real recursion, not a loop */
    return depth + 1;
}
