/* One heap misuse, named by the first argument, through the C API of whatever malloc the
 * process has (a preload library's under LD_PRELOAD). The cases are those of alloclab's
 * `security` suite (its `misuse` workload), written in C so that they reach the heap as a
 * C program's bugs do: through malloc, free and realloc, without sizes at free.
 *
 * After a case whose misuse is a memory access, the program writes "access done" to
 * standard output (with write(2), unbuffered); a heap that made the memory inaccessible
 * kills it before that line. A program still alive at the end writes "survived" and exits
 * 0: the misuse went unnoticed. Exit 2: unknown case or bad arguments. */

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void say(const char *line) {
    ssize_t ignored = write(1, line, strlen(line));
    (void)ignored;
}

/* The compiler knows malloc and free; every pointer goes through here so that it cannot
 * drop an allocation that is only freed, or a store into freed memory. */
static void *volatile sink;
static void *launder(void *p) {
    sink = p;
    return sink;
}

static void *xmalloc(size_t size) {
    void *p = launder(malloc(size));
    if (p == NULL) {
        fprintf(stderr, "malloc(%zu) failed\n", size);
        exit(1);
    }
    return p;
}

static void smear(void *at, size_t len) { memset(launder(at), 0x41, len); }

/* After a write through a dangling pointer: 65 536 blocks of 16 to 64 bytes, all live at
 * once, as a program that goes on allocating would make (the suite's count). */
static void allocate_after_free(void) {
    enum { N = 65536 };
    void **blocks = mmap(NULL, N * sizeof(void *), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (blocks == MAP_FAILED) exit(1);
    for (int i = 0; i < N; i++) blocks[i] = xmalloc(16 * (1 + i % 4));
    for (int i = 0; i < N; i++) free(launder(blocks[i]));
    munmap(blocks, N * sizeof(void *));
}

static _Alignas(16) unsigned char foreign[256];

#define S 64
#define LARGE (4u << 20)

static int perform(const char *c) {
    if (!strcmp(c, "double_free_immediate")) {
        void *p = xmalloc(S);
        free(p);
        free(launder(p));
    } else if (!strcmp(c, "double_free_delayed")) {
        void *p = xmalloc(S);
        free(p);
        void *others[500];
        for (int i = 0; i < 500; i++) others[i] = xmalloc(16 + (i * 37) % 1000);
        for (int i = 0; i < 500; i++) free(others[i]);
        free(launder(p));
    } else if (!strcmp(c, "double_free_interleaved")) {
        void *p = xmalloc(S), *q = xmalloc(S);
        free(p);
        free(q);
        free(launder(p));
    } else if (!strcmp(c, "invalid_free_stack")) {
        _Alignas(16) unsigned char local[256];
        free(launder(local + 64));
    } else if (!strcmp(c, "invalid_free_unaligned")) {
        free(launder((char *)xmalloc(S) + 1));
    } else if (!strcmp(c, "invalid_free_interior")) {
        free(launder((char *)xmalloc(256) + 16));
    } else if (!strcmp(c, "invalid_free_mmap")) {
        char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) exit(1);
        free(launder(page + 64));
    } else if (!strcmp(c, "invalid_free_static")) {
        free(launder(foreign + 64));
    } else if (!strcmp(c, "overwrite_header")) {
        (void)xmalloc(S);
        char *p = xmalloc(S);
        smear(p - 16, 16);
        free(p);
    } else if (!strcmp(c, "overwrite_neighbour")) {
        /* Of a few blocks, the two closest in address order: the overflow runs from the end
         * of the lower one to 16 bytes into the upper one. */
        uintptr_t b[8];
        for (int i = 0; i < 8; i++) b[i] = (uintptr_t)xmalloc(S);
        uintptr_t low = 0, high = 0, gap = UINTPTR_MAX;
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++)
                if (b[j] > b[i] && b[j] - (b[i] + S) < gap) {
                    gap = b[j] - (b[i] + S);
                    low = b[i];
                    high = b[j];
                }
        smear((void *)(low + S), (gap < 4096 ? gap : 4096) + 16);
        free(launder((void *)high));
    } else if (!strcmp(c, "write_after_free")) {
        char *p = xmalloc(S);
        free(p);
        smear(p + S / 2, 8);
        say("access done\n");
        allocate_after_free();
    } else if (!strcmp(c, "write_after_free_large")) {
        char *p = xmalloc(LARGE);
        free(p);
        smear(p + (1 << 20), 8);
        say("access done\n");
    } else if (!strcmp(c, "overflow_1") || !strcmp(c, "overflow_32")) {
        char *p = xmalloc(S);
        smear(p + S, c[9] == '1' ? 1 : 32);
        say("access done\n");
        free(p);
    } else if (!strcmp(c, "underflow_1") || !strcmp(c, "underflow_32")) {
        char *p = xmalloc(S);
        size_t len = c[10] == '1' ? 1 : 32;
        smear(p - len, len);
        say("access done\n");
        free(p);
    } else if (!strcmp(c, "overflow_memcpy")) {
        char source[S + 32];
        memset(source, 0x41, sizeof source);
        char *p = xmalloc(S);
        memcpy(p, launder(source), sizeof source);
        say("access done\n");
        free(launder(p));
    } else if (!strcmp(c, "overflow_terminator")) {
        char *p = xmalloc(60);
        ((volatile char *)p)[60] = 0;
        say("access done\n");
        free(p);
    } else if (!strcmp(c, "overflow_large")) {
        char *p = xmalloc(LARGE);
        smear(p + LARGE, 1 << 20);
        say("access done\n");
        free(p);
    } else if (!strcmp(c, "zero_size_write")) {
        volatile char *p = xmalloc(0);
        *p = 1;
        say("access done\n");
        free((void *)p);
    } else if (!strcmp(c, "zero_size_read")) {
        volatile char *p = xmalloc(0);
        char seen = *p;
        (void)seen;
        say("access done\n");
        free((void *)p);
    } else if (!strcmp(c, "realloc_write_after_move")) {
        char *p = xmalloc(S);
        void *after = xmalloc(256);
        char *q = launder(realloc(p, 64 << 10));
        if (q == NULL) exit(1);
        if (q != p) smear(p + S / 2, 8);
        say("access done\n");
        allocate_after_free();
        free(q);
        free(after);
    } else if (!strcmp(c, "realloc_overflow_after_shrink")) {
        char *p = launder(realloc(xmalloc(96), S));
        if (p == NULL) exit(1);
        smear(p + S, 1);
        say("access done\n");
        free(p);
    } else {
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2 || !perform(argv[1])) {
        fprintf(stderr, "usage: misuse CASE (a case of alloclab's security suite)\n");
        return 2;
    }
    /* Carry on as a program would. */
    for (int i = 0; i < 16; i++) free(xmalloc(16 + i * 60));
    say("survived\n");
    return 0;
}
