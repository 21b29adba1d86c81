// One C++ heap misuse, named by the first argument, through the C++ allocation functions
// of whatever heap the process has (a preload library's under LD_PRELOAD): a delete that
// does not match its new, and a sized delete with the wrong size. Built at -O0, so that
// the compiler keeps every new and delete as written.
//
// A program still alive at the end writes "survived" and exits 0: the misuse went
// unnoticed. Exit 2: unknown case or bad arguments.
#include <cstdio>
#include <cstring>
#include <new>
#include <unistd.h>

static void *volatile sink;

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: misuse-cxx CASE\n");
        return 2;
    }
    const char *c = argv[1];
    if (!std::strcmp(c, "delete_of_new_array")) {
        sink = ::operator new[](64);
        ::operator delete(sink);
    } else if (!std::strcmp(c, "delete_array_of_new")) {
        sink = ::operator new(64);
        ::operator delete[](sink);
    } else if (!std::strcmp(c, "sized_delete_wrong_size")) {
        sink = ::operator new(48);
        ::operator delete(sink, 4000);
    } else {
        std::fprintf(stderr, "usage: misuse-cxx CASE (unknown case %s)\n", c);
        return 2;
    }
    for (int i = 0; i < 16; i++)
        ::operator delete(::operator new(16 + i * 60));
    ssize_t ignored = write(1, "survived\n", 9);
    (void)ignored;
    return 0;
}
