/*
 * cache-thrash: the C twin of cache-thrash in harness/src/workloads/cpu/cache.rs, active
 * false sharing after Berger et al.'s Hoard benchmarks ("Hoard: A Scalable Memory Allocator
 * for Multithreaded Applications", ASPLOS 2000).
 *
 * Each thread repeatedly allocates an 8-byte object, writes it 1000 times (volatile byte
 * writes, each read back, as Hoard does) and frees it: scaled(120 000) objects per thread.
 * An allocator that carves different threads' small objects from one cache line makes the
 * writes bounce that line between cores. Nothing is prepared; the whole loop is timed.
 *
 * operations = threads * 2 * objects.
 *
 * Differences from the Rust version: bench.h's (per-block tags and the read-back at free),
 * and the scribble writes (pass + k + tag) instead of (pass + k), so that the written bytes,
 * whose sum goes into the checksum, depend on the seed (Rust's cache workloads use no
 * generator at all). The scribble's byte sum is folded into the checksum instead of being
 * passed to black_box.
 */
#define BENCH_NAME "cache-thrash"
#include "bench.h"

static void prepare(bench_worker *w)
{
    (void)w;
}

static void work(bench_worker *w)
{
    uint64_t objects = bench_scaled(w->args, BENCH_CACHE_OBJECTS);
    uint8_t tag = w->salt;
    uint64_t ops = 0;
    w->sum = bench_cache_churn(objects, &tag, &ops);
    w->ops = ops;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    bench_result r = bench_run_timed(&a, a.threads, NULL, prepare, work);
    return bench_report(&a, r.ops, r.sum, r.ms);
}
