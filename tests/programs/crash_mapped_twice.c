/* Maps libc a second time -- read-only, the whole file from offset 0 -- as crash reporters,
 * libbacktrace and symbolizers do to read a library's own sections, then aborts. mmap places a
 * new mapping below the ones before it, so the copy lies below libc's real image; a module
 * placed by the lowest mapping of its file at offset 0 is put there, and every libc frame of the
 * abort is lost. Exits 2-4 (no crash) if the layout the test needs does not come about. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
    Dl_info info;
    if (!dladdr((void *)abort, &info) || info.dli_fname == NULL) return 2;
    int fd = open(info.dli_fname, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return 3;
    void *copy = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (copy == MAP_FAILED || (char *)copy >= (char *)info.dli_fbase) return 4;
    printf("copy %p libc %p\n", copy, info.dli_fbase);
    fflush(stdout);
    abort();
}
