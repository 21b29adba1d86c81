/*
 * xmalloc-test: the C twin of harness/src/workloads/cpu/xmalloc.rs, producer/consumer after
 * Lever & Boreham's xmalloc-test ("malloc() Performance in a Multithreaded Linux
 * Environment", USENIX 2000).
 *
 * Each thread allocates batches of BATCH = 256 blocks of sizes 16-256 B (uniform, from a
 * 4096-entry table) and passes each batch to its neighbour (i + 1 mod n) over a ring whose
 * queues hold DEPTH = 4 batches; before filling a batch it frees (in allocation order) the
 * blocks of a batch its other neighbour passed it. Every block is freed by a thread other
 * than the one that allocated it (with one thread, by the same thread). The batch arrays
 * circulate, so the bookkeeping allocates nothing inside the timed region, and each thread
 * starts with DEPTH empty ones. scaled(BATCHES = 2048) batches per thread; the batches left
 * at the end are freed inside the timed region.
 *
 * operations = threads * 2 * batches * BATCH (each thread makes batches * BATCH mallocs and
 * as many frees; the program counts the calls it makes, which sum to the Rust constant).
 *
 * Differences from the Rust version: only bench.h's (per-block tags and the read-back at
 * free; bookkeeping in mmap'd memory; the ring's queues).
 */
#define BENCH_NAME "xmalloc-test"
#include "bench.h"

#define BATCH 256
#define DEPTH 4
#define MIN_SIZE 16
#define MAX_SIZE 256
#define BATCHES 2048

typedef struct {
    size_t len;
    bench_block blocks[BATCH];
} batch;

typedef struct {
    bench_ring ring;
    uint64_t batches;
} shared_state;

typedef struct {
    bench_ring_end ring;
    bench_table sizes;
} thread_state;

static uint64_t free_all(batch *b, uint64_t *ops)
{
    uint64_t sum = 0;
    for (size_t k = 0; k < b->len; k++)
        sum += bench_block_free(b->blocks[k]);
    *ops += b->len;
    b->len = 0;
    return sum;
}

static void prepare(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = bench_mem(sizeof *st);
    st->ring = bench_ring_join(&sh->ring, w->index);
    batch *empty = bench_mem(DEPTH * sizeof(batch));
    for (size_t d = 0; d < DEPTH; d++) {
        empty[d].len = 0;
        bench_ring_restock(&st->ring, &empty[d]);
    }
    bench_rng rng = bench_thread_rng(w->args->seed, w->index);
    st->sizes = bench_uniform_sizes(4096, &rng, MIN_SIZE, MAX_SIZE);
    w->state = st;
}

static void work(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = w->state;
    bench_ring_end ring = st->ring;
    bench_table sizes = st->sizes;
    uint8_t tag = w->salt;
    uint64_t ops = 0, sum = 0;
    for (uint64_t n = 0; n < sh->batches; n++) {
        batch *b = bench_ring_next(&ring);
        sum += free_all(b, &ops);
        for (size_t k = 0; k < BATCH; k++)
            b->blocks[k] = bench_block_new(bench_table_next(&sizes), tag++);
        b->len = BATCH;
        ops += BATCH;
        bench_ring_pass(&ring, b);
    }
    for (batch *b; (b = bench_ring_finish(&ring)) != NULL;)
        sum += free_all(b, &ops);
    w->ops = ops;
    w->sum = sum;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    shared_state sh = {bench_ring_new(a.threads, DEPTH), bench_scaled(&a, BATCHES)};
    bench_result r = bench_run_timed(&a, a.threads, &sh, prepare, work);
    return bench_report(&a, r.ops, r.sum, r.ms);
}
