/*
 * huge-blocks: a program of 1-16 MiB blocks, for comparing heaps' huge-block paths.
 *
 * Keeps 4 blocks live; each of N steps frees one and allocates a new one of a random size
 * from 1 to 16 MiB (a fixed LCG, so every heap sees the same sizes), writes a byte on every
 * page of it and reads one back. Prints a checksum of what was read and the loop's time.
 *
 *   cc -O2 -o /tmp/huge-blocks scripts/huge-blocks.c
 *   /usr/bin/time -f '%e s %M KB' /tmp/huge-blocks 400
 *   LD_PRELOAD=$PWD/target/preload/liballoclab_preload_wfspan.so \
 *       /usr/bin/time -f '%e s %M KB' /tmp/huge-blocks 400
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 400;
    if (steps <= 0) {
        fprintf(stderr, "usage: %s STEPS\n", argv[0]);
        return 2;
    }
    unsigned x = 12345;
    char *live[4] = {0};
    unsigned long sum = 0;
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < steps; i++) {
        x = x * 1103515245u + 12345u;
        size_t size = ((size_t)1 << 20) + (x >> 8) % (15u << 20);
        int k = i & 3;
        free(live[k]);
        char *p = malloc(size);
        if (!p) {
            fprintf(stderr, "malloc(%zu) failed\n", size);
            return 1;
        }
        for (size_t at = 0; at < size; at += 4096)
            p[at] = (char)i;
        sum += (unsigned char)p[size / 4096 / 2 * 4096];
        live[k] = p;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    for (int k = 0; k < 4; k++)
        free(live[k]);
    printf("checksum %lu, %.1f ms\n", sum,
           (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6);
    return 0;
}
