/*
 * percall.cc: what one call of the C allocation API costs, one operation at a time.
 *
 *   percall OP SIZE ITERATIONS
 *
 * OP is one of
 *
 *   malloc          malloc(SIZE)
 *   free            free(p), p from malloc(SIZE)               (C's free: no size)
 *   calloc          calloc(1, SIZE)
 *   realloc-same    realloc(p, SIZE - SIZE/8), p from malloc(SIZE): the same size class
 *                   on every heap alloclab knows, so it stays in place where the heap can
 *   realloc-grow    realloc(p, 2*SIZE + 16), p from malloc(SIZE): usually moves
 *   posix-memalign  posix_memalign(&p, 64, SIZE)
 *   usable-size     malloc_usable_size(p), p from malloc(SIZE)
 *   new             ::operator new(SIZE)
 *   delete          ::operator delete(p), p from ::operator new(SIZE)
 *   delete-sized    ::operator delete(p, SIZE), p from ::operator new(SIZE)
 *   new-aligned     ::operator new(SIZE, std::align_val_t(64))
 *   new-nothrow     ::operator new(SIZE, std::nothrow)
 *   floor           p = percall_empty(SIZE): the same loop calling an empty function
 *
 * SIZE is 1 to 2^30 bytes, ITERATIONS 1 to 10^12 calls.
 *
 * Method. The calls are made in rounds over a batch of B = min(1000, ITERATIONS) blocks
 * (the last round takes what is left): a round makes the batch's blocks, runs the measured
 * operation over it, and frees what is left. Only the measured operation is timed:
 * clock_gettime(CLOCK_MONOTONIC) before and after the whole batch, summed over the rounds.
 * So for `free` and the `delete`s the batch allocated by malloc or operator new is the
 * untimed setup, for `malloc` and the `new`s the frees are the untimed teardown, and for
 * the reallocs and `usable-size` both are. Before the first round, one round runs
 * untimed (the heap's first-use costs: its first span, arena or thread cache).
 *
 * Every measured batch is a function of its own named `percall_timed_<op>` (the op with
 * underscores: percall_timed_realloc_same), declared extern "C", noinline and noipa (no
 * clones, no inference across the call), so that a profiler can collect inside it alone,
 * e.g. valgrind --tool=callgrind --toggle-collect=percall_timed_malloc. The untimed warm-up
 * round runs a twin with the same body named `percall_warm_<op>`, which such a profiler
 * does not count. `percall_timed_floor` is the loop with an empty function in place of the
 * allocator call: what the loop, the call, the return and the store into the batch cost.
 *
 * Nothing lets the compiler drop a call: every result goes through an asm barrier that
 * takes it in a register and clobbers memory, the batch lives behind a pointer that
 * escapes, and the allocating and freeing halves of every round are in different noipa
 * functions, so no new/delete pair is ever visible to the optimiser as a pair.
 *
 * Output, on success (exit 0), one line on standard output:
 *
 *   percall op=OP size=SIZE calls=N ns_total=T
 *
 * where N is ITERATIONS and T the nanoseconds summed over the timed batches; the two
 * reallocs add ` moved=M`, the number of calls whose result differs from the block they
 * were given. Bad arguments exit 2 with a usage line on standard error; a failed
 * allocation exits 1 naming the op and the size.
 */

#include <malloc.h>

#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

namespace {

const std::size_t BATCH = 1000;
const std::size_t MAX_SIZE = std::size_t(1) << 30;
const std::uint64_t MAX_ITERATIONS = 1000000000000ULL;
const std::size_t ALIGNMENT = 64;

/* Keeps a value the compiler must have computed: it is taken in a register by an asm
 * statement that may read and write any memory. */
inline void keep(const void *p) { asm volatile("" : : "r"(p) : "memory"); }
inline void keep_size(std::size_t n) { asm volatile("" : : "r"(n) : "memory"); }

std::uint64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ULL + std::uint64_t(ts.tv_nsec);
}

}  // namespace

/* The floor's callee: nothing, out of the optimiser's sight. */
extern "C" __attribute__((noinline, noipa)) void *percall_empty(std::size_t size) {
  asm volatile("");
  return reinterpret_cast<void *>(size);
}

/* One measured batch: `p` holds `n` blocks (or is filled with them), `size` is the size the
 * operation is given. The timed function and its warm-up twin have the same body. */
#define PERCALL_OP(name, body)                                                          \
  extern "C" __attribute__((noinline, noipa)) void percall_timed_##name(                \
      void **p, std::size_t n, std::size_t size) {                                     \
    (void)size;                                                                         \
    for (std::size_t i = 0; i < n; i++) {                                              \
      body;                                                                             \
    }                                                                                   \
  }                                                                                     \
  extern "C" __attribute__((noinline, noipa)) void percall_warm_##name(                 \
      void **p, std::size_t n, std::size_t size) {                                     \
    (void)size;                                                                         \
    for (std::size_t i = 0; i < n; i++) {                                              \
      body;                                                                             \
    }                                                                                   \
  }

static std::size_t usable_sink;

PERCALL_OP(floor, p[i] = percall_empty(size); keep(p[i]))
PERCALL_OP(malloc, p[i] = std::malloc(size); keep(p[i]))
PERCALL_OP(free, std::free(p[i]); keep(p))
PERCALL_OP(calloc, p[i] = std::calloc(1, size); keep(p[i]))
PERCALL_OP(realloc_same, p[i] = std::realloc(p[i], size); keep(p[i]))
PERCALL_OP(realloc_grow, p[i] = std::realloc(p[i], size); keep(p[i]))
PERCALL_OP(posix_memalign, if (posix_memalign(&p[i], ALIGNMENT, size) != 0) p[i] = nullptr;
           keep(p[i]))
PERCALL_OP(usable_size, std::size_t u = malloc_usable_size(p[i]); keep_size(u);
           usable_sink += u)
PERCALL_OP(new, p[i] = ::operator new(size); keep(p[i]))
PERCALL_OP(delete, ::operator delete(p[i]); keep(p))
PERCALL_OP(delete_sized, ::operator delete(p[i], size); keep(p))
PERCALL_OP(new_aligned, p[i] = ::operator new(size, std::align_val_t(ALIGNMENT)); keep(p[i]))
PERCALL_OP(new_nothrow, p[i] = ::operator new(size, std::nothrow); keep(p[i]))

namespace {

typedef void (*batch_fn)(void **, std::size_t, std::size_t);

/* How a round makes its blocks before the measured batch. */
enum Setup { SETUP_NONE, SETUP_MALLOC, SETUP_NEW };
/* How a round frees what is left after it. */
enum Teardown { TEARDOWN_NONE, TEARDOWN_FREE, TEARDOWN_DELETE, TEARDOWN_DELETE_ALIGNED };
/* The size the measured operation is given. */
enum Resize { RESIZE_NONE, RESIZE_SAME_CLASS, RESIZE_GROW };

struct Op {
  const char *name;
  batch_fn timed;
  batch_fn warm;
  Setup setup;
  Teardown teardown;
  Resize resize;
  bool allocates; /* whether the batch's results are blocks to check for failure */
};

#define OP(cli, c, setup, teardown, resize, allocates) \
  { cli, percall_timed_##c, percall_warm_##c, setup, teardown, resize, allocates }

const Op OPS[] = {
    OP("malloc", malloc, SETUP_NONE, TEARDOWN_FREE, RESIZE_NONE, true),
    OP("free", free, SETUP_MALLOC, TEARDOWN_NONE, RESIZE_NONE, false),
    OP("calloc", calloc, SETUP_NONE, TEARDOWN_FREE, RESIZE_NONE, true),
    OP("realloc-same", realloc_same, SETUP_MALLOC, TEARDOWN_FREE, RESIZE_SAME_CLASS, true),
    OP("realloc-grow", realloc_grow, SETUP_MALLOC, TEARDOWN_FREE, RESIZE_GROW, true),
    OP("posix-memalign", posix_memalign, SETUP_NONE, TEARDOWN_FREE, RESIZE_NONE, true),
    OP("usable-size", usable_size, SETUP_MALLOC, TEARDOWN_FREE, RESIZE_NONE, false),
    OP("new", new, SETUP_NONE, TEARDOWN_DELETE, RESIZE_NONE, true),
    OP("delete", delete, SETUP_NEW, TEARDOWN_NONE, RESIZE_NONE, false),
    OP("delete-sized", delete_sized, SETUP_NEW, TEARDOWN_NONE, RESIZE_NONE, false),
    OP("new-aligned", new_aligned, SETUP_NONE, TEARDOWN_DELETE_ALIGNED, RESIZE_NONE, true),
    OP("new-nothrow", new_nothrow, SETUP_NONE, TEARDOWN_DELETE, RESIZE_NONE, true),
    OP("floor", floor, SETUP_NONE, TEARDOWN_NONE, RESIZE_NONE, false),
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr, "percall: %s\nusage: percall OP SIZE ITERATIONS\n  OP:", why);
  for (const Op &op : OPS) std::fprintf(stderr, " %s", op.name);
  std::fprintf(stderr, "\n  SIZE: 1 to %zu bytes; ITERATIONS: 1 to %" PRIu64 " calls\n",
               MAX_SIZE, MAX_ITERATIONS);
  std::exit(2);
}

[[noreturn]] void failed(const Op &op, std::size_t size) {
  std::fprintf(stderr, "percall: %s of %zu bytes failed\n", op.name, size);
  std::exit(1);
}

/* A decimal number in [1, max], or usage(). */
std::uint64_t number(const char *text, std::uint64_t max, const char *what) {
  char why[128];
  if (text[0] < '0' || text[0] > '9') {
    std::snprintf(why, sizeof why, "%s '%s' is not a decimal number", what, text);
    usage(why);
  }
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v == 0 || v > max) {
    std::snprintf(why, sizeof why, "%s '%s' is not in 1..=%" PRIu64, what, text, max);
    usage(why);
  }
  return v;
}

/* The blocks of one round, allocated before the measured batch. */
void setup(const Op &op, void **p, std::size_t n, std::size_t size) {
  for (std::size_t i = 0; i < n; i++) {
    switch (op.setup) {
      case SETUP_NONE:
        p[i] = nullptr;
        break;
      case SETUP_MALLOC:
        p[i] = std::malloc(size);
        if (p[i] == nullptr) failed(op, size);
        break;
      case SETUP_NEW:
        p[i] = ::operator new(size);
        break;
    }
  }
}

void teardown(const Op &op, void **p, std::size_t n) {
  for (std::size_t i = 0; i < n; i++) {
    switch (op.teardown) {
      case TEARDOWN_NONE:
        break;
      case TEARDOWN_FREE:
        std::free(p[i]);
        break;
      case TEARDOWN_DELETE:
        ::operator delete(p[i]);
        break;
      case TEARDOWN_DELETE_ALIGNED:
        ::operator delete(p[i], std::align_val_t(ALIGNMENT));
        break;
    }
  }
}

/* One round: setup, the batch (timed or not), the checks, the teardown. Returns the
 * batch's nanoseconds (0 untimed) and adds to *moved the blocks a realloc moved. */
std::uint64_t run_round(const Op &op, bool timed, void **p, void **old, std::size_t n,
                    std::size_t size, std::size_t op_size, std::uint64_t *moved) {
  setup(op, p, n, size);
  std::memcpy(old, p, n * sizeof *p);
  std::uint64_t ns = 0;
  if (timed) {
    std::uint64_t t0 = now_ns();
    op.timed(p, n, op_size);
    std::uint64_t t1 = now_ns();
    ns = t1 - t0;
  } else {
    op.warm(p, n, op_size);
  }
  for (std::size_t i = 0; i < n; i++) {
    if (op.allocates && p[i] == nullptr) {
      /* A failed realloc leaves its block live: free it with the rest. */
      if (op.resize != RESIZE_NONE) p[i] = old[i];
      teardown(op, p, n);
      failed(op, op_size);
    }
    if (op.resize != RESIZE_NONE && p[i] != old[i]) *moved += 1;
  }
  teardown(op, p, n);
  return ns;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 4) usage("expected three arguments");
  const Op *op = nullptr;
  for (const Op &o : OPS) {
    if (std::strcmp(o.name, argv[1]) == 0) op = &o;
  }
  if (op == nullptr) {
    char why[128];
    std::snprintf(why, sizeof why, "unknown op '%s'", argv[1]);
    usage(why);
  }
  std::size_t size = std::size_t(number(argv[2], MAX_SIZE, "SIZE"));
  std::uint64_t iterations = number(argv[3], MAX_ITERATIONS, "ITERATIONS");
  std::size_t op_size = size;
  if (op->resize == RESIZE_SAME_CLASS) op_size = size - size / 8;
  if (op->resize == RESIZE_GROW) op_size = 2 * size + 16;

  std::size_t batch = iterations < BATCH ? std::size_t(iterations) : BATCH;
  /* The batch's pointers live outside the heap under test. */
  static void *blocks[BATCH];
  static void *given[BATCH];
  void **p = blocks;
  void **old = given;
  std::uint64_t moved = 0;
  std::uint64_t ns_total = 0;
  try {
    run_round(*op, false, p, old, batch, size, op_size, &moved);
    moved = 0;
    for (std::uint64_t left = iterations; left > 0;) {
      std::size_t n = left < batch ? std::size_t(left) : batch;
      ns_total += run_round(*op, true, p, old, n, size, op_size, &moved);
      left -= n;
    }
  } catch (const std::bad_alloc &) {
    failed(*op, op_size);
  }
  std::printf("percall op=%s size=%zu calls=%" PRIu64 " ns_total=%" PRIu64, op->name, size,
              iterations, ns_total);
  if (op->resize != RESIZE_NONE) std::printf(" moved=%" PRIu64, moved);
  std::printf("\n");
  return std::fflush(stdout) == 0 ? 0 : 1;
}
