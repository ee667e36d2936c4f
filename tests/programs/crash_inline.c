/* A NULL store inside functions inlined into each other, for the tests of source lines and
 * inline frames: at -O2 -g, store() (always_inline) is inlined into parse_field() (static
 * inline), itself inlined into parse_header(), called by read_request() (noinline), called by
 * main. Each call is on a line of its own, so that every frame's line tells the call apart.
 */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;
volatile int sink;

static inline __attribute__((always_inline)) void store(int *where, int value)
{
    *where = value; /* SIGSEGV: where is NULL */
}

static inline int parse_field(int value)
{
    int *where = target;
    store(where, value * 3);
    return value + sink;
}

static inline int parse_header(int value)
{
    int r = parse_field(value + 1);
    return r + sink;
}

NOINLINE int read_request(int value)
{
    volatile int keep = value;
    int r = parse_header(keep);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    int r = read_request(argc);
    printf("%d\n", r);
    return 0;
}
