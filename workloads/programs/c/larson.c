/*
 * larson: the C twin of harness/src/workloads/cpu/larson.rs, a server simulation after
 * Larson & Krishnan, "Memory allocation for long-running server applications" (ISMM 1998).
 *
 * Each thread owns ARRAYS = 2 arrays of SLOTS = 500 blocks of sizes 16-1000 B (uniform). A
 * round takes one array and runs STEPS_PER_ROUND = 1000 steps on it: pick a random slot,
 * free its block, allocate a new one of a random size. After the round the thread passes the
 * array to the next thread (i + 1 mod n) over a ring whose queues hold ARRAYS arrays; its
 * next round works on its own second array, then on arrays its predecessor passed, so most
 * frees are of blocks another thread allocated. scaled(ROUNDS = 512) rounds per thread.
 * The initial fill is untimed and uncounted; the final free of every array left to a thread
 * is timed and counted. Slot picks come from a 4095-entry table, sizes from a 4096-entry
 * table, drawn after the fill from the thread's generator, as in Rust.
 *
 * operations = threads * (2 * STEPS_PER_ROUND * rounds + ARRAYS * SLOTS).
 *
 * Differences from the Rust version: only bench.h's (per-block tags and the read-back at
 * free; bookkeeping in mmap'd memory; the ring's queues). A slot is a {pointer, size} pair,
 * as Rust's Option<Block>; it is never empty between steps, so the free is unconditional.
 */
#define BENCH_NAME "larson"
#include "bench.h"

#define ARRAYS 2
#define SLOTS 500
#define MIN_SIZE 16
#define MAX_SIZE 1000
#define STEPS_PER_ROUND 1000
#define ROUNDS 512

typedef struct {
    bench_ring ring;
    uint64_t rounds;
} shared_state;

typedef struct {
    bench_ring_end ring;
    bench_table picks;
    bench_table sizes;
    uint8_t tag;
} thread_state;

static void prepare(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = bench_mem(sizeof *st);
    st->ring = bench_ring_join(&sh->ring, w->index);
    bench_rng rng = bench_thread_rng(w->args->seed, w->index);
    uint8_t tag = w->salt;
    for (size_t a = 0; a < ARRAYS; a++) {
        bench_block *slots = bench_mem(SLOTS * sizeof(bench_block));
        for (size_t s = 0; s < SLOTS; s++)
            slots[s] = bench_block_new(bench_range_incl(&rng, MIN_SIZE, MAX_SIZE), tag++);
        bench_ring_restock(&st->ring, slots);
    }
    /* Coprime lengths: the (slot, size) sequence does not repeat within a run. */
    st->picks = bench_indices(4095, &rng, SLOTS);
    st->sizes = bench_uniform_sizes(4096, &rng, MIN_SIZE, MAX_SIZE);
    st->tag = tag;
    w->state = st;
}

static void work(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = w->state;
    bench_ring_end ring = st->ring;
    bench_table picks = st->picks, sizes = st->sizes;
    uint8_t tag = st->tag;
    uint64_t ops = 0, sum = 0;
    for (uint64_t r = 0; r < sh->rounds; r++) {
        bench_block *slots = bench_ring_next(&ring);
        for (size_t s = 0; s < STEPS_PER_ROUND; s++) {
            bench_block *slot = &slots[bench_table_next(&picks)];
            sum += bench_block_free(*slot);
            *slot = bench_block_new(bench_table_next(&sizes), tag++);
        }
        ops += 2 * STEPS_PER_ROUND;
        bench_ring_pass(&ring, slots);
    }
    for (bench_block *slots; (slots = bench_ring_finish(&ring)) != NULL;) {
        for (size_t s = 0; s < SLOTS; s++) {
            sum += bench_block_free(slots[s]);
            ops++;
        }
    }
    w->ops = ops;
    w->sum = sum;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    shared_state sh = {bench_ring_new(a.threads, ARRAYS), bench_scaled(&a, ROUNDS)};
    bench_result r = bench_run_timed(&a, a.threads, &sh, prepare, work);
    return bench_report(&a, r.ops, r.sum, r.ms);
}
