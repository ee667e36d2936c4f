/* Crashes of known kinds for the triage tests (test_triage.py): argv[1] names the bug and
 * the path to it; the ground truth of which crash is which bug is in the test. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

#ifndef BUILD_NUMBER
#define BUILD_NUMBER 1
#endif

volatile int sink;
volatile int build_number = BUILD_NUMBER; /* another build, another build id */
char *volatile nowhere;

struct request { const char *header; };

NOINLINE int parse_header(struct request *r) { return r->header[0] == 'G'; } /* r is NULL */
NOINLINE int handle_request(struct request *r) { sink = parse_header(r); return sink + 1; }
NOINLINE int handle_batch(struct request **rs) { sink = parse_header(rs[1]); return sink + 2; }

NOINLINE void check_config(int entries) { assert(entries > 0 && "config has no entries"); sink = entries; }

NOINLINE void smash_stack(const char *input) {
    char buffer[8];
    strcpy(buffer, input); /* longer than the buffer: the stack protector aborts */
    sink = buffer[0];
}

NOINLINE void free_twice(void) {
    char *volatile p = malloc(64); /* volatile: the compiler may not drop the pair */
    sink = p[0] = 1;
    free(p);
    free(p);
    sink = 2; /* no tail call: free_twice stays on the stack */
}

volatile size_t record_size = 16; /* a length known at run time: a call of memcpy */
NOINLINE void copy_record(char *to) { memcpy(to, "record contents", record_size); sink = 4; }
NOINLINE void copy_other(char *to) { memcpy(to, "other contents!", record_size); sink = 5; }
NOINLINE size_t name_length(const char *name) { return strlen(name) + sink; }

NOINLINE void fatal_error(const char *why) { fprintf(stderr, "fatal: %s\n", why); abort(); }

NOINLINE int compute_ratio(int a, int b) { return a / b; }

typedef void (*callback)(void);
NOINLINE void run_callback(callback cb) { cb(); sink = 3; }

int main(int argc, char **argv) {
    const char *bug = argc > 1 ? argv[1] : "";
    struct request *none[2] = {0, 0};
    if (!strcmp(bug, "null-a")) return handle_request(NULL);
    if (!strcmp(bug, "null-b")) return handle_batch(none);
    if (!strcmp(bug, "assert")) check_config(argc - 2);
    if (!strcmp(bug, "smash")) smash_stack("a string much longer than eight bytes, to smash");
    if (!strcmp(bug, "double-free")) free_twice();
    if (!strcmp(bug, "memcpy-a")) copy_record(nowhere);
    if (!strcmp(bug, "memcpy-b")) copy_other(nowhere);
    if (!strcmp(bug, "strlen")) return (int)name_length(nowhere);
    if (!strcmp(bug, "abort")) fatal_error("out of cheese");
    if (!strcmp(bug, "fpe")) return compute_ratio(argc, argc - 2);
    if (!strcmp(bug, "null-call")) run_callback((callback)nowhere);
    return 0;
}
