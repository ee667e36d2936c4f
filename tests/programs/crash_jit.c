/* A JIT's code page between two mappings of the program: built with 64 KiB segment alignment
 * (-Wl,-z,max-page-size=0x10000), the program's code mapping and the one after it lie apart;
 * the page right after its code gets anonymous executable memory holding a store to address 0
 * (then ret), and main calls it through a pointer. The fault's pc is in no module: a module
 * whose range ran from its lowest to its highest mapping would claim it. Exits 2 (no crash) if
 * the page cannot be had there. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern char etext[];  /* the end of the program's code, from the linker */

/* movl $42, 0x0; ret */
static const unsigned char store_to_zero[] = {0xc7, 0x04, 0x25, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0xc3};

int main(void) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t at = ((uintptr_t)etext + page - 1) & ~(page - 1);
    void *code = mmap((void *)at, page, PROT_READ | PROT_WRITE | PROT_EXEC,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (code != (void *)at) return 2;
    memcpy(code, store_to_zero, sizeof store_to_zero);
    void (*volatile jitted)(void) = (void (*)(void))code;
    jitted();
    return 0;
}
