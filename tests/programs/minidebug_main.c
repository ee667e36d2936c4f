/* A program and its library (minidebug_lib.c) as Fedora ships them: stripped, with
 * MiniDebugInfo (.gnu_debugdata) naming the functions their .dynsym lacks. The crash happens two
 * static functions deep in the library, called from a static function of the program.
 * With arguments, the library spins there instead, longer the more (live processes, perf). */
#define NOINLINE __attribute__((noinline, noclone))

int minidebug_lib_entry(int x);

static NOINLINE int app_static(int x)
{
    volatile int keep = x;
    int r = minidebug_lib_entry(keep);
    return r + keep;
}

/* Exported (-Wl,--export-dynamic-symbol): named by the program's .dynsym. */
NOINLINE int app_exported(int x)
{
    volatile int keep = x;
    int r = app_static(keep);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    int r = app_exported(argc);
    return argc > 1 ? 0 : r & 0x7f;
}
