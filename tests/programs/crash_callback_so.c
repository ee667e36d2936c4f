/* libcallback.so for crash_callback.c: lib_call() recurses, then calls back into the program.
 * The tests delete it once the core is made, so that the return addresses into it lie in a
 * module whose file is missing. */
#define NOINLINE __attribute__((noinline, noclone))

NOINLINE int lib_call(int (*callback)(int), int depth)
{
    volatile int keep = depth;
    int r = depth == 0 ? callback(keep) : lib_call(callback, depth - 1);
    return r + keep;
}
