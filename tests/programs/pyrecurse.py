"""Python -> C -> Python recursion for the interpreter test: sorted() (C) calls the key lambda
(Python), which recurses into sorted() again; at the bottom math.gcd() runs the C function
math_gcd, which the interpreter's startup never calls (the tests check that too)."""

import math


def descend(n: int) -> list[int]:
    if n == 0:
        return [math.gcd(12, 18)]
    return sorted([n], key=lambda x: descend(x - 1))


descend(6)
