// cflags: -fomit-frame-pointer
/* The frameless half of the macOS crash program (see apple_crash.c), built without frame
 * pointers (the `cflags` line above, read by tests/apple.py):
 *
 *   frameless_big    x86_64: UNWIND_X86_64_MODE_STACK_IND (a 3000-byte frame, more than the
 *                    2040 bytes the encoding's immediate holds, so its size is read from the
 *                    `sub rsp` instruction); arm64: DWARF mode (a non-leaf function without a
 *                    frame record has no compact encoding)
 *   frameless_small  x86_64: UNWIND_X86_64_MODE_STACK_IMMD with pushed registers; arm64: DWARF
 *   crash_leaf       a leaf that touches no stack: x86_64 has no compact encoding for it (the
 *                    linker gives it DWARF mode, its FDE saying CFA = rsp + 8); arm64:
 *                    UNWIND_ARM64_MODE_FRAMELESS of size 0
 *   leaf_with_stack  a leaf with locals: x86_64 keeps them in the red zone (as crash_leaf);
 *                    arm64: UNWIND_ARM64_MODE_FRAMELESS with a stack size
 *
 * Frames above 4 KiB are avoided: they would call ___chkstk_darwin, a library function. */
#include "apple_crash.h"

NOINLINE void fill(volatile char *buf, long size, long n) {
  buf[0] = (char)n;
  buf[size - 1] = (char)n;
}

NOINLINE long frameless_big(long n) {
  char buf[3000];
  long a = n + 7;
  __asm__ volatile("" : "+r"(a)::"memory", SOME_SAVED);
  fill(buf, sizeof buf, n);
  if (mode == MODE_BIG) return *(volatile long *)bad_address + a + buf[5];
  return frameless_small(n + buf[0]) + a;
}

NOINLINE long frameless_small(long n) {
  char buf[24];
  long a = n + 5;
  __asm__ volatile("" : "+r"(a)::"memory", SOME_SAVED);
  fill(buf, sizeof buf, n);
  if (mode == MODE_SMALL) return *(volatile long *)bad_address + a;
  if (mode == MODE_NULL_CALL) null_function();
  if (mode == MODE_LEAF_STACK) return leaf_with_stack(n) + a;
  return crash_leaf(n + buf[1]) + a;
}

NOINLINE long crash_leaf(long n) { return *(volatile long *)bad_address + n; }

NOINLINE long leaf_with_stack(long n) {
  volatile long buf[8];
  for (int i = 0; i < 8; i++) buf[i] = n + i;
  return *(volatile long *)bad_address + buf[n & 7];
}
