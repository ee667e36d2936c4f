/* A freestanding macOS program whose call chain covers every compact unwind mode (see
 * tests/apple.py). This file is built with frame pointers, as Apple's compilers do by default:
 *
 *   main, thread_main  frame-based (x86_64 UNWIND_X86_64_MODE_RBP_FRAME, arm64
 *                      UNWIND_ARM64_MODE_FRAME)
 *   frame_saver        frame-based, saving every callee-saved register: rbx, r12-r15 on
 *                      x86_64; the pairs x19-x28 and d8-d15 on arm64
 *   dwarf_function     x86_64: DWARF mode (the Microsoft ABI's callee-saved xmm6-xmm15);
 *                      arm64: frame-based
 *
 * The functions of apple_frameless.c follow. The harness writes `mode` and `bad_address`
 * before it runs main (or thread_main). */
#include "apple_crash.h"

volatile int mode;
volatile unsigned long bad_address;
#ifdef OTHER_BUILD
/* Another build of the program (another UUID): tests/test_apple.py. */
volatile int other_build = OTHER_BUILD;
#endif
void (*volatile null_function)(void);

NOINLINE long frame_saver(long n) {
  long a = n * 3, b = n ^ 0x55;
  __asm__ volatile("" : "+r"(a), "+r"(b)::CALLEE_SAVED);
  if (mode == MODE_FRAME) return *(volatile long *)bad_address + a + b;
  return dwarf_function(n + 1) + a + b;
}

NOINLINE DWARF_ABI long dwarf_function(long n) {
  __asm__ volatile("" ::: "memory");
  if (mode == MODE_DWARF) return *(volatile long *)bad_address + n;
  return frameless_big(n + 1) + 1;
}

/* The entry of a thread: called from the stand-in of libsystem_pthread's thread_start. (The
 * `+ 1`s keep the calls from being tail calls, so that main stays on the stack.) */
NOINLINE int thread_main(void *arg) { return (int)frame_saver((long)arg) + 1; }

/* Called from the stand-in of libdyld's start. */
int main(void) { return (int)frame_saver(1) + 1; }
