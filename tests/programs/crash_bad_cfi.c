/* CFI that gives a stack address for a return address: bad_cfi_leaf pushes a pointer into the
 * stack and faults, and its CFI leaves the push out (as one flipped bit in an .eh_frame can
 * make an offset wrong), so that by its CFI the word at sp, the pointer, is its return address.
 * Its true return address, into caller (a call of bad_cfi_leaf), is the word above.
 */
#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;
void bad_cfi_leaf(void);

__asm__(".text\n"
        ".globl bad_cfi_leaf\n"
        ".type bad_cfi_leaf, @function\n"
        "bad_cfi_leaf:\n"
        "  .cfi_startproc\n"
        "  lea -64(%rsp), %rax\n"
        "  push %rax\n" /* no .cfi_adjust_cfa_offset: the CFA is still sp + 8 */
        "  movl $1, 0\n" /* SIGSEGV: a store to address 0 */
        "  pop %rax\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size bad_cfi_leaf, .-bad_cfi_leaf\n");

NOINLINE int caller(int x)
{
    bad_cfi_leaf();
    sink = x;
    return x + 1;
}

int main(int argc, char **argv)
{
    (void)argv;
    sink = caller(argc);
    return 0;
}
