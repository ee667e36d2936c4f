/* Loads the library named by argv[1], says "ready", and waits inside it (test_pid.py). */
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    void *lib = argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
    int (*wait_in)(int) = lib ? (int (*)(int))dlsym(lib, "gone_wait") : NULL;
    if (!wait_in) return 1;
    puts("ready");
    fflush(stdout);
    int depth = wait_in(3);
    printf("%d\n", depth); /* not a tail call: main stays on the stack */
    return 0;
}
