/* A frame-pointer chain that skips frames: only `outer` makes a frame record; the functions it
 * calls keep rbp as it left it (code built without frame pointers), and none has CFI. The
 * record rbp points at when `leaf` faults is outer's, so following it from any of them goes
 * straight to outer's caller, past middle and inner (as following rbp from glibc's raise goes
 * past abort and __libc_message to the last function with a frame record).
 */
#define NOINLINE __attribute__((noinline, noclone))
#define NO_FP __attribute__((optimize("omit-frame-pointer")))
#define FP __attribute__((optimize("no-omit-frame-pointer")))

int *volatile target;
volatile int sink;

NO_FP NOINLINE void leaf(int x)
{
    *target = x; /* SIGSEGV: target is NULL */
}

NO_FP NOINLINE int inner(int x)
{
    volatile int buf[8];
    buf[x & 7] = x;
    leaf(buf[0]);
    return buf[1];
}

NO_FP NOINLINE int middle(int x)
{
    volatile int buf[16];
    buf[x & 15] = x;
    int r = inner(buf[2]);
    return r + buf[3];
}

FP NOINLINE int outer(int x)
{
    volatile int buf[4];
    buf[x & 3] = x;
    int r = middle(buf[1]);
    return r + buf[2];
}

int main(int argc, char **argv)
{
    (void)argv;
    sink = outer(argc);
    return 0;
}
