/* Words on the stack that look like return addresses and are not, below the one that is.
 *
 * Built without CFI (-fno-asynchronous-unwind-tables) and without frame pointers, so that
 * crash_here's caller, and main's, can only be found by scanning the stack. crash_here's frame
 * holds, below main's return address: the program's entry point, a function's first
 * instruction, a pointer to writable data, pointers into the stack (argv, and a string it
 * points to) and, unless NO_CODE_DECOYS, code addresses that follow a jmp, nops and a mov of
 * an immediate -- none of them after a call.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/auxv.h>

#define NOINLINE __attribute__((noinline, noclone))

int data_word = 1;
int *volatile target;
volatile int sink;

extern char after_jmp[], after_nop[], after_mov[];
__asm__(".text\n"
        ".globl decoy_code\n"
        ".type decoy_code, @function\n"
        "decoy_code:\n"
        "  jmp 1f\n"
        "after_jmp:\n"
        "  nop\n"
        "  nop\n"
        "after_nop:\n"
        "  movabs $0x1122334455667788, %rax\n"
        "after_mov:\n"
        "1:\n"
        "  ret\n"
        ".size decoy_code, .-decoy_code\n");

NOINLINE void decoy_function(void)
{
    sink = 1;
}

NOINLINE int crash_here(char **argv)
{
    /* decoys[0] is the lowest, the first a scan from crash_here's sp comes to. */
    void *volatile decoys[8] = {0};
    decoys[0] = (void *)getauxval(AT_ENTRY);
    decoys[1] = (void *)decoy_function;
    decoys[2] = &data_word;
    decoys[3] = argv;
    decoys[4] = argv[0];
#ifndef NO_CODE_DECOYS
    decoys[5] = after_jmp;
    decoys[6] = after_nop;
    decoys[7] = after_mov;
#endif
    *target = 1; /* SIGSEGV: target is NULL */
    return decoys[0] != 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    int r = crash_here(argv);
    sink = r;
    return 0;
}
