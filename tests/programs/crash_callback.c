/* A crash in code without CFI, called back from a library the tests delete once the core is
 * made: main -> app_layer -> lib_call (x3, libcallback.so) -> on_callback -> asm_crash.
 *
 * asm_crash (hand-written, no CFI) makes a frame record and stores through a NULL pointer: only
 * the frame-pointer walk finds on_callback. on_callback has CFI, and its CFI gives a return
 * address into lib_call, a module whose file is gone: a right return address, to be kept even
 * though nothing about that library but its place is known. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

int lib_call(int (*callback)(int), int depth);
int asm_crash(int x);

__asm__(".text\n"
        ".globl asm_crash\n"
        ".type asm_crash, @function\n"
        "asm_crash:\n"
        "    push %rbp\n"
        "    mov %rsp, %rbp\n"
        "    movl %edi, 0\n"
        "    pop %rbp\n"
        "    ret\n"
        ".size asm_crash, .-asm_crash\n");

NOINLINE int on_callback(int x)
{
    volatile int keep = x;
    int r = asm_crash(keep);
    return r + keep;
}

NOINLINE int app_layer(int depth)
{
    volatile int keep = depth;
    int r = lib_call(on_callback, depth);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", app_layer(argc + 1));
    return 0;
}
