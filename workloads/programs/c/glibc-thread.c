/*
 * glibc-thread: the C twin of glibc-thread in harness/src/workloads/cpu/glibc.rs, after
 * glibc's benchtests/bench-malloc-thread.c.
 *
 * Every thread keeps a private working set of WORKING_SET = 4096 slots, empty at the start;
 * a step picks a random slot (from an 8191-entry table), frees its block if it has one and
 * allocates a new one of a random size (from an 8192-entry table), 16 B-4 KiB log-uniform.
 * Nothing is shared between threads. scaled(2^19) steps per thread; the working set left
 * at the end is freed inside the timed region.
 *
 * operations = threads * 2 * steps (every block allocated is freed, during the steps or at
 * the end; the program counts the calls it makes).
 *
 * Differences from the Rust version: only bench.h's (per-block tags and the read-back at
 * free; the tables and the working set in mmap'd memory).
 */
#define BENCH_NAME "glibc-thread"
#include "bench.h"

#define WORKING_SET 4096
#define MIN_SIZE 16
#define MAX_SIZE 4096
#define STEPS (1u << 19)

typedef struct {
    bench_table picks;
    bench_table sizes;
    bench_block *slots;
} thread_state;

static void prepare(bench_worker *w)
{
    thread_state *st = bench_mem(sizeof *st);
    bench_rng rng = bench_thread_rng(w->args->seed, w->index);
    /* Coprime lengths: the (slot, size) sequence does not repeat within a run. */
    st->picks = bench_indices(8191, &rng, WORKING_SET);
    st->sizes = bench_table_new(8192);
    for (size_t k = 0; k < st->sizes.len; k++)
        st->sizes.values[k] = (uint32_t)bench_log_uniform_size(&rng, MIN_SIZE, MAX_SIZE);
    st->slots = bench_mem(WORKING_SET * sizeof(bench_block)); /* zeroed: every slot empty */
    w->state = st;
}

static void work(bench_worker *w)
{
    thread_state *st = w->state;
    bench_table picks = st->picks, sizes = st->sizes;
    bench_block *slots = st->slots;
    uint64_t steps = bench_scaled(w->args, STEPS);
    uint8_t tag = w->salt;
    uint64_t ops = 0, sum = 0;
    for (uint64_t n = 0; n < steps; n++) {
        bench_block *slot = &slots[bench_table_next(&picks)];
        if (slot->ptr) {
            sum += bench_block_free(*slot);
            ops++;
        }
        *slot = bench_block_new(bench_table_next(&sizes), tag++);
        ops++;
    }
    for (size_t k = 0; k < WORKING_SET; k++) {
        if (slots[k].ptr) {
            sum += bench_block_free(slots[k]);
            ops++;
        }
    }
    w->ops = ops;
    w->sum = sum;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    bench_result r = bench_run_timed(&a, a.threads, NULL, prepare, work);
    return bench_report(&a, r.ops, r.sum, r.ms);
}
