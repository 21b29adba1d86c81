/*
 * mstress: the C twin of harness/src/workloads/cpu/mstress.rs, mixed sizes, long-lived
 * blocks and blocks swapped between threads, after mimalloc's test/test-stress.c (Leijen et
 * al.).
 *
 * Each thread runs scaled(ROUNDS = 512) rounds of STEPS_PER_ROUND = 1000 steps. A step
 * allocates a block (99 in 100 of 16 B-1 KiB, 1 in 100 of 1 KiB-256 KiB, both log-uniform,
 * from a 4096-entry table); one block in 4 goes to the thread's retained set of at most
 * RETAINED = 1000 long-lived blocks (replacing, and freeing, a random one once the set is
 * full), the others to the round's data set. Then with probability 66/100 a random data
 * block is freed, and with probability 1/4 a random data block is swapped into a random slot
 * of a shared array of TRANSFERS = 1024 atomic pointers, and whatever was there (another
 * thread's block, usually) takes its place. The choices come from a 4093-entry table of
 * random words, read exactly as Rust reads it. The data set is freed at the end of each
 * round, the retained set at the end of the run (both timed), the blocks still in the
 * transfer array by the main thread afterwards (counted, not timed). Each block carries a
 * header in its first 8 bytes, written after the touch, read when a block is taken from the
 * transfer array.
 *
 * operations = 2 * threads * rounds * STEPS_PER_ROUND: every block allocated is freed once,
 * by some thread or by the main thread at the end. Which thread frees which block, and so
 * how far each thread reads its word table, depends on the interleaving (as in Rust); the
 * count and the checksum do not.
 *
 * Differences from the Rust version: bench.h's (per-block tags, bookkeeping in mmap'd
 * memory). The header holds the size in its low 32 bits and the block's tag above them
 * (Rust: the size alone, as a usize); every free reads the header back (instead of bench.h's
 * first byte, which the header overwrites) and adds its hash to the checksum.
 */
#define BENCH_NAME "mstress"
#include "bench.h"

#define STEPS_PER_ROUND 1000
#define RETAINED 1000
#define TRANSFERS 1024
#define ROUNDS 512
#define MIN_SIZE 16
#define SMALL_MAX 1024
#define LARGE_MAX (256 * 1024)

typedef struct {
    _Atomic(unsigned char *) *transfer;
    uint64_t rounds;
} shared_state;

typedef struct {
    bench_table sizes;
    bench_table words;
    bench_block *data;
    bench_block *retained;
} thread_state;

/* Allocates and touches a block, then writes its header (volatile: the header is read
 * back, but a store the compiler sees freed unread could be dropped). */
static inline bench_block new_block(size_t size, uint8_t tag)
{
    bench_block b = bench_block_new(size, tag);
    *(volatile uint64_t *)b.ptr = (uint64_t)size | (uint64_t)tag << 32;
    return b;
}

static inline uint64_t header(const unsigned char *p)
{
    return *(const volatile uint64_t *)p;
}

/* Reads the header back, frees the block and returns its share of the checksum. */
static inline uint64_t free_block(unsigned char *p)
{
    uint64_t h = header(p);
    free(p);
    return bench_mix(h);
}

static void prepare(bench_worker *w)
{
    thread_state *st = bench_mem(sizeof *st);
    bench_rng rng = bench_thread_rng(w->args->seed, w->index);
    st->sizes = bench_table_new(4096);
    for (size_t k = 0; k < st->sizes.len; k++) {
        size_t size = bench_ratio(&rng, 1, 100)
                          ? bench_log_uniform_size(&rng, SMALL_MAX, LARGE_MAX)
                          : bench_log_uniform_size(&rng, MIN_SIZE, SMALL_MAX);
        st->sizes.values[k] = (uint32_t)size;
    }
    /* Odd length, coprime with the size table's. */
    st->words = bench_table_new(4093);
    for (size_t k = 0; k < st->words.len; k++)
        st->words.values[k] = bench_next_u32(&rng);
    st->data = bench_mem(STEPS_PER_ROUND * sizeof(bench_block));
    st->retained = bench_mem(RETAINED * sizeof(bench_block));
    w->state = st;
}

static void work(bench_worker *w)
{
    shared_state *sh = w->shared;
    thread_state *st = w->state;
    bench_table sizes = st->sizes, words = st->words;
    bench_block *data = st->data, *retained = st->retained;
    size_t ndata = 0, nretained = 0;
    uint8_t tag = w->salt;
    uint64_t ops = 0, sum = 0;
    for (uint64_t r = 0; r < sh->rounds; r++) {
        for (size_t s = 0; s < STEPS_PER_ROUND; s++) {
            bench_block block = new_block(bench_table_next(&sizes), tag++);
            ops++;
            if (bench_table_next(&words) % 4 == 0) {
                if (nretained < RETAINED) {
                    retained[nretained++] = block;
                } else {
                    size_t k = bench_pick(bench_table_next(&words), RETAINED);
                    bench_block old = retained[k];
                    retained[k] = block;
                    sum += free_block(old.ptr);
                    ops++;
                }
            } else {
                data[ndata++] = block;
            }
            if (bench_table_next(&words) % 100 < 66 && ndata > 0) {
                size_t k = bench_pick(bench_table_next(&words), ndata);
                bench_block victim = data[k];
                data[k] = data[--ndata]; /* swap_remove */
                sum += free_block(victim.ptr);
                ops++;
            }
            if (bench_table_next(&words) % 4 == 0 && ndata > 0) {
                size_t at = bench_pick(bench_table_next(&words), ndata);
                _Atomic(unsigned char *) *slot =
                    &sh->transfer[bench_pick(bench_table_next(&words), TRANSFERS)];
                bench_block given = data[at];
                data[at] = data[--ndata]; /* swap_remove */
                /* acq_rel: release publishes our block's header to whoever takes it,
                 * acquire sees the header of the block we take. */
                unsigned char *taken =
                    atomic_exchange_explicit(slot, given.ptr, memory_order_acq_rel);
                if (taken) {
                    bench_block b = {taken, (size_t)(uint32_t)header(taken)};
                    data[ndata++] = b;
                }
            }
        }
        for (size_t k = 0; k < ndata; k++)
            sum += free_block(data[k].ptr);
        ops += ndata;
        ndata = 0;
    }
    for (size_t k = 0; k < nretained; k++)
        sum += free_block(retained[k].ptr);
    ops += nretained;
    w->ops = ops;
    w->sum = sum;
}

int main(int argc, char **argv)
{
    bench_args a = bench_parse_args(argc, argv);
    shared_state sh = {bench_mem(TRANSFERS * sizeof(_Atomic(unsigned char *))),
                       bench_scaled(&a, ROUNDS)};
    for (size_t k = 0; k < TRANSFERS; k++)
        atomic_init(&sh.transfer[k], NULL);
    bench_result r = bench_run_timed(&a, a.threads, &sh, prepare, work);
    /* Untimed: the team is done, so the main thread owns what is left in the array. */
    for (size_t k = 0; k < TRANSFERS; k++) {
        unsigned char *left = atomic_exchange_explicit(&sh.transfer[k], NULL, memory_order_acquire);
        if (left) {
            r.sum += free_block(left);
            r.ops++;
        }
    }
    return bench_report(&a, r.ops, r.sum, r.ms);
}
