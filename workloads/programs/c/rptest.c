/*
 * rptest: the C twin of harness/src/workloads/cpu/rptest.rs, random sizes with cross-thread
 * frees in the style of rpmalloc's rpmalloc-benchmark (Mattias Jansson).
 *
 * Each thread repeatedly allocates a batch of BATCH = 256 blocks of random sizes 16 B-16 KiB
 * (log-uniform, from a 4096-entry table), alternately into the half it keeps and the half it
 * hands on; frees the kept half itself, passes the other half to the next thread (i + 1 mod
 * n) over a ring whose queues hold DEPTH = 4 half-batches, and, before each batch, frees a
 * half its predecessor passed it. Half of all frees are remote. The half-batch arrays
 * circulate; each thread starts with DEPTH empty ones. scaled(BATCHES = 1024) batches per
 * thread; the half-batches left at the end are freed inside the timed region.
 *
 * operations = threads * 2 * batches * BATCH (the program counts the calls it makes, which
 * sum to the Rust constant).
 *
 * Differences from the Rust version: only bench.h's (per-block tags and the read-back at
 * free; bookkeeping in mmap'd memory; the ring's queues).
 */
#define BENCH_NAME "rptest"
#include "bench.h"

#define BATCH 256
#define HALF (BATCH / 2)
#define DEPTH 4
#define MIN_SIZE 16
#define MAX_SIZE (16 * 1024)
#define BATCHES 1024

typedef struct {
    size_t len;
    bench_block blocks[HALF];
} half_batch;

typedef struct {
    bench_ring ring;
    uint64_t batches;
} shared_state;

typedef struct {
    bench_ring_end ring;
    bench_table sizes;
    half_batch *kept;
} thread_state;

static uint64_t free_all(half_batch *h, uint64_t *ops)
{
    uint64_t sum = 0;
    for (size_t k = 0; k < h->len; k++)
        sum += bench_block_free(h->blocks[k]);
    *ops += h->len;
    h->len = 0;
    return sum;
}

static void prepare(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = bench_mem(sizeof *st);
    st->ring = bench_ring_join(&sh->ring, w->index);
    half_batch *empty = bench_mem((DEPTH + 1) * sizeof(half_batch));
    for (size_t d = 0; d < DEPTH; d++) {
        empty[d].len = 0;
        bench_ring_restock(&st->ring, &empty[d]);
    }
    bench_rng rng = bench_thread_rng(w->args->seed, w->index);
    st->sizes = bench_table_new(4096);
    for (size_t k = 0; k < st->sizes.len; k++)
        st->sizes.values[k] = (uint32_t)bench_log_uniform_size(&rng, MIN_SIZE, MAX_SIZE);
    st->kept = &empty[DEPTH];
    st->kept->len = 0;
    w->state = st;
}

static void work(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = w->state;
    bench_ring_end ring = st->ring;
    bench_table sizes = st->sizes;
    half_batch *kept = st->kept;
    uint8_t tag = w->salt;
    uint64_t ops = 0, sum = 0;
    for (uint64_t n = 0; n < sh->batches; n++) {
        half_batch *handed = bench_ring_next(&ring);
        sum += free_all(handed, &ops);
        for (size_t k = 0; k < HALF; k++) {
            kept->blocks[k] = bench_block_new(bench_table_next(&sizes), tag++);
            handed->blocks[k] = bench_block_new(bench_table_next(&sizes), tag++);
        }
        kept->len = HALF;
        handed->len = HALF;
        ops += BATCH;
        sum += free_all(kept, &ops);
        bench_ring_pass(&ring, handed);
    }
    for (half_batch *h; (h = bench_ring_finish(&ring)) != NULL;)
        sum += free_all(h, &ops);
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
