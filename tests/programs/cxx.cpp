// Templates, lambdas and std::function, built at -O2: the stack to stop_here() runs through
// std::function's invoker thunks, lambda call operators and template instantiations.
#include <cstdio>
#include <functional>
#include <vector>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

extern "C" NOINLINE int stop_here(int x)
{
    sink = x;
    return x + 1;
}

template <typename T, int N>
struct Layer {
    NOINLINE static T run(const std::function<T(T)> &next, T value)
    {
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
            r = apply_twice([](int v) { return stop_here(v); }, n);
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

int main(int argc, char **)
{
    std::vector<int> depths{8 + argc};
    int total = 0;
    for (int d : depths)
        total += chain(d);
    std::printf("%d\n", total);
    return 0;
}
