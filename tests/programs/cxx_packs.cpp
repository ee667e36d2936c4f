// Variadic templates instantiated with empty and non-empty parameter packs, each function
// kept (-O0): an empty pack after other template arguments (first_then<int>) is where
// cpp_demangle 0.5 wrote an empty argument ("first_then<int, >").
template <typename... Ts> struct Pack {
    static int count() { return sizeof...(Ts); }
};

template <typename T, typename... Rest> int first_then(T t, Rest... rest) {
    return static_cast<int>(t) + static_cast<int>(sizeof...(rest));
}

template <typename... Ts> int make(Ts... ts) {
    return Pack<Ts...>::count() + static_cast<int>(sizeof...(ts));
}

template <typename T, typename... Rest> struct Outer {
    template <typename... More> static int inner() { return sizeof...(Rest) + sizeof...(More); }
};

int main() {
    return make() + make(1) + make(1, 2.0) + first_then(1) + first_then(1, 'c') +
           Pack<>::count() + Pack<int>::count() + Outer<int>::inner<>() +
           Outer<int, char>::inner<long>() + Outer<Pack<>>::inner<>();
}
