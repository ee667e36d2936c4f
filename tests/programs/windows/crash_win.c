/* A Windows program that crashes the way argv[1] says and writes a minidump of itself into
 * argv[2] from its unhandled-exception filter, as Breakpad's and Crashpad's Windows clients do
 * (MiniDumpWriteDump with the exception's pointers). Built with mingw-w64, run under Wine.
 *
 *   leaf    a null read in a function that makes no frame
 *   deep    a null write 40 calls deep in a recursion whose frames hold locals
 *   qsort   a null read in a comparison function called by msvcrt's qsort
 *   thread  a null read in a second thread while the first waits for it
 *   divide  an integer division by zero in a function with a frame pointer
 *   raise   an exception raised by RaiseException (a software error, as an assertion raises)
 */
#include <windows.h>
#include <dbghelp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dump_path;
static volatile int zero;
static volatile int *volatile null_pointer;

static LONG WINAPI write_dump(EXCEPTION_POINTERS *pointers) {
    HANDLE file = CreateFileA(dump_path, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS,
                              FILE_ATTRIBUTE_NORMAL, NULL);
    MINIDUMP_EXCEPTION_INFORMATION info = {GetCurrentThreadId(), pointers, FALSE};
    MiniDumpWriteDump(GetCurrentProcess(), GetCurrentProcessId(), file, MiniDumpNormal, &info,
                      NULL, NULL);
    CloseHandle(file);
    ExitProcess(3);
}

__attribute__((noinline)) int leaf(volatile int *p) { return *p; }

__attribute__((noinline)) int middle(volatile int *p, int n) {
    volatile char buffer[200];
    buffer[n] = (char)n;
    return leaf(p) + buffer[n];
}

__attribute__((noinline)) int outer(int n) { return middle(null_pointer, n) * 3; }

__attribute__((noinline)) int recurse(int depth) {
    volatile int locals[8];
    locals[depth % 8] = depth;
    if (depth == 0) {
        *null_pointer = locals[0];
        return 0;
    }
    return recurse(depth - 1) + locals[depth % 8];
}

static int compare(const void *a, const void *b) {
    return *null_pointer + *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) void sort_them(void) {
    int values[16];
    for (int i = 0; i < 16; i++) values[i] = 16 - i;
    qsort(values, 16, sizeof values[0], compare);
}

static DWORD WINAPI worker(void *argument) { return (DWORD)outer((int)(size_t)argument); }

__attribute__((noinline, optimize("no-omit-frame-pointer"))) int divide(int n) {
    volatile int numbers[4] = {n, n + 1, n + 2, n + 3};
    return numbers[n % 4] / zero;
}

__attribute__((noinline)) void check_header(int n) {
    if (n < 1000) RaiseException(0xE0000001, 0, 0, NULL);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: crash_win leaf|deep|qsort|thread|divide|raise DUMP\n");
        return 2;
    }
    dump_path = argv[2];
    SetUnhandledExceptionFilter(write_dump);
    const char *mode = argv[1];
    if (!strcmp(mode, "leaf")) return outer(argc);
    if (!strcmp(mode, "deep")) return recurse(40);
    if (!strcmp(mode, "qsort")) {
        sort_them();
        return 0;
    }
    if (!strcmp(mode, "thread")) {
        HANDLE thread = CreateThread(NULL, 0, worker, (void *)(size_t)argc, 0, NULL);
        WaitForSingleObject(thread, INFINITE);
        return 0;
    }
    if (!strcmp(mode, "divide")) return divide(argc);
    if (!strcmp(mode, "raise")) {
        check_header(argc);
        return 0;
    }
    return 2;
}
