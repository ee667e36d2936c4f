/* Shared declarations of the freestanding macOS crash programs (apple_crash.c and
 * apple_frameless.c), built by tests/apple.py and run in the unicorn emulator.
 *
 * Nothing here calls a library: there is no libSystem on the emulated machine. The harness
 * writes `mode` (which function crashes) and `bad_address` (what it loads) through their
 * symbols' addresses before it runs the program. */
#ifndef APPLE_CRASH_H
#define APPLE_CRASH_H

#define NOINLINE __attribute__((noinline))

#if defined(__x86_64__)
/* Every callee-saved register of the System V ABI but rbp. */
#define CALLEE_SAVED "rbx", "r12", "r13", "r14", "r15"
#define SOME_SAVED "rbx", "r14"
/* The Microsoft ABI makes xmm6-xmm15 callee-saved: a compact unwind encoding has no place for
 * them, so the compiler gives the function DWARF mode (UNWIND_X86_64_MODE_DWARF). */
#define DWARF_ABI __attribute__((ms_abi))
#else
/* Every callee-saved register pair of the AArch64 ABI: x19-x28 and d8-d15. */
#define CALLEE_SAVED "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", \
                     "d8", "d9", "d10", "d11", "d12", "d13", "d14", "d15"
#define SOME_SAVED "x19", "x20", "x21"
#define DWARF_ABI
#endif

/* The values of `mode` (tests/apple.py MODES mirrors them). */
enum {
  MODE_LEAF,       /* crash_leaf, a frameless leaf, loads bad_address */
  MODE_SMALL,      /* frameless_small loads it itself */
  MODE_BIG,        /* frameless_big loads it itself */
  MODE_DWARF,      /* dwarf_function loads it itself */
  MODE_FRAME,      /* frame_saver loads it itself */
  MODE_NULL_CALL,  /* frameless_small calls a NULL function pointer: pc 0 */
  MODE_LEAF_STACK, /* leaf_with_stack, a leaf with locals, loads it */
};

extern volatile int mode;
extern volatile unsigned long bad_address;
extern void (*volatile null_function)(void);

long frame_saver(long n);
DWARF_ABI long dwarf_function(long n);
long frameless_big(long n);
long frameless_small(long n);
long crash_leaf(long n);
long leaf_with_stack(long n);

#endif
