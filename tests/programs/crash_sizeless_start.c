/* A NULL store under an entry point written the way musl's and many runtimes' are: `_start` in
 * assembly, a bare label without `.type` or `.size`, so its symbol has size 0 (STT_NOTYPE).
 * Its body and CFI are glibc's x86_64 start.S (`.cfi_undefined rip`: the outermost frame), so
 * the stack ends there as usual. Built with -nostartfiles. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;

__asm__(".text\n"
        ".globl _start\n"
        "_start:\n"
        "    .cfi_startproc\n"
        "    .cfi_undefined rip\n"
        "    xor %ebp, %ebp\n"
        "    mov %rdx, %r9\n" /* rtld_fini */
        "    pop %rsi\n"      /* argc */
        "    mov %rsp, %rdx\n" /* argv */
        "    and $~15, %rsp\n"
        "    push %rax\n"
        "    push %rsp\n" /* stack_end */
        "    xor %r8d, %r8d\n"
        "    xor %ecx, %ecx\n"
        "    lea main(%rip), %rdi\n"
        "    call *__libc_start_main@GOTPCREL(%rip)\n"
        "    hlt\n"
        "    .cfi_endproc\n");

NOINLINE int crash_here(int x)
{
    *target = x; /* SIGSEGV: target is NULL */
    return x + 1;
}

NOINLINE int caller(int x)
{
    volatile int keep = x;
    int r = crash_here(keep);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", caller(argc));
    return 0;
}
