/* A thread started by a raw clone of the program's own, in assembly without CFI (x86_64): the
 * thread's outermost frame is that clone's child side, which, as glibc's clone and clone3 and
 * musl's __clone do, clears rbp (the ABI's mark of the outermost frame) and calls the thread's
 * function. That function calls down to a NULL store once the main thread is about to wait in
 * pause() (so that, wherever the crash finds it, it is in main or in libc, which have CFI):
 *
 *   raw_clone (child) -> thread_main -> middle -> crash_here
 *
 * The thread shares the main thread's TLS (no CLONE_SETTLS): it calls nothing that uses it.
 */
#include <stdio.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

/* CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM */
#define THREAD_FLAGS 0x50f00UL

int *volatile target;
volatile int ready;
static char child_stack[64 * 1024] __attribute__((aligned(16)));

/* Returns the new thread's id (or -errno) in the caller; the child calls fn(arg) on stack_top,
 * then exits. */
long raw_clone(unsigned long flags, void *stack_top, int (*fn)(void *), void *arg);

__asm__(".text\n"
        ".globl raw_clone\n"
        ".type raw_clone, @function\n"
        "raw_clone:\n"
        "    and $-16, %rsi\n"
        "    sub $16, %rsi\n"
        "    mov %rdx, (%rsi)\n" /* fn and arg, popped by the child */
        "    mov %rcx, 8(%rsi)\n"
        "    mov $56, %eax\n" /* SYS_clone (flags, stack, parent_tid, child_tid, tls) */
        "    xor %edx, %edx\n"
        "    xor %r10d, %r10d\n"
        "    xor %r8d, %r8d\n"
        "    syscall\n"
        "    test %rax, %rax\n"
        "    jnz 1f\n"
        "    xor %ebp, %ebp\n"
        "    pop %rax\n"
        "    pop %rdi\n"
        "    call *%rax\n"
        "    mov %eax, %edi\n"
        "    mov $60, %eax\n" /* SYS_exit */
        "    syscall\n"
        "    hlt\n"
        "1:  ret\n"
        ".size raw_clone, .-raw_clone\n");

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

NOINLINE int thread_main(void *arg)
{
    while (!ready)
        ;
    return middle((int)(long)arg) + 1;
}

int main(int argc, char **argv)
{
    (void)argv;
    long tid = raw_clone(THREAD_FLAGS, child_stack + sizeof child_stack, thread_main,
                         (void *)(long)argc);
    if (tid < 0) {
        fprintf(stderr, "clone: %ld\n", tid);
        return 1;
    }
    ready = 1;
    for (;;)
        pause();
}
