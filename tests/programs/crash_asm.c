/* Hand-written assembly functions without CFI in the middle of a stack whose C functions have
 * CFI: main -> c_outer -> asm_* -> c_inner -> crash_here (NULL store).
 *
 * asm_keeps_fp makes a frame record (push %rbp; mov %rsp,%rbp): the frame-pointer walk finds
 * its caller. asm_breaks_chain keeps %rbp in a global and puts a misaligned value in it while it
 * calls on: no frame pointer leads past it, only a scan of the stack finds its return address.
 * Built at -O2 (with CFI for the C functions; the top-level asm has none). -DBREAK_CHAIN picks
 * asm_breaks_chain.
 */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

int *volatile target;
volatile int sink;
long saved_rbp;

int asm_keeps_fp(int x, int (*fn)(int));
int asm_breaks_chain(int x, int (*fn)(int));

__asm__(".text\n"
        ".globl asm_keeps_fp\n"
        ".type asm_keeps_fp, @function\n"
        "asm_keeps_fp:\n"
        "    push %rbp\n"
        "    mov %rsp, %rbp\n"
        "    call *%rsi\n"
        "    add $1, %eax\n"
        "    pop %rbp\n"
        "    ret\n"
        ".size asm_keeps_fp, .-asm_keeps_fp\n"
        ".globl asm_breaks_chain\n"
        ".type asm_breaks_chain, @function\n"
        "asm_breaks_chain:\n"
        "    mov %rbp, saved_rbp(%rip)\n"
        "    mov $0x12345, %ebp\n"
        "    push $0\n"
        "    call *%rsi\n"
        "    add $8, %rsp\n"
        "    mov saved_rbp(%rip), %rbp\n"
        "    add $2, %eax\n"
        "    ret\n"
        ".size asm_breaks_chain, .-asm_breaks_chain\n");

NOINLINE int crash_here(int x)
{
    *target = x; /* SIGSEGV: target is NULL */
    return x + 1;
}

NOINLINE int c_inner(int x)
{
    volatile int keep = x;
    int r = crash_here(keep);
    return r + keep;
}

NOINLINE int c_outer(int x)
{
    volatile int keep = x;
#ifdef BREAK_CHAIN
    int r = asm_breaks_chain(keep, c_inner);
#else
    int r = asm_keeps_fp(keep, c_inner);
#endif
    return r + keep;
}

int main(int argc, char **argv)
{
    (void)argv;
    printf("%d\n", c_outer(argc));
    return 0;
}
