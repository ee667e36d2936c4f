"""perf workload: a CPU-bound recursion in the interpreter (run as /usr/bin/python3 -I -S), so the
samples fall in _PyEval_EvalFrameDefault and the C functions it calls (sorted, the key lambda)."""

import sys


def fib(n: int) -> int:
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def mixed(n: int) -> int:
    values = sorted(range(n, 0, -1), key=lambda v: fib(v % 12))
    return values[0]


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
total = 0
for _ in range(rounds):
    total += fib(25) + mixed(2000)
print(total)
