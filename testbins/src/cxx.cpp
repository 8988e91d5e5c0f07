// cxx: a small C++ program for emutrace's C++ support (tests/test_cxx.py): names in
// namespaces and classes (demangling, -F on demangled names), member functions whose
// first argument is `this` (typed arguments), a template, an overloaded function, a
// virtual call, a constructor and a destructor, an exception thrown and caught.
//
//   cxx        prints what the functions below received and returned (the same on
//              every ISA)
//   cxx this   also prints the address of `geo::tally` (a static object: the same on
//              every run of one binary), the `this` of every geo::Counter::add call
//
// Built with -fno-inline: every function below is a real call.  geo::level2 and
// geo::level3 log their arguments in a static array (no library call inside them) and
// main prints the log at the end: the oracle of `-F geo::level2`.
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace geo {

struct Call {
    const char *name;
    int arg;
};
static Call calls[16];
static int ncalls;

static void note(const char *name, int arg) {
    if (ncalls < 16)
        calls[ncalls++] = Call{name, arg};
}

int level3(int x) {
    note("geo::level3", x);
    return x * 3;
}

int level2(int x) {
    note("geo::level2", x);
    return level3(x + 1) + 1;
}

int level1(int x) {
    int a = level2(x * 2);
    return a + level2(x * 2 + 1);
}

class Counter {
public:
    explicit Counter(int start) : total_(start) {}
    int add(int amount, int times);
    int total() const { return total_; }

private:
    int total_;
};

int Counter::add(int amount, int times) {
    total_ += amount * times;
    return total_;
}

Counter tally(100);

class Shape {
public:
    explicit Shape(int id);
    virtual ~Shape();
    virtual long area() const = 0;
    int id() const { return id_; }

private:
    int id_;
};

Shape::Shape(int id) : id_(id) {}
Shape::~Shape() { std::printf("~Shape %d\n", id_); }

class Rect : public Shape {
public:
    Rect(int id, long w, long h) : Shape(id), w_(w), h_(h) {}
    ~Rect() override;
    long area() const override;

private:
    long w_, h_;
};

Rect::~Rect() { std::printf("~Rect %d\n", id()); }
long Rect::area() const { return w_ * h_; }

long measure(const Shape &s) { return s.area(); }  // the virtual call

template <typename T>
T biggest(T a, T b) {
    return a > b ? a : b;
}
template int biggest<int>(int, int);
template long biggest<long>(long, long);

int twice(int x) { return 2 * x; }
long twice(long x) { return 2 * x + 1; }

int risky(int x) {
    if (x > 10)
        throw std::out_of_range("too big");
    return x - 1;
}

int guarded(int x) {
    try {
        return risky(x);
    } catch (const std::out_of_range &e) {
        std::printf("caught: %s\n", e.what());
        return -1;
    }
}

}  // namespace geo

int main(int argc, char **argv) {
    // one program function per statement: the call order is the same on every ISA
    bool show_this = argc > 1 && std::strcmp(argv[1], "this") == 0;
    int l = geo::level1(3);
    std::printf("level1: %d\n", l);
    if (show_this)
        std::printf("add: this=%p\n", static_cast<void *>(&geo::tally));
    int t = geo::tally.add(7, 3);
    std::printf("add: amount=7 times=3 -> %d\n", t);
    t = geo::tally.add(-2, 5);
    std::printf("add: amount=-2 times=5 -> %d\n", t);
    {
        geo::Rect r(4, 6, 7);
        long a = geo::measure(r);
        std::printf("measure: %ld\n", a);
    }
    int bi = geo::biggest(3, 9);
    long bl = geo::biggest(12L, 5L);
    std::printf("biggest: %d %ld\n", bi, bl);
    int ti = geo::twice(21);
    long tl = geo::twice(21L);
    std::printf("twice: %d %ld\n", ti, tl);
    int g1 = geo::guarded(5);
    int g2 = geo::guarded(50);
    std::printf("guarded: %d %d\n", g1, g2);
    for (int i = 0; i < geo::ncalls; i++)
        std::printf("log: %s(%d)\n", geo::calls[i].name, geo::calls[i].arg);
    return 0;
}
