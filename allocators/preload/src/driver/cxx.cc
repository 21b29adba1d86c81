// C++'s operator new and delete under a preloaded heap: every form is the preload
// library's own symbol, blocks are aligned and usable, sized and aligned deletes free,
// a failed allocation calls the new handler and then throws std::bad_alloc, the nothrow
// forms return null, and threads allocate and free each other's blocks.
//
// Prints one line per check and "all ok"; any failure prints what and exits 1.
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

static void fail(const char *what)
{
    std::printf("FAILED: %s\n", what);
    std::exit(1);
}

#define CHECK(cond) \
    do {            \
        if (!(cond)) \
            fail(#cond); \
    } while (0)

// Escapes a pointer so that no new/delete pair can be elided.
static void *volatile sink;

static bool from_preload(const char *symbol, const char *library_part)
{
    void *address = dlsym(RTLD_DEFAULT, symbol);
    Dl_info info;
    return address && dladdr(address, &info) && info.dli_fname
        && std::strstr(info.dli_fname, library_part);
}

static void check_block(void *p, std::size_t size, std::size_t alignment, int fill)
{
    CHECK(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % alignment == 0);
    CHECK(malloc_usable_size(p) >= size);
    std::memset(p, fill, size);
    sink = p;
}

static int handler_calls;
static void handler()
{
    if (++handler_calls == 3)
        std::set_new_handler(nullptr);
}

int main(int argc, char **argv)
{
    const char *library_part = argc > 1 ? argv[1] : "alloclab_preload";
    static const char *const symbols[] = {
        "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
        "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
        "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
        "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t",
        "_ZdaPvRKSt9nothrow_t", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
        "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
        "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    };
    for (const char *symbol : symbols)
        if (!from_preload(symbol, library_part)) {
            std::printf("FAILED: %s is not the preload library's\n", symbol);
            return 1;
        }
    std::printf("symbols: ok %zu\n", sizeof symbols / sizeof symbols[0]);

    for (std::size_t size : {0, 1, 16, 24, 100, 1000, 5000, 70000, 3000000}) {
        void *p = ::operator new(size);
        check_block(p, size, 16, 1);
        ::operator delete(p, size);
        p = ::operator new[](size);
        check_block(p, size, 16, 2);
        ::operator delete[](p, size);
        p = ::operator new(size, std::nothrow);
        check_block(p, size, 16, 3);
        ::operator delete(p, std::nothrow);
        p = ::operator new[](size, std::nothrow);
        check_block(p, size, 16, 4);
        ::operator delete[](p);
        for (std::size_t alignment : {32, 64, 4096, 1 << 16, 1 << 21}) {
            std::align_val_t a{alignment};
            p = ::operator new(size, a);
            check_block(p, size, alignment, 5);
            ::operator delete(p, size, a);
            p = ::operator new[](size, a);
            check_block(p, size, alignment, 6);
            ::operator delete[](p, a);
            p = ::operator new(size, a, std::nothrow);
            check_block(p, size, alignment, 7);
            ::operator delete(p, a, std::nothrow);
            p = ::operator new[](size, a, std::nothrow);
            check_block(p, size, alignment, 8);
            ::operator delete[](p, size, a);
        }
    }
    // A wrong size at delete is the program's bug: the heap frees the block anyway, or
    // refuses it and aborts (randomized checks sizes), but never corrupts itself. In a
    // child, so that a refusal ends only the child.
    std::fflush(stdout);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        for (int i = 0; i < 1000; i++) {
            void *p = ::operator new(48);
            ::operator delete(p, 4000);
        }
        void *q = ::operator new(64);
        ::operator delete(q, 64);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0)
          || (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT));
    ::operator delete(nullptr);
    ::operator delete[](nullptr, 16);
    std::printf("forms: ok\n");

    const std::size_t impossible = SIZE_MAX / 2;
    bool thrown = false;
    try {
        sink = ::operator new(impossible);
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
    CHECK(::operator new(impossible, std::nothrow) == nullptr);
    CHECK(::operator new[](impossible, std::align_val_t{64}, std::nothrow) == nullptr);
    std::set_new_handler(handler);
    thrown = false;
    try {
        sink = ::operator new[](impossible);
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
    CHECK(handler_calls == 3);
    std::printf("failure: ok handler_calls=%d\n", handler_calls);

    // Threads: each allocates with new, hands half its blocks to the next thread, which
    // deletes them (a free from a thread the block's heap did not see allocate it).
    constexpr int threads = 4, rounds = 20000;
    std::vector<std::atomic<void *>> mailbox(threads);
    std::vector<std::thread> team;
    std::atomic<long> checksum{0};
    for (int t = 0; t < threads; t++)
        team.emplace_back([&, t] {
            long sum = 0;
            for (int i = 0; i < rounds; i++) {
                std::size_t size = 8 + (i * 37 + t * 11) % 600;
                auto *p = static_cast<unsigned char *>(::operator new(size));
                p[0] = static_cast<unsigned char>(i);
                p[size - 1] = static_cast<unsigned char>(t);
                if (i % 2) {
                    void *old = mailbox[(t + 1) % threads].exchange(p);
                    if (old) {
                        sum += static_cast<unsigned char *>(old)[0] & 1;
                        ::operator delete(old);
                    }
                } else {
                    sum += p[0] & 1;
                    ::operator delete(p, size);
                }
            }
            checksum += sum;
        });
    for (auto &t : team)
        t.join();
    for (auto &slot : mailbox)
        ::operator delete(slot.exchange(nullptr));
    CHECK(checksum.load() >= 0);
    std::printf("threads: ok %d\n", threads);
    std::printf("all ok\n");
    return 0;
}
