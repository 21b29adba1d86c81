/*
 * glibc-simple: the C twin of glibc-simple in harness/src/workloads/cpu/glibc.rs, after
 * glibc's benchtests/bench-malloc-simple.c.
 *
 * One thread, whatever THREADS says (the output line still reports the THREADS given). For
 * each size of SIZES (16, 32, 64, 128, 256 B) and each batch length of BATCHES (25, 100,
 * 400, 1600): max(1, allocations / length) times allocate a batch of blocks of that size,
 * then free them in allocation order, where allocations = scaled(100 000). All of it timed;
 * the batch array is prepared before.
 *
 * operations = sum over sizes and lengths of 2 * max(1, allocations / length) * length.
 *
 * Differences from the Rust version: bench.h's (per-block tags instead of the size as the
 * tag, and the read-back at free; the batch array in mmap'd memory). Rust's glibc-simple
 * uses no generator; the seed reaches the checksum through the tags.
 */
#define BENCH_NAME "glibc-simple"
#include "bench.h"

static const size_t SIZES[] = {16, 32, 64, 128, 256};
static const size_t BATCHES[] = {25, 100, 400, 1600};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
#define NBATCHES (sizeof BATCHES / sizeof BATCHES[0])
#define ALLOCATIONS 100000

static void prepare(bench_worker *w)
{
    w->state = bench_mem(BATCHES[NBATCHES - 1] * sizeof(unsigned char *));
}

static void work(bench_worker *w)
{
    unsigned char **batch = w->state;
    uint64_t allocations = bench_scaled(w->args, ALLOCATIONS);
    uint8_t tag = w->salt;
    uint64_t ops = 0, sum = 0;
    for (size_t s = 0; s < NSIZES; s++) {
        size_t size = SIZES[s];
        for (size_t b = 0; b < NBATCHES; b++) {
            size_t len = BATCHES[b];
            uint64_t rounds = allocations / len;
            if (rounds == 0)
                rounds = 1;
            for (uint64_t r = 0; r < rounds; r++) {
                for (size_t k = 0; k < len; k++)
                    batch[k] = bench_alloc(size, tag++);
                for (size_t k = 0; k < len; k++)
                    sum += bench_release(batch[k], size);
            }
            ops += 2 * rounds * len;
        }
    }
    w->ops = ops;
    w->sum = sum;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    bench_result r = bench_run_timed(&a, 1, NULL, prepare, work);
    return bench_report(&a, r.ops, r.sum, r.ms);
}
