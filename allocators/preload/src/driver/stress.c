/* The C side of alloclab-preload's integration test: run under LD_PRELOAD=<heap .so>.
 *
 * 1. Which heap is preloaded (dlsym of alloclab_preload_heap_name), and whether `malloc`
 *    resolves into the same object as that marker.
 * 2. The return-value and errno rules of every function the preload exports, and glibc's
 *    __libc_* names of them resolving into the preloaded object.
 * 3. THREADS threads doing mixed malloc/calloc/realloc/reallocarray/posix_memalign/
 *    aligned_alloc/memalign of 1 B .. 1 MiB, checking the contents of every block before it
 *    is freed or resized, and passing blocks to each other (cross-thread free and realloc).
 * 4. fork() from a process whose other threads keep allocating: each child allocates,
 *    frees, starts a thread that allocates, and exits 0 (an alarm kills a deadlocked one).
 *
 * Prints one line per part; exits 0 only if everything held. Any failed check prints
 * "FAIL <line>: <what>" to stderr and exits 1.
 *
 * Compiled with -fno-builtin so the compiler does not fold malloc calls it thinks it
 * understands (malloc(SIZE_MAX) == NULL, unused malloc/free pairs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8
#define SLOTS 256
#define OPS_PER_THREAD 25000
#define EXCHANGE_SLOTS 64
#define FORKS 16
#define FORK_BACKGROUND_THREADS 4

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %d: ", __LINE__);                                        \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            fflush(stderr);                                                                \
            _exit(1);                                                                      \
        }                                                                                  \
    } while (0)

/* volatile: the compiler must not reason about these sizes. */
static volatile size_t SIZE_MAX_V = SIZE_MAX;
static volatile size_t HALF_V = SIZE_MAX / 2 + 1;
static volatile size_t PTRDIFF_MAX_V = PTRDIFF_MAX;
static volatile size_t TWO_POW_33_V = (size_t)1 << 33;

static int aligned_to(const void *p, size_t alignment) {
    return ((uintptr_t)p % alignment) == 0;
}

/* ---------- 1. which heap ---------- */

static void report_heap(void) {
    const char *(*name_fn)(void) =
        (const char *(*)(void))dlsym(RTLD_DEFAULT, "alloclab_preload_heap_name");
    printf("heap: %s\n", name_fn ? name_fn() : "none");
    void *malloc_sym = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info from_malloc, from_marker;
    int same = name_fn && malloc_sym && dladdr(malloc_sym, &from_malloc) &&
               dladdr((void *)name_fn, &from_marker) &&
               from_malloc.dli_fbase == from_marker.dli_fbase;
    printf("malloc from preload: %s\n", same ? "yes" : "no");
    fflush(stdout);
}

/* ---------- 2. the rules ---------- */

static void fill_index(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + 3);
}
static int has_index(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + 3)) return 0;
    return 1;
}

static void check_rules(void) {
    long page = sysconf(_SC_PAGESIZE);

    /* malloc(0): unique, aligned, freeable. */
    void *z1 = malloc(0), *z2 = malloc(0);
    CHECK(z1 && z2 && z1 != z2, "malloc(0) must return unique non-NULL pointers");
    CHECK(aligned_to(z1, 16) && aligned_to(z2, 16), "malloc(0) alignment");
    free(z1);
    free(z2);

    /* every malloc result is 16-aligned, usable size covers the request and is writable */
    for (size_t n = 1; n < 5000; n += (n < 300 ? 1 : 97)) {
        unsigned char *p = malloc(n);
        CHECK(p, "malloc(%zu) failed", n);
        CHECK(aligned_to(p, 16), "malloc(%zu) = %p is not 16-byte aligned", n, (void *)p);
        size_t usable = malloc_usable_size(p);
        CHECK(usable >= n, "malloc_usable_size %zu < %zu", usable, n);
        memset(p, 0xee, usable);
        free(p);
    }
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) != 0");

    /* impossible sizes: NULL + ENOMEM */
    size_t impossible[] = {SIZE_MAX_V, PTRDIFF_MAX_V, HALF_V, SIZE_MAX_V - 4096};
    for (size_t i = 0; i < sizeof impossible / sizeof *impossible; i++) {
        errno = 0;
        CHECK(malloc(impossible[i]) == NULL && errno == ENOMEM, "malloc(%zu): NULL+ENOMEM",
              impossible[i]);
    }

    /* calloc: overflow -> NULL + ENOMEM; zero products -> unique; zeroed after dirty reuse */
    errno = 0;
    CHECK(calloc(HALF_V, 2) == NULL && errno == ENOMEM, "calloc overflow a");
    errno = 0;
    CHECK(calloc(2, HALF_V) == NULL && errno == ENOMEM, "calloc overflow b");
    errno = 0;
    CHECK(calloc(TWO_POW_33_V, (size_t)1 << 31) == NULL && errno == ENOMEM,
          "calloc overflow c");
    void *c1 = calloc(0, 10), *c2 = calloc(10, 0);
    CHECK(c1 && c2 && c1 != c2, "calloc with a zero factor must return unique pointers");
    free(c1);
    free(c2);
    size_t dirty_sizes[] = {8, 24, 100, 1000, 5000, 70000, 300000, 2000000};
    for (size_t i = 0; i < sizeof dirty_sizes / sizeof *dirty_sizes; i++) {
        size_t n = dirty_sizes[i];
        for (int round = 0; round < 4; round++) {
            unsigned char *d = malloc(n);
            CHECK(d, "malloc");
            memset(d, 0xab, n);
            free(d);
            unsigned char *c = calloc(1, n);
            CHECK(c && aligned_to(c, 16), "calloc(1, %zu)", n);
            for (size_t j = 0; j < n; j++) CHECK(c[j] == 0, "calloc(1, %zu)[%zu] != 0", n, j);
            free(c);
        }
    }

    /* realloc */
    unsigned char *r = realloc(NULL, 40);
    CHECK(r && aligned_to(r, 16), "realloc(NULL, 40) acts as malloc");
    fill_index(r, 40);
    r = realloc(r, 4000);
    CHECK(r && has_index(r, 40), "realloc grow keeps contents");
    fill_index(r, 4000);
    r = realloc(r, 600000);
    CHECK(r && has_index(r, 4000) && aligned_to(r, 16), "realloc big grow keeps contents");
    fill_index(r, 600000);
    r = realloc(r, 100);
    CHECK(r && has_index(r, 100), "realloc shrink keeps contents");
    r = realloc(r, 10);
    CHECK(r && has_index(r, 10), "realloc shrink keeps contents");
    errno = 0;
    CHECK(realloc(r, SIZE_MAX_V - 4096) == NULL && errno == ENOMEM, "realloc huge: NULL+ENOMEM");
    CHECK(has_index(r, 10), "failed realloc must leave the block intact");
    errno = 0;
    CHECK(realloc(r, PTRDIFF_MAX_V) == NULL && errno == ENOMEM, "realloc huge: NULL+ENOMEM");
    CHECK(has_index(r, 10) && malloc_usable_size(r) >= 10, "failed realloc: block intact");
    /* reallocarray: overflow check, old block intact; then a real resize */
    errno = 0;
    CHECK(reallocarray(r, HALF_V, 4) == NULL && errno == ENOMEM, "reallocarray overflow");
    CHECK(has_index(r, 10), "failed reallocarray must leave the block intact");
    r = reallocarray(r, 100, 8);
    CHECK(r && has_index(r, 10), "reallocarray keeps contents");
    /* realloc(p, 0): frees p, returns NULL (glibc's choice, documented), errno untouched */
    errno = EDOM;
    CHECK(realloc(r, 0) == NULL, "realloc(p, 0) returns NULL");
    CHECK(errno == EDOM, "realloc(p, 0) must not set errno");

    /* posix_memalign: EINVAL for bad alignments, errno never touched, *memptr untouched on
     * failure */
    void *const sentinel = (void *)0x5e57;
    size_t bad_alignments[] = {0, 1, 2, 3, 4, sizeof(void *) / 2, 12, 24, 48, 100, 3 * sizeof(void *)};
    for (size_t i = 0; i < sizeof bad_alignments / sizeof *bad_alignments; i++) {
        void *p = sentinel;
        errno = EDOM;
        int rc = posix_memalign(&p, bad_alignments[i], 16);
        CHECK(rc == EINVAL, "posix_memalign(alignment %zu) = %d, want EINVAL", bad_alignments[i],
              rc);
        CHECK(p == sentinel, "posix_memalign wrote *memptr on failure");
        CHECK(errno == EDOM, "posix_memalign changed errno");
    }
    size_t good_alignments[] = {sizeof(void *), 16, 32, 64, 128, 4096, 65536, 1 << 20};
    size_t aligned_sizes[] = {0, 1, 17, 1000, 100000};
    for (size_t i = 0; i < sizeof good_alignments / sizeof *good_alignments; i++) {
        for (size_t j = 0; j < sizeof aligned_sizes / sizeof *aligned_sizes; j++) {
            void *p = NULL;
            size_t a = good_alignments[i], n = aligned_sizes[j];
            errno = EDOM;
            int rc = posix_memalign(&p, a, n);
            CHECK(rc == 0 && p, "posix_memalign(%zu, %zu) = %d", a, n, rc);
            CHECK(aligned_to(p, a < 16 ? 16 : a), "posix_memalign(%zu) alignment", a);
            CHECK(malloc_usable_size(p) >= n, "posix_memalign usable size");
            CHECK(errno == EDOM, "posix_memalign changed errno on success");
            memset(p, 1, n);
            free(p);
        }
    }
    {
        void *p = sentinel;
        errno = EDOM;
        int rc = posix_memalign(&p, 64, SIZE_MAX_V - 100);
        CHECK(rc == ENOMEM && p == sentinel && errno == EDOM, "posix_memalign huge: %d", rc);
        rc = posix_memalign(&p, 64, PTRDIFF_MAX_V);
        CHECK(rc == ENOMEM && p == sentinel && errno == EDOM, "posix_memalign huge: %d", rc);
    }

    /* aligned_alloc (C17): power of two or NULL + EINVAL; any size */
    size_t not_powers[] = {0, 3, 24, 48, 1000};
    for (size_t i = 0; i < sizeof not_powers / sizeof *not_powers; i++) {
        errno = 0;
        CHECK(aligned_alloc(not_powers[i], 64) == NULL && errno == EINVAL,
              "aligned_alloc(%zu, 64): NULL+EINVAL", not_powers[i]);
    }
    void *a1 = aligned_alloc(64, 100); /* not a multiple: fine since C17 */
    CHECK(a1 && aligned_to(a1, 64) && malloc_usable_size(a1) >= 100, "aligned_alloc(64, 100)");
    void *a2 = aligned_alloc(4096, 4096);
    CHECK(a2 && aligned_to(a2, 4096), "aligned_alloc(4096, 4096)");
    void *a3 = aligned_alloc(2, 5); /* small alignments get malloc's 16 */
    CHECK(a3 && aligned_to(a3, 16), "aligned_alloc(2, 5) must be 16-aligned");
    void *a4 = aligned_alloc(1 << 21, 10);
    CHECK(a4 && aligned_to(a4, 1 << 21), "aligned_alloc(2 MiB, 10)");
    free(a1);
    free(a2);
    free(a3);
    free(a4);
    errno = 0;
    CHECK(aligned_alloc(64, SIZE_MAX_V - 10) == NULL && errno == ENOMEM,
          "aligned_alloc huge: NULL+ENOMEM");

    /* memalign (glibc): rounds up to a power of two; 0 means malloc; overflow -> EINVAL */
    void *m1 = memalign(48, 10);
    CHECK(m1 && aligned_to(m1, 64), "memalign(48) rounds up to 64");
    void *m2 = memalign(0, 10);
    CHECK(m2 && aligned_to(m2, 16), "memalign(0, 10)");
    void *m3 = memalign(8192, 1);
    CHECK(m3 && aligned_to(m3, 8192), "memalign(8192, 1)");
    free(m1);
    free(m2);
    free(m3);
    errno = 0;
    CHECK(memalign(HALF_V + 1, 10) == NULL && errno == EINVAL, "memalign overflow: EINVAL");

    /* valloc and pvalloc: page-aligned; pvalloc rounds the size up to pages */
    void *v = valloc(100);
    CHECK(v && aligned_to(v, page) && malloc_usable_size(v) >= 100, "valloc(100)");
    free(v);
    void *pv = pvalloc(100);
    CHECK(pv && aligned_to(pv, page) && malloc_usable_size(pv) >= (size_t)page, "pvalloc(100)");
    memset(pv, 2, page);
    free(pv);
    void *pv0 = pvalloc(0);
    CHECK(pv0 && aligned_to(pv0, page), "pvalloc(0)");
    free(pv0);
    errno = 0;
    CHECK(pvalloc(SIZE_MAX_V - 10) == NULL && errno == ENOMEM, "pvalloc huge: NULL+ENOMEM");

    /* free: NULL is a no-op; errno survives free, small and large */
    free(NULL);
    size_t free_sizes[] = {10, 3000000};
    for (size_t i = 0; i < 2; i++) {
        void *p = malloc(free_sizes[i]);
        CHECK(p, "malloc");
        errno = EDOM;
        free(p);
        CHECK(errno == EDOM, "free changed errno");
    }

    /* calloc of memory that was used and freed reads zero, whatever the heap keeps (span
       runs, cached or given back to the OS, huge mappings): eight of each size, written,
       freed, then taken back with calloc, before and after malloc_trim */
    size_t reused_sizes[] = {100, 70000, 200000, 1500000, 5000000};
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < sizeof reused_sizes / sizeof reused_sizes[0]; i++) {
            size_t n = reused_sizes[i];
            unsigned char *blocks[8];
            for (int k = 0; k < 8; k++) {
                blocks[k] = malloc(n);
                CHECK(blocks[k], "malloc(%zu)", n);
                memset(blocks[k], 0xab, n);
            }
            for (int k = 0; k < 8; k++) free(blocks[k]);
            for (int k = 0; k < 8; k++) {
                blocks[k] = calloc(1, n);
                CHECK(blocks[k], "calloc(1, %zu)", n);
                for (size_t j = 0; j < n; j += 61)
                    CHECK(blocks[k][j] == 0, "calloc(1, %zu) byte %zu not zero", n, j);
                CHECK(blocks[k][n - 1] == 0, "calloc(1, %zu) last byte not zero", n);
            }
            for (int k = 0; k < 8; k++) free(blocks[k]);
        }
        /* malloc_trim: 0 or 1, errno kept, the heap as usable as before */
        errno = EDOM;
        int trimmed = malloc_trim(0);
        CHECK(trimmed == 0 || trimmed == 1, "malloc_trim returned %d", trimmed);
        CHECK(errno == EDOM, "malloc_trim changed errno");
    }

    printf("rules: ok\n");
    fflush(stdout);
}

/* ---------- 3. threads ---------- */

struct block {
    unsigned char *p;
    size_t size;
    size_t alignment; /* what the block must be aligned to */
    unsigned seed;
};

static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block exchange[EXCHANGE_SLOTS];
static atomic_ulong total_ops;
static atomic_ulong cross_thread_blocks;

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static unsigned char pattern(unsigned seed, size_t i) {
    return (unsigned char)((seed + i) * 2654435761u >> 13);
}

static void fill(struct block *b) {
    for (size_t i = 0; i < b->size; i++) b->p[i] = pattern(b->seed, i);
}

static void verify(const struct block *b, const char *when) {
    CHECK(aligned_to(b->p, b->alignment), "%s: %p not aligned to %zu", when, (void *)b->p,
          b->alignment);
    CHECK(malloc_usable_size(b->p) >= b->size, "%s: usable size %zu < %zu", when,
          malloc_usable_size(b->p), b->size);
    for (size_t i = 0; i < b->size; i++)
        CHECK(b->p[i] == pattern(b->seed, i), "%s: block %p of %zu bytes corrupted at %zu",
              when, (void *)b->p, b->size, i);
}

static size_t random_size(uint64_t *rng) {
    uint64_t r = next_random(rng);
    unsigned bucket = r % 1000;
    r >>= 10;
    if (bucket < 700) return 1 + r % 256;
    if (bucket < 950) return 257 + r % (8192 - 257);
    if (bucket < 995) return 8193 + r % (131072 - 8193);
    return 131073 + r % ((1 << 20) - 131072);
}

static void allocate_into(struct block *b, uint64_t *rng, unsigned seed) {
    size_t n = random_size(rng);
    size_t alignment = 16;
    unsigned char *p = NULL;
    switch (next_random(rng) % 8) {
    case 0:
    case 1:
        p = malloc(n);
        break;
    case 2:
        p = calloc(1, n);
        CHECK(p, "calloc");
        for (size_t i = 0; i < n; i++) CHECK(p[i] == 0, "calloc(1, %zu) not zeroed at %zu", n, i);
        break;
    case 3: {
        alignment = (size_t)8 << (next_random(rng) % 10); /* 8 .. 4096 */
        void *q = NULL;
        int rc = posix_memalign(&q, alignment, n);
        CHECK(rc == 0, "posix_memalign(%zu, %zu) = %d", alignment, n, rc);
        p = q;
        break;
    }
    case 4:
        alignment = (size_t)1 << (next_random(rng) % 13); /* 1 .. 4096 */
        p = aligned_alloc(alignment, n);
        break;
    case 5:
        alignment = (size_t)32 << (next_random(rng) % 7); /* 32 .. 2048 */
        p = memalign(alignment, n);
        break;
    case 6:
        p = realloc(NULL, n);
        break;
    default:
        p = reallocarray(NULL, n, 1);
        break;
    }
    CHECK(p, "allocation of %zu bytes failed", n);
    if (alignment < 16) alignment = 16;
    b->p = p;
    b->size = n;
    b->alignment = alignment;
    b->seed = seed;
    fill(b);
}

static void *stress_thread(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * (id + 1);
    struct block slots[SLOTS];
    memset(slots, 0, sizeof slots);
    unsigned seed = id << 24;
    unsigned long crossed = 0;

    for (int op = 0; op < OPS_PER_THREAD; op++) {
        struct block *b = &slots[next_random(&rng) % SLOTS];
        if (!b->p) {
            allocate_into(b, &rng, ++seed);
            continue;
        }
        switch (next_random(&rng) % 4) {
        case 0: /* free */
            verify(b, "before free");
            free(b->p);
            b->p = NULL;
            break;
        case 1: { /* realloc: grow or shrink; the common prefix must survive */
            verify(b, "before realloc");
            size_t n = random_size(&rng);
            unsigned char *q = realloc(b->p, n);
            CHECK(q, "realloc to %zu failed", n);
            b->p = q;
            b->alignment = 16;
            if (n < b->size) b->size = n;
            verify(b, "after realloc");
            b->size = n;
            b->seed = ++seed;
            fill(b);
            break;
        }
        default: { /* swap with the exchange: the block we get was made by any thread */
            verify(b, "before exchange");
            size_t k = next_random(&rng) % EXCHANGE_SLOTS;
            pthread_mutex_lock(&exchange_lock);
            struct block theirs = exchange[k];
            exchange[k] = *b;
            pthread_mutex_unlock(&exchange_lock);
            *b = theirs;
            if (b->p) {
                verify(b, "after exchange");
                crossed++;
            }
            break;
        }
        }
    }
    for (int i = 0; i < SLOTS; i++) {
        if (slots[i].p) {
            verify(&slots[i], "at thread end");
            free(slots[i].p);
        }
    }
    atomic_fetch_add(&total_ops, OPS_PER_THREAD);
    atomic_fetch_add(&cross_thread_blocks, crossed);
    return NULL;
}

static void stress(void) {
    pthread_t threads[THREADS];
    for (unsigned t = 0; t < THREADS; t++)
        CHECK(pthread_create(&threads[t], NULL, stress_thread, (void *)(uintptr_t)t) == 0,
              "pthread_create");
    for (unsigned t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    for (int k = 0; k < EXCHANGE_SLOTS; k++) {
        if (exchange[k].p) {
            verify(&exchange[k], "left in the exchange");
            free(exchange[k].p);
        }
    }
    CHECK(atomic_load(&cross_thread_blocks) > 0, "no block crossed threads");
    printf("stress: ok threads=%d ops=%lu\n", THREADS, atomic_load(&total_ops));
    fflush(stdout);
}

/* ---------- 4. fork from a multi-threaded process ---------- */

static atomic_int stop_background;

static void *background_thread(void *arg) {
    uint64_t rng = 0x1234567ull + (uintptr_t)arg;
    void *held[32] = {0};
    while (!atomic_load(&stop_background)) {
        int i = next_random(&rng) % 32;
        free(held[i]);
        held[i] = malloc(random_size(&rng) % 65536 + 1);
        CHECK(held[i], "background malloc");
    }
    for (int i = 0; i < 32; i++) free(held[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(i * 13 + 1);
        CHECK(p, "child thread malloc");
        free(p);
    }
    return NULL;
}

static void child_work(void) {
    alarm(20); /* a deadlocked child dies of SIGALRM instead of hanging the test */
    uint64_t rng = (uint64_t)getpid() * 2654435761u + 1;
    void *held[64] = {0};
    for (int i = 0; i < 5000; i++) {
        int k = next_random(&rng) % 64;
        free(held[k]);
        size_t n = random_size(&rng);
        switch (i % 4) {
        case 0: held[k] = malloc(n); break;
        case 1: held[k] = calloc(1, n); break;
        case 2: held[k] = aligned_alloc(64, n); break;
        default: held[k] = realloc(NULL, n); break;
        }
        CHECK(held[k], "child allocation");
        memset(held[k], 0x42, n);
    }
    for (int k = 0; k < 64; k++) free(held[k]);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0, "pthread_create in child");
    pthread_join(t, NULL);
    _exit(0);
}

static void fork_while_threads_allocate(void) {
    pthread_t threads[FORK_BACKGROUND_THREADS];
    for (int t = 0; t < FORK_BACKGROUND_THREADS; t++)
        CHECK(pthread_create(&threads[t], NULL, background_thread, (void *)(uintptr_t)t) == 0,
              "pthread_create");
    for (int f = 0; f < FORKS; f++) {
        usleep(2000);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        CHECK(pid >= 0, "fork failed");
        if (pid == 0) child_work();
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %d of %d ended badly: %s %d", f, FORKS,
              WIFSIGNALED(status) ? "signal" : "exit status",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
    atomic_store(&stop_background, 1);
    for (int t = 0; t < FORK_BACKGROUND_THREADS; t++) pthread_join(threads[t], NULL);
    printf("fork: ok forks=%d\n", FORKS);
    fflush(stdout);
}

/* ---------- 2b. glibc's __libc_* names ---------- */

/* glibc exports its allocator under these names too; a program or a library wrapping
 * malloc may call them to reach the C library's allocator directly. */
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

/* A block of `n` bytes from `make`, moved to `to` bytes by `grow` (its bytes kept), then
 * given to `drop`. */
static void cross_names(void *(*make)(size_t), void *(*grow)(void *, size_t), void (*drop)(void *),
                        size_t n, size_t to, const char *names) {
    unsigned char *p = make(n);
    CHECK(p != NULL, "%s: the allocation of %zu bytes", names, n);
    fill_index(p, n);
    p = grow(p, to);
    CHECK(p != NULL && has_index(p, n), "%s: the block's bytes kept by the move to %zu", names, to);
    drop(p);
}

/* Each resolves into the preloaded object, and blocks cross freely between those names
 * and the standard ones (with glibc's own behind them, each crossing would free a block
 * into a heap that never made it). */
static void check_glibc_aliases(void) {
    static const char *const names[] = {"__libc_malloc",   "__libc_calloc", "__libc_realloc",
                                        "__libc_free",     "__libc_memalign",
                                        "__libc_valloc",   "__libc_pvalloc"};
    Dl_info marker;
    void *name_fn = dlsym(RTLD_DEFAULT, "alloclab_preload_heap_name");
    CHECK(name_fn && dladdr(name_fn, &marker), "the preloaded object's marker");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        Dl_info from;
        void *sym = dlsym(RTLD_DEFAULT, names[i]);
        CHECK(sym && dladdr(sym, &from) && from.dli_fbase == marker.dli_fbase,
              "%s resolves into the preloaded object", names[i]);
    }
    cross_names(__libc_malloc, realloc, free, 100, 5000, "__libc_malloc, realloc, free");
    cross_names(malloc, __libc_realloc, __libc_free, 200, 3000, "malloc, __libc_realloc, __libc_free");
    unsigned char *c = __libc_calloc(10, 100);
    CHECK(c != NULL, "__libc_calloc(10, 100)");
    for (size_t i = 0; i < 1000; i++) CHECK(c[i] == 0, "__libc_calloc's byte %zu is zero", i);
    free(c);
    void *d = __libc_memalign(4096, 100);
    CHECK(d != NULL && aligned_to(d, 4096), "__libc_memalign(4096, 100)");
    __libc_free(d);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *e = __libc_valloc(10);
    CHECK(e != NULL && aligned_to(e, page), "__libc_valloc(10)");
    free(e);
    void *f = __libc_pvalloc(10);
    CHECK(f != NULL && aligned_to(f, page) && malloc_usable_size(f) >= page,
          "__libc_pvalloc(10): a page");
    __libc_free(f);
    __libc_free(NULL);
    printf("glibc aliases: ok\n");
}

/* The heap's statistics: mallinfo2 counts a live 4 MiB block and its free, and
 * malloc_stats writes the heap's figures (checked by the driver, on stderr). */
static void check_statistics(void) {
    size_t big = (size_t)4 << 20;
    struct mallinfo2 before = mallinfo2();
    unsigned char *p = malloc(big);
    CHECK(p != NULL, "malloc of 4 MiB");
    memset(p, 1, big);
    struct mallinfo2 during = mallinfo2();
    CHECK(during.uordblks >= before.uordblks + big, "mallinfo2 counts a live 4 MiB block (%zu, then %zu)",
          before.uordblks, during.uordblks);
    CHECK(during.arena >= during.uordblks, "mallinfo2: the heap holds what is live (%zu of %zu)",
          during.uordblks, during.arena);
    CHECK(during.fordblks == during.arena - during.uordblks, "mallinfo2: free is the rest");
    free(p);
    struct mallinfo2 after = mallinfo2();
    CHECK(after.uordblks + big <= during.uordblks, "mallinfo2 counts the free (%zu, then %zu)",
          during.uordblks, after.uordblks);
    fflush(stderr);
    malloc_stats();
    printf("statistics: ok\n");
}

int main(void) {
    report_heap();
    check_rules();
    check_glibc_aliases();
    check_statistics();
    stress();
    fork_while_threads_allocate();
    printf("all ok\n");
    return 0;
}
