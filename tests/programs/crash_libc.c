/* A crash inside libc reached through the PLT: strlen(NULL) called from a chain of the
 * program's own functions. (The pointer comes from a volatile, so GCC cannot fold the call.) */
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

const char *volatile text;

NOINLINE size_t measure(int n)
{
    volatile int keep = n;
    size_t r = strlen(text); /* SIGSEGV inside libc: text is NULL */
    return r + keep;
}

NOINLINE size_t outer(int n)
{
    volatile int keep = n;
    size_t r = n == 0 ? measure(n) : outer(n - 1);
    return r + keep;
}

int main(void)
{
    printf("%zu\n", outer(3));
    return 0;
}
