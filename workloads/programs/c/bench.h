/*
 * bench.h: what the C versions of alloclab's classic allocator benchmarks share.
 *
 * Each program is the C twin of one workload of the harness's `cpu` suite (the files of
 * harness/src/workloads/cpu/), with the same parameters, the same generator and the same
 * tables, so that the ratio between two allocators measured in-process and the ratio
 * measured with the program under LD_PRELOAD measure the same thing. This header holds the
 * pieces of harness/src/workloads/cpu/common.rs:
 *
 *  - the generator: rand 0.9's SmallRng on 64-bit targets, Xoshiro256++ seeded by
 *    SplitMix64 (`seed_from_u64`), and the samplers the workloads use (`random_range` over
 *    u32 and usize, Canon's biased method as rand does without its `unbiased` feature;
 *    `random_ratio`; `random::<u32>()`), bit for bit, so that the request sequences are the
 *    Rust ones;
 *  - `common::rng`, the tables (`Table`, `uniform_sizes`, `indices`), `log_uniform_size`
 *    and `pick`;
 *  - the timed thread team (`run_timed`): every thread prepares, all meet at a barrier, the
 *    clock starts, the threads work, all meet at a second barrier, the clock stops;
 *  - the ring of bounded queues between neighbouring threads (`Ring`, `RingEnd`);
 *  - the touch (a volatile write of a tag to the first and last byte of every block);
 *  - what cache-scratch and cache-thrash share (cache.rs's scribble and churn);
 *  - argument parsing (`PROGRAM THREADS SCALE SEED`) and the two output lines.
 *
 * Differences from common.rs, shared by all eight programs:
 *
 *  - The tag the touch writes is a byte that changes with every block (a per-thread salt
 *    derived from the seed, plus the thread's allocation count) instead of the thread
 *    index, and every free first reads the block's first byte back (a volatile read of the
 *    line the allocator's free touches anyway) and adds a hash of (size, byte read) to the
 *    checksum. The sum over all blocks is the same whichever thread frees what and in
 *    which order, and it changes if an allocator hands out overlapping blocks.
 *  - Bookkeeping memory (tables, slot arrays, batches, queues) comes from mmap, not from
 *    malloc: in-process it comes from the harness's own heap, not from the allocator under
 *    test, and here malloc is the allocator under test. So the allocator sees exactly the
 *    workload's requests.
 *  - The clock is read by the last thread to reach each barrier, not by a main thread that
 *    waits at both (see bench_run_timed): the same phase, without the main thread's wake-up
 *    latency in it.
 *  - The queues of the ring are single-producer single-consumer arrays (each has exactly
 *    one sender and one receiver) with std's channel policy for a full or empty queue: spin
 *    (step^2 pauses for steps 0..6), then sleep on a condition variable until the other
 *    side signals. std's bounded channel (std::sync::mpsc::sync_channel) does the same with
 *    a multi-producer lock-free array and thread parking.
 */
#ifndef ALLOCLAB_BENCH_H
#define ALLOCLAB_BENCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef BENCH_NAME
#error "define BENCH_NAME (the workload's name) before including bench.h"
#endif

/* Most threads a program accepts (a guard against typos, not a limit of the workloads). */
#define BENCH_MAX_THREADS 4096

/* ---------------------------------------------------------------------------------------
 * Failure
 * ------------------------------------------------------------------------------------- */

/* A failed malloc: the size on stderr, exit 1. */
__attribute__((noreturn, cold, noinline, unused)) static void bench_oom(size_t size)
{
    fprintf(stderr, "%s: malloc(%zu) failed\n", BENCH_NAME, size);
    exit(1);
}

/* Any other failure of the program itself (mmap, pthread_create): exit 1. */
__attribute__((noreturn, cold, noinline, unused)) static void bench_fail(const char *what, int err)
{
    fprintf(stderr, "%s: %s failed: %s\n", BENCH_NAME, what, strerror(err));
    exit(1);
}

/* ---------------------------------------------------------------------------------------
 * The generator: rand 0.9 SmallRng (Xoshiro256++), bit for bit
 * ------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} bench_rng;

static inline uint64_t bench_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* Xoshiro256PlusPlus::seed_from_u64: four SplitMix64 outputs (never all zero). */
static inline bench_rng bench_rng_from_u64(uint64_t state)
{
    bench_rng r;
    for (int i = 0; i < 4; i++) {
        state += 0x9e3779b97f4a7c15ULL;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        r.s[i] = z ^ (z >> 31);
    }
    return r;
}

static inline uint64_t bench_next_u64(bench_rng *r)
{
    uint64_t *s = r->s;
    uint64_t res = bench_rotl(s[0] + s[3], 23) + s[0];
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = bench_rotl(s[3], 45);
    return res;
}

/* next_u32: the upper half of next_u64 (what `random::<u32>()` returns). */
static inline uint32_t bench_next_u32(bench_rng *r)
{
    return (uint32_t)(bench_next_u64(r) >> 32);
}

/*
 * `random_range(low..=high)` over u32, and over usize when high fits in 32 bits (rand's
 * UniformUsize then samples as u32): UniformInt::<u32>::sample_single_inclusive, Canon's
 * method with one extra draw when the first is in the biased zone.
 */
static inline uint32_t bench_range_incl(bench_rng *r, uint32_t low, uint32_t high)
{
    uint32_t range = high - low + 1;
    if (range == 0)
        return bench_next_u32(r);
    uint64_t m = (uint64_t)bench_next_u32(r) * range;
    uint32_t result = (uint32_t)(m >> 32);
    uint32_t lo = (uint32_t)m;
    if (lo > (uint32_t)(0u - range)) {
        uint32_t new_hi = (uint32_t)(((uint64_t)bench_next_u32(r) * range) >> 32);
        if ((uint32_t)(lo + new_hi) < lo)
            result += 1;
    }
    return low + result;
}

/* `random_range(low..high)` (high > low): the inclusive range up to high - 1. */
static inline uint32_t bench_range(bench_rng *r, uint32_t low, uint32_t high)
{
    return bench_range_incl(r, low, high - 1);
}

/* `random_ratio(num, den)` (0 < num < den): Bernoulli::from_ratio, one u64 draw. */
static inline bool bench_ratio(bench_rng *r, uint32_t num, uint32_t den)
{
    if (num == den)
        return true;
    uint64_t p_int = (uint64_t)(((double)num / (double)den) * 18446744073709551616.0);
    return bench_next_u64(r) < p_int;
}

/* common::rng: thread `index`'s generator of a run seeded with `seed`. */
static inline bench_rng bench_thread_rng(uint64_t seed, size_t index)
{
    return bench_rng_from_u64(seed ^ ((uint64_t)index + 1) * 0x9E3779B97F4A7C15ULL);
}

/* common::log_uniform_size: k uniform in log2(min)..log2(max), then 2^k..=2^(k+1). */
static inline size_t bench_log_uniform_size(bench_rng *r, size_t min, size_t max)
{
    uint32_t k = bench_range(r, (uint32_t)__builtin_ctzll(min), (uint32_t)__builtin_ctzll(max));
    return bench_range_incl(r, 1u << k, 1u << (k + 1));
}

/* common::pick: a uniform index below n from 32 random bits (multiply-shift). */
static inline size_t bench_pick(uint32_t word, size_t n)
{
    return (size_t)(((uint64_t)word * (uint64_t)n) >> 32);
}

/* ---------------------------------------------------------------------------------------
 * Bookkeeping memory (mmap, never the allocator under test)
 * ------------------------------------------------------------------------------------- */

static inline void *bench_mem(size_t size)
{
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        bench_fail("mmap", errno);
    return p;
}

/* ---------------------------------------------------------------------------------------
 * Tables read round-robin inside the timed region (common::Table)
 * ------------------------------------------------------------------------------------- */

typedef struct {
    uint32_t *values;
    size_t len;
    size_t next;
} bench_table;

static inline bench_table bench_table_new(size_t len)
{
    bench_table t = {bench_mem(len * sizeof(uint32_t)), len, 0};
    return t;
}

static inline uint32_t bench_table_next(bench_table *t)
{
    uint32_t v = t->values[t->next];
    if (++t->next == t->len)
        t->next = 0;
    return v;
}

/* common::uniform_sizes: `len` sizes uniform in min..=max. */
static inline bench_table bench_uniform_sizes(size_t len, bench_rng *r, uint32_t min, uint32_t max)
{
    bench_table t = bench_table_new(len);
    for (size_t i = 0; i < len; i++)
        t.values[i] = bench_range_incl(r, min, max);
    return t;
}

/* common::indices: `len` indices uniform in 0..n. */
static inline bench_table bench_indices(size_t len, bench_rng *r, uint32_t n)
{
    bench_table t = bench_table_new(len);
    for (size_t i = 0; i < len; i++)
        t.values[i] = bench_range(r, 0, n);
    return t;
}

/* ---------------------------------------------------------------------------------------
 * Blocks: the touch, the read-back, the checksum
 * ------------------------------------------------------------------------------------- */

/* A live block and the size it was asked for (common::Block). */
typedef struct {
    unsigned char *ptr;
    size_t size;
} bench_block;

/* SplitMix64's finalizer: the checksum's hash. */
static inline uint64_t bench_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The first byte of thread `index`'s tags: a salt from the seed (not from the workload's
 * generator, whose stream is the Rust one). */
static inline uint8_t bench_salt(uint64_t seed, size_t index)
{
    return (uint8_t)(bench_mix(seed + ((uint64_t)index + 1) * 0xD1B54A32D192ED03ULL) >> 56);
}

/* Writes `tag` to the first and last byte of a block (volatile: neither the touch nor the
 * malloc/free pair around it can be elided). */
static inline void bench_touch(unsigned char *p, size_t size, uint8_t tag)
{
    ((volatile unsigned char *)p)[0] = tag;
    ((volatile unsigned char *)p)[size - 1] = tag;
}

/* common::allocate: malloc(size) (exit 1 if it fails), then the touch. */
static inline unsigned char *bench_alloc(size_t size, uint8_t tag)
{
    unsigned char *p = malloc(size);
    if (__builtin_expect(p == NULL, 0))
        bench_oom(size);
    bench_touch(p, size, tag);
    return p;
}

static inline bench_block bench_block_new(size_t size, uint8_t tag)
{
    bench_block b = {bench_alloc(size, tag), size};
    return b;
}

/* Reads the first byte back, frees the block and returns its share of the checksum. */
static inline uint64_t bench_release(unsigned char *p, size_t size)
{
    uint8_t first = ((volatile unsigned char *)p)[0];
    free(p);
    return bench_mix(((uint64_t)size << 8) | first);
}

static inline uint64_t bench_block_free(bench_block b)
{
    return bench_release(b.ptr, b.size);
}

/* ---------------------------------------------------------------------------------------
 * What cache-scratch and cache-thrash share (harness/src/workloads/cpu/cache.rs)
 * ------------------------------------------------------------------------------------- */

#define BENCH_CACHE_OBJECT_SIZE 8
#define BENCH_CACHE_WRITES 1000
#define BENCH_CACHE_OBJECTS 120000

/* cache.rs's scribble: BENCH_CACHE_WRITES volatile byte writes over the object, each read
 * back into a byte sum. Rust writes (pass + k); this writes (pass + k + tag), so that the sum
 * depends on the seed. The pass over the 8 bytes is unrolled by hand, as LLVM unrolls Rust's
 * (gcc -O2 would keep the loop, and the loop's overhead would dilute the allocator's share). */
static inline uint8_t bench_cache_scribble(unsigned char *object, uint8_t tag)
{
    _Static_assert(BENCH_CACHE_OBJECT_SIZE == 8, "the scribble is unrolled for 8 bytes");
    volatile unsigned char *o = object;
    uint8_t sum = 0;
    for (size_t pass = 0; pass < BENCH_CACHE_WRITES / BENCH_CACHE_OBJECT_SIZE; pass++) {
        uint8_t base = (uint8_t)(pass + tag);
#define BENCH_SCRIBBLE_BYTE(k)                                                                 \
    do {                                                                                       \
        o[k] = (uint8_t)(base + (k));                                                          \
        sum = (uint8_t)(sum + o[k]);                                                           \
    } while (0)
        BENCH_SCRIBBLE_BYTE(0);
        BENCH_SCRIBBLE_BYTE(1);
        BENCH_SCRIBBLE_BYTE(2);
        BENCH_SCRIBBLE_BYTE(3);
        BENCH_SCRIBBLE_BYTE(4);
        BENCH_SCRIBBLE_BYTE(5);
        BENCH_SCRIBBLE_BYTE(6);
        BENCH_SCRIBBLE_BYTE(7);
#undef BENCH_SCRIBBLE_BYTE
    }
    return sum;
}

/* cache.rs's churn: allocate, scribble, free, `objects` times; returns the checksum share
 * and adds the allocator calls (2 per object) to *ops. */
static inline uint64_t bench_cache_churn(uint64_t objects, uint8_t *tag, uint64_t *ops)
{
    uint64_t sum = 0;
    uint8_t t = *tag;
    for (uint64_t n = 0; n < objects; n++) {
        unsigned char *object = bench_alloc(BENCH_CACHE_OBJECT_SIZE, t);
        uint8_t scribbled = bench_cache_scribble(object, t);
        sum += bench_mix(scribbled) + bench_release(object, BENCH_CACHE_OBJECT_SIZE);
        t++;
    }
    *tag = t;
    *ops += 2 * objects;
    return sum;
}

/* ---------------------------------------------------------------------------------------
 * Arguments and output
 * ------------------------------------------------------------------------------------- */

typedef struct {
    size_t threads;
    const char *scale;
    uint64_t factor_num; /* scaled(n) = max(1, n * factor_num / factor_den) */
    uint64_t factor_den;
    uint64_t seed;
} bench_args;

__attribute__((noreturn, unused)) static void bench_usage(const char *prog, const char *why)
{
    fprintf(stderr,
            "%s: %s\nusage: %s THREADS SCALE SEED  (THREADS a positive integer, SCALE one of "
            "tiny|small|medium|large, SEED an unsigned 64-bit integer)\n",
            BENCH_NAME, why, prog);
    exit(2);
}

/* A decimal unsigned integer with nothing around it; false if it is not one or overflows. */
static inline bool bench_parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static inline bench_args bench_parse_args(int argc, char **argv)
{
    const char *prog = argc > 0 ? argv[0] : BENCH_NAME;
    if (argc != 4)
        bench_usage(prog, "expected three arguments");
    bench_args a;
    uint64_t threads;
    if (!bench_parse_u64(argv[1], &threads) || threads == 0 || threads > BENCH_MAX_THREADS)
        bench_usage(prog, "THREADS must be an integer from 1 to 4096");
    a.threads = (size_t)threads;
    a.scale = argv[2];
    if (strcmp(a.scale, "tiny") == 0) {
        a.factor_num = 1;
        a.factor_den = 64;
    } else if (strcmp(a.scale, "small") == 0) {
        a.factor_num = 1;
        a.factor_den = 1;
    } else if (strcmp(a.scale, "medium") == 0) {
        a.factor_num = 4;
        a.factor_den = 1;
    } else if (strcmp(a.scale, "large") == 0) {
        a.factor_num = 16;
        a.factor_den = 1;
    } else {
        bench_usage(prog, "SCALE must be tiny, small, medium or large");
    }
    if (!bench_parse_u64(argv[3], &a.seed))
        bench_usage(prog, "SEED must be an unsigned 64-bit decimal integer");
    return a;
}

/* Scale::scaled: tiny = max(1, n/64), small = max(1, n), medium = 4 max(1, n), large = 16
 * max(1, n). */
static inline uint64_t bench_scaled(const bench_args *a, uint64_t small)
{
    if (a->factor_den > 1) {
        uint64_t v = small / a->factor_den;
        return v ? v : 1;
    }
    return (small ? small : 1) * a->factor_num;
}

/* The two output lines: the result on stdout, the measured time on stderr. */
static inline int bench_report(const bench_args *a, uint64_t operations, uint64_t sum, double ms)
{
    printf("%s threads=%zu scale=%s seed=%" PRIu64 " operations=%" PRIu64
           " checksum=0x%016" PRIx64 "\n",
           BENCH_NAME, a->threads, a->scale, a->seed, operations, bench_mix(sum));
    fprintf(stderr, "alloclab-time-ms %.3f\n", ms);
    if (fflush(stdout) != 0)
        return 1;
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The timed thread team (common::run_timed)
 * ------------------------------------------------------------------------------------- */

typedef struct bench_worker bench_worker;
typedef void (*bench_fn)(bench_worker *w);

/*
 * A barrier (mutex and condition variable, as Rust's std::sync::Barrier) whose last
 * arriving thread reads the clock before it releases the others: the stamp is the moment
 * the whole team got there, whichever thread that was and however late the others are
 * scheduled afterwards.
 */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t released;
    size_t n;
    size_t count;
    uint64_t generation;
    double stamp_ms;
} bench_barrier;

static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void bench_barrier_init(bench_barrier *b, size_t n)
{
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->released, NULL);
    b->n = n;
    b->count = 0;
    b->generation = 0;
    b->stamp_ms = 0;
}

static inline void bench_barrier_wait(bench_barrier *b)
{
    pthread_mutex_lock(&b->lock);
    uint64_t generation = b->generation;
    if (++b->count == b->n) {
        b->stamp_ms = bench_now_ms();
        b->count = 0;
        b->generation++;
        pthread_cond_broadcast(&b->released);
    } else {
        while (generation == b->generation)
            pthread_cond_wait(&b->released, &b->lock);
    }
    pthread_mutex_unlock(&b->lock);
}

struct bench_worker {
    _Alignas(128) size_t index; /* 0..threads */
    size_t threads;
    const bench_args *args;
    void *shared; /* the workload's shared state */
    void *state;  /* what prepare leaves for work */
    uint64_t ops; /* allocator calls work made */
    uint64_t sum; /* work's share of the checksum */
    uint8_t salt; /* first tag of this thread */
    bench_fn prepare;
    bench_fn work;
    bench_barrier *start;
    bench_barrier *end;
    pthread_t thread;
};

__attribute__((unused)) static void *bench_worker_main(void *arg)
{
    bench_worker *w = arg;
    w->prepare(w);
    bench_barrier_wait(w->start);
    w->work(w);
    bench_barrier_wait(w->end);
    return NULL;
}

typedef struct {
    double ms;    /* the measured phase */
    uint64_t ops; /* sum of the workers' ops */
    uint64_t sum; /* sum of the workers' checksum shares */
} bench_result;

/*
 * Runs `threads` threads as one timed team (common::run_timed): thread i runs prepare
 * (untimed), waits for the whole team, runs work, waits for the whole team again; the clock
 * runs from the moment every thread is prepared until every thread's work is done.
 *
 * Rust's main thread waits at both barriers too and reads the clock when it leaves them;
 * here the last thread to reach a barrier reads it, before it wakes the others. Same phase,
 * but the measurement does not depend on when the scheduler gets round to running the main
 * thread again: on a small machine a woken main thread may wait a time slice for a core, so
 * that its first clock read comes after the work (a 1 ms run measured as 3 us) and its
 * second one late.
 */
static inline bench_result bench_run_timed(const bench_args *a, size_t threads, void *shared,
                                           bench_fn prepare, bench_fn work)
{
    bench_barrier start, end;
    bench_barrier_init(&start, threads);
    bench_barrier_init(&end, threads);
    bench_worker *workers = bench_mem(threads * sizeof(bench_worker));
    int err;
    for (size_t i = 0; i < threads; i++) {
        bench_worker *w = &workers[i];
        w->index = i;
        w->threads = threads;
        w->args = a;
        w->shared = shared;
        w->state = NULL;
        w->ops = 0;
        w->sum = 0;
        w->salt = bench_salt(a->seed, i);
        w->prepare = prepare;
        w->work = work;
        w->start = &start;
        w->end = &end;
        if ((err = pthread_create(&w->thread, NULL, bench_worker_main, w)) != 0)
            bench_fail("pthread_create", err);
    }
    bench_result r = {0, 0, 0};
    for (size_t i = 0; i < threads; i++) {
        pthread_join(workers[i].thread, NULL);
        r.ops += workers[i].ops;
        r.sum += workers[i].sum;
    }
    r.ms = end.stamp_ms - start.stamp_ms;
    return r;
}

/* ---------------------------------------------------------------------------------------
 * The ring (common::Ring): thread i passes items to thread (i + 1) % n over a bounded queue
 * ------------------------------------------------------------------------------------- */

typedef struct {
    _Alignas(64) atomic_uint_fast64_t head; /* next slot to take (the consumer's) */
    _Alignas(64) atomic_uint_fast64_t tail; /* next slot to fill (the producer's) */
    _Alignas(64) atomic_int recv_waiting;   /* the consumer sleeps on not_empty */
    atomic_int send_waiting;                /* the producer sleeps on not_full */
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    size_t cap;
    void **slots;
} bench_queue;

typedef struct {
    size_t n;
    size_t depth;
    bench_queue *queues; /* thread i receives on queues[i] */
} bench_ring;

/* One thread's place in the ring (common::RingEnd). */
typedef struct {
    bench_queue *from_prev;
    bench_queue *to_next;
    void **stock;
    size_t nstock;
    size_t depth;
    size_t finish_at;
    uint64_t passed;
    uint64_t received;
} bench_ring_end;

static inline void bench_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* One step of std's channel backoff (std::sync::mpmc's Backoff::spin_heavy until
 * is_completed): step^2 pauses for steps 0..6, then false: time to sleep. */
static inline bool bench_backoff(unsigned *step)
{
    if (*step > 6)
        return false;
    for (unsigned k = 0; k < *step * *step; k++)
        bench_cpu_relax();
    (*step)++;
    return true;
}

static inline void *bench_queue_pop(bench_queue *q)
{
    uint_fast64_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
    unsigned step = 0;
    while (atomic_load_explicit(&q->tail, memory_order_acquire) == h) {
        if (bench_backoff(&step))
            continue;
        pthread_mutex_lock(&q->lock);
        atomic_store(&q->recv_waiting, 1);
        while (atomic_load(&q->tail) == h)
            pthread_cond_wait(&q->not_empty, &q->lock);
        atomic_store(&q->recv_waiting, 0);
        pthread_mutex_unlock(&q->lock);
        break;
    }
    void *item = q->slots[h % q->cap];
    atomic_store(&q->head, h + 1);
    if (atomic_load(&q->send_waiting)) {
        pthread_mutex_lock(&q->lock);
        pthread_cond_signal(&q->not_full);
        pthread_mutex_unlock(&q->lock);
    }
    return item;
}

static inline void bench_queue_push(bench_queue *q, void *item)
{
    uint_fast64_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
    unsigned step = 0;
    while (t - atomic_load_explicit(&q->head, memory_order_acquire) == q->cap) {
        if (bench_backoff(&step))
            continue;
        pthread_mutex_lock(&q->lock);
        atomic_store(&q->send_waiting, 1);
        while (t - atomic_load(&q->head) == q->cap)
            pthread_cond_wait(&q->not_full, &q->lock);
        atomic_store(&q->send_waiting, 0);
        pthread_mutex_unlock(&q->lock);
        break;
    }
    q->slots[t % q->cap] = item;
    atomic_store(&q->tail, t + 1);
    if (atomic_load(&q->recv_waiting)) {
        pthread_mutex_lock(&q->lock);
        pthread_cond_signal(&q->not_empty);
        pthread_mutex_unlock(&q->lock);
    }
}

/* A ring of n threads whose queues hold `depth` items. */
static inline bench_ring bench_ring_new(size_t n, size_t depth)
{
    bench_ring r = {n, depth, bench_mem(n * sizeof(bench_queue))};
    for (size_t i = 0; i < n; i++) {
        bench_queue *q = &r.queues[i];
        atomic_init(&q->head, 0);
        atomic_init(&q->tail, 0);
        atomic_init(&q->recv_waiting, 0);
        atomic_init(&q->send_waiting, 0);
        pthread_mutex_init(&q->lock, NULL);
        pthread_cond_init(&q->not_empty, NULL);
        pthread_cond_init(&q->not_full, NULL);
        q->cap = depth;
        q->slots = bench_mem(depth * sizeof(void *));
    }
    return r;
}

/* Thread i's end of the ring, with no stock yet. */
static inline bench_ring_end bench_ring_join(const bench_ring *r, size_t i)
{
    bench_ring_end e = {&r->queues[i], &r->queues[(i + 1) % r->n], bench_mem(r->depth * sizeof(void *)),
                        0, r->depth, 0, 0, 0};
    return e;
}

/* Adds an item to the stock, which this thread works on before anything passed to it. */
static inline void bench_ring_restock(bench_ring_end *e, void *item)
{
    if (e->nstock == e->depth) {
        fprintf(stderr, "%s: more stock than the ring has room for\n", BENCH_NAME);
        abort();
    }
    e->stock[e->nstock++] = item;
}

/* The next item: the last of the stock while it lasts, then the previous thread's. */
static inline void *bench_ring_next(bench_ring_end *e)
{
    if (e->nstock)
        return e->stock[--e->nstock];
    e->received++;
    return bench_queue_pop(e->from_prev);
}

/* Passes an item to the next thread, waiting while its queue is full. */
static inline void bench_ring_pass(bench_ring_end *e, void *item)
{
    e->passed++;
    bench_queue_push(e->to_next, item);
}

/* Once the work is done: what is left, one item per call (the rest of the stock in order,
 * then the items the previous thread passed that this one has not taken), NULL at the end. */
static inline void *bench_ring_finish(bench_ring_end *e)
{
    if (e->finish_at < e->nstock)
        return e->stock[e->finish_at++];
    e->nstock = 0;
    if (e->received < e->passed) {
        e->received++;
        return bench_queue_pop(e->from_prev);
    }
    return NULL;
}

#endif /* ALLOCLAB_BENCH_H */
