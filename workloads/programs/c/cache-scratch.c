/*
 * cache-scratch: the C twin of cache-scratch in harness/src/workloads/cpu/cache.rs, passive
 * false sharing after Berger et al.'s Hoard benchmarks ("Hoard: A Scalable Memory Allocator
 * for Multithreaded Applications", ASPLOS 2000).
 *
 * Before the team starts, the main thread allocates one 8-byte object per thread, back to
 * back (so that neighbours are likely to share a cache line); thread i takes object i while
 * it prepares. Timed: each thread frees the object it was given, then runs cache-thrash's
 * loop: scaled(120 000) times allocate an 8-byte object, write it 1000 times (volatile byte
 * writes, each read back) and free it. An allocator that hands the freed object back to the
 * thread that freed it keeps the neighbours on one line for the whole run.
 *
 * operations = threads * (1 + 2 * objects) (the main thread's allocations are not counted,
 * the threads' frees of them are).
 *
 * Differences from the Rust version: bench.h's (per-block tags and the read-back at free),
 * and the scribble writes (pass + k + tag) instead of (pass + k), so that the written bytes,
 * whose sum goes into the checksum, depend on the seed (Rust's cache workloads use no
 * generator at all). The scribble's byte sum is folded into the checksum instead of being
 * passed to black_box.
 */
#define BENCH_NAME "cache-scratch"
#include "bench.h"

typedef struct {
    unsigned char **given; /* object i, allocated by the main thread for thread i */
} shared_state;

static void prepare(bench_worker *w)
{
    shared_state *sh = w->shared;
    w->state = sh->given[w->index];
}

static void work(bench_worker *w)
{
    uint64_t objects = bench_scaled(w->args, BENCH_CACHE_OBJECTS);
    /* The given object has this thread's first tag; its own objects the following ones. */
    uint8_t tag = (uint8_t)(w->salt + 1);
    uint64_t ops = 1;
    uint64_t sum = bench_release(w->state, BENCH_CACHE_OBJECT_SIZE);
    sum += bench_cache_churn(objects, &tag, &ops);
    w->ops = ops;
    w->sum = sum;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    shared_state sh = {bench_mem(a.threads * sizeof(unsigned char *))};
    /* Allocated back to back by one thread, so that neighbours are likely to share a line. */
    for (size_t i = 0; i < a.threads; i++)
        sh.given[i] = bench_alloc(BENCH_CACHE_OBJECT_SIZE, bench_salt(a.seed, i));
    bench_result r = bench_run_timed(&a, a.threads, &sh, prepare, work);
    return bench_report(&a, r.ops, r.sum, r.ms);
}
