/* perf workload: samples whose frame 0 has no CFI.
 *
 * asm_spin is a leaf function in hand-written assembly (the top-level asm has no CFI), where
 * most of the time goes: main -> work -> asm_spin. Its return address is at sp. Then main
 * creates and joins threads in a loop: samples taken in the kernel during clone3 have the user
 * pc right after clone3's syscall instruction, where glibc ends clone3's FDE (the child's
 * stack is another one); there too the return address is at sp.
 *
 * Built at -O2 -fomit-frame-pointer: no frame pointer leads past asm_spin. Arguments: the spin
 * count, the number of threads.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))

long asm_spin(long n);

__asm__(".text\n"
        ".globl asm_spin\n"
        ".type asm_spin, @function\n"
        "asm_spin:\n"
        "    mov %rdi, %rax\n"
        "1:  rol $7, %rax\n"
        "    add %rdi, %rax\n"
        "    dec %rdi\n"
        "    jnz 1b\n"
        "    ret\n"
        ".size asm_spin, .-asm_spin\n");

NOINLINE static long work(long n)
{
    volatile long keep = n;
    long r = asm_spin(n);
    return r + keep;
}

static void *nothing(void *arg)
{
    return arg;
}

NOINLINE static long make_threads(long count)
{
    long made = 0;
    for (long i = 0; i < count; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, nothing, NULL) == 0 && pthread_join(thread, NULL) == 0)
            made++;
    }
    return made;
}

int main(int argc, char **argv)
{
    long spins = argc > 1 ? atol(argv[1]) : 600000000;
    long threads = argc > 2 ? atol(argv[2]) : 20000;
    long total = work(spins | 1);
    total += make_threads(threads);
    printf("%ld\n", total);
    return 0;
}
