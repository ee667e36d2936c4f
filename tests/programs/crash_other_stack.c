/* A walk led into another thread's stack by CFI: the stack switch a runtime makes (Go's mcall
 * and systemstack, a coroutine library's swapcontext) describes its caller's frame by a saved
 * stack pointer, and where that pointer is stale, the caller's frame CFI gives is another
 * thread's.
 *
 * The main thread recurses a few frames deep and parks in park(), which publishes where its
 * caller's frame begins (park's CFA) and blocks. A second thread then calls crash_on_stack,
 * whose CFI says its caller's frame is at that address (the CFA is the register holding it):
 * a walk of that thread by its CFI goes on with the parked thread's frames, every one with
 * CFI, as if they were its own (the main thread's stack lies above every other thread's, so
 * the CFA is above the crashing frame's sp, as a caller's is). It faults there (SIGSEGV).
 */
#include <pthread.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

void *volatile parked_cfa;
volatile int sink;
void crash_on_stack(void *cfa);

__asm__(".text\n"
        ".globl crash_on_stack\n"
        ".type crash_on_stack, @function\n"
        "crash_on_stack:\n"
        "  .cfi_startproc\n"
        "  mov %rdi, %rbx\n"
        "  .cfi_def_cfa %rbx, 0\n"
        "  movl $1, 0\n" /* SIGSEGV: a store to address 0 */
        "  ret\n"
        "  .cfi_endproc\n"
        ".size crash_on_stack, .-crash_on_stack\n");

NOINLINE void park(void)
{
    parked_cfa = (char *)__builtin_frame_address(0) + 16;
    for (;;)
        pause();
}

NOINLINE int recurse(int depth)
{
    if (depth == 0)
        park();
    else
        sink = recurse(depth - 1);
    return sink + 1;
}

static void *crashing_thread(void *arg)
{
    (void)arg;
    while (parked_cfa == NULL)
        usleep(1000);
    usleep(10000); /* the main thread is in pause() by now */
    crash_on_stack(parked_cfa);
    return NULL;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, NULL, crashing_thread, NULL);
    return recurse(3);
}
