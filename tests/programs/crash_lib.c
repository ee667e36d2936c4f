/* A crash inside a shared library of the test's own (crash_lib_so.c, libcrashlib.so): the
 * program calls into it two calls deep and the library stores through a NULL pointer at the
 * bottom of a recursion of its own. Used for cores whose library is missing or replaced by a
 * rebuilt copy with another build id. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

int lib_entry(int depth);

volatile int sink;

NOINLINE int app_layer(int depth)
{
    volatile int keep = depth;
    int r = lib_entry(depth);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", app_layer(argc + 2));
    return 0;
}
