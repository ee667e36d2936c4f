/* A static program with startup code of its own: a `_start` in assembly without CFI, as
 * elfutils' backtrace test programs have it (and glibc's own before it marked `_start` with
 * `.cfi_undefined`). It does what glibc's start.S does -- clears the frame pointer (and, on
 * aarch64, lr), passes argc, argv and the stack's end to __libc_start_main with main -- and
 * main calls down to a NULL store:
 *
 *   _start -> __libc_start_main -> __libc_start_call_main -> main -> middle -> crash_here
 *
 * Linked with -static -nostartfiles (x86_64, i386 with i686-linux-gnu-gcc, aarch64 with
 * aarch64-linux-gnu-gcc). Without crt1.o, crti.o and crtn.o, the few symbols they define that
 * static glibc needs are defined here.
 */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start, @function\n"
        "_start:\n"
        "    xor %ebp, %ebp\n"
        "    mov %rdx, %r9\n" /* rtld_fini (0 in a static program) */
        "    pop %rsi\n"      /* argc */
        "    mov %rsp, %rdx\n" /* argv */
        "    and $-16, %rsp\n"
        "    push %rax\n"
        "    push %rsp\n" /* stack_end */
        "    xor %r8d, %r8d\n"
        "    xor %ecx, %ecx\n"
        "    lea main(%rip), %rdi\n"
        "    call __libc_start_main\n"
        "    hlt\n"
        ".size _start, .-_start\n");
#elif defined(__i386__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start, @function\n"
        "_start:\n"
        "    xor %ebp, %ebp\n"
        "    pop %esi\n"       /* argc */
        "    mov %esp, %ecx\n" /* argv */
        "    and $-16, %esp\n"
        "    push %eax\n"
        "    push %esp\n" /* stack_end */
        "    push %edx\n" /* rtld_fini */
        "    push $0\n"
        "    push $0\n"
        "    push %ecx\n"
        "    push %esi\n"
        "    push $main\n"
        "    call __libc_start_main\n"
        "    hlt\n"
        ".size _start, .-_start\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl _start\n"
        ".type _start, %function\n"
        "_start:\n"
        "    mov x29, #0\n"
        "    mov x30, #0\n"
        "    mov x5, x0\n"      /* rtld_fini */
        "    ldr x1, [sp]\n"    /* argc */
        "    add x2, sp, #8\n"  /* argv */
        "    mov x6, sp\n"      /* stack_end */
        "    adrp x0, main\n"
        "    add x0, x0, :lo12:main\n"
        "    mov x3, #0\n"
        "    mov x4, #0\n"
        "    bl __libc_start_main\n"
        "    brk #0\n"
        ".size _start, .-_start\n");
#else
#error "no _start for this architecture"
#endif

/* What crt1.o (a static program's: no relocation of its own), crti.o and crtn.o define. */
void _dl_relocate_static_pie(void) {}
void _init(void) {}
void _fini(void) {}

NOINLINE int crash_here(int x)
{
    *target = x; /* SIGSEGV: target is NULL */
    return x + 1;
}

NOINLINE int middle(int x)
{
    volatile int keep = x;
    int r = crash_here(keep);
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", middle(argc));
    return 0;
}
