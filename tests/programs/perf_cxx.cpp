// perf workload: std::sort with a lambda comparator (std::__introsort_loop and friends, template
// instantiations inlined or not), and a recursion through std::function's invoker thunks.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define NOINLINE __attribute__((noinline, noclone))

struct Point {
    double x, y;
};

NOINLINE static double weight(const Point &p)
{
    return p.x * p.x + 0.5 * p.y;
}

template <typename T>
NOINLINE static void sort_by_weight(std::vector<T> &items)
{
    std::sort(items.begin(), items.end(),
              [](const T &a, const T &b) { return weight(a) < weight(b); });
}

template <int N>
struct Stage {
    NOINLINE static long run(const std::function<long(long)> &next, long value)
    {
        volatile long keep = value;
        return next(value + N) + keep;
    }
};

NOINLINE static long churn(long depth)
{
    std::function<long(long)> step = [&](long n) -> long {
        if (n >= depth) {
            long acc = 0;
            for (long i = 0; i < 20000; i++)
                acc += (i * n) % 7;
            return acc;
        }
        return Stage<1>::run(step, n);
    };
    return Stage<2>::run(step, 0);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
    std::vector<Point> points(100000);
    double check = 0;
    for (int round = 0; round < rounds; round++) {
        for (size_t i = 0; i < points.size(); i++)
            points[i] = Point{double((i * 2654435761u + round) % 100003), double(i % 17)};
        sort_by_weight(points);
        check += points[points.size() / 2].x;
        for (int j = 0; j < 40; j++)
            check += double(churn(8 + j % 5));
    }
    std::printf("%f\n", check);
    return 0;
}
