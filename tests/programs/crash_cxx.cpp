// An exception thrown through a noexcept function deep in templates, lambdas and
// std::function: the C++ runtime finds no handler it may unwind to and calls std::terminate()
// from inside the unwinder (libgcc's _Unwind_RaiseException, libstdc++'s personality
// routine), which aborts with SIGABRT while the exception is still in flight.
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

namespace crash {

struct Guard {
    std::string name;
    explicit Guard(const char *n) : name(n) {}
    ~Guard() { sink = static_cast<int>(name.size()); }
};

NOINLINE void raise_error(int depth)
{
    if (depth >= 0)
        throw std::runtime_error("in flight");
    sink = depth;
}

// The exception may not leave this function: the personality routine calls std::terminate().
NOINLINE void fail(int depth) noexcept
{
    Guard guard("fail");
    raise_error(depth);
}

template <typename T, int N>
struct Layer {
    NOINLINE static T run(const std::function<T(T)> &next, T value)
    {
        Guard guard("layer");
        volatile T keep = value;
        T r = next(value + N);
        return r + keep;
    }
};

template <typename F>
NOINLINE int apply_twice(F &&f, int x)
{
    volatile int keep = x;
    int r = f(x);
    return r + keep;
}

NOINLINE int chain(int depth)
{
    std::function<int(int)> recurse = [&](int n) -> int {
        volatile int keep = n;
        int r;
        if (n >= depth)
            r = apply_twice([](int v) { fail(v); return v; }, n);
        else
            r = Layer<int, 1>::run(recurse, n);
        return r + keep;
    };
    std::function<long(long)> outer = [&](long v) -> long {
        return Layer<int, 2>::run(recurse, static_cast<int>(v));
    };
    volatile int keep = depth;
    long r = Layer<long, 3>::run(outer, 0);
    return static_cast<int>(r) + keep;
}

}  // namespace crash

int main(int argc, char **)
{
    try {
        std::printf("%d\n", crash::chain(6 + argc));
    } catch (const std::exception &e) {
        std::printf("caught %s\n", e.what());
    }
    return 0;
}
