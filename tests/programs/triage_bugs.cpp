// C++ crashes of known kinds for the triage tests (test_triage.py).
#include <cstring>
#include <stdexcept>
#include <vector>

#define NOINLINE __attribute__((noinline))

volatile int sink;

namespace store {
template <typename T> struct Table {
    std::vector<T> *rows;
    NOINLINE T lookup(unsigned i) const { return (*rows)[i]; }  // rows is NULL
};
}  // namespace store

NOINLINE void process_order(int id) noexcept {
    if (id >= 0) throw std::runtime_error("order rejected");  // escapes noexcept: terminate
    sink = id;
}

struct Shape { virtual int area() const = 0; virtual ~Shape() {} };

int main(int argc, char **argv) {
    const char *bug = argc > 1 ? argv[1] : "";
    if (!std::strcmp(bug, "template")) {
        store::Table<int> t{nullptr};
        return t.lookup(argc);
    }
    if (!std::strcmp(bug, "noexcept")) process_order(argc);
    return 0;
}
