// The random-search page allocator of Pham et al. (ICS 2022, TOPC 2025) on the device:
// RW, CRW, RW-BM (single and multi-page), CoRW and a warp-aggregated malloc/free.
//
// Self-contained CUDA C for NVRTC: no headers, every kernel `extern "C"`. Written from the
// designs in shared/notes/gpu.md.
//
// State. RW and CRW: one u32 per page, 0 = free, 1 = in use. RW-BM, CoRW, warp malloc: one
// bit per page in u32 words, 1 = in use; a run of n <= 32 pages lies inside one word.
//
// Results. Every allocation kernel writes, per requesting thread, the first page it got
// (NO_PAGE if it gave up after `max_probes` probes: the host reports that as a failure
// instead of hanging) and its probe count, from which the host computes TAS (mean probes)
// and WAS (mean over warps of the largest probe count). What one probe is matches the CPU
// model (allocators/gpu/src/sim.rs): RW/CRW one page, RW-BM one random word (a lost race
// inside a word that still has a free run is not a new probe), CoRW one warp step, counted
// for each lane still in need.
//
// Orderings. A claim is an atomic RMW on the page's word; a free is preceded by
// __threadfence() so that the owner's writes to the page are visible before the page can
// be claimed again.

typedef unsigned int u32;
typedef unsigned long long u64;

#define FULL_WORD 0xffffffffu
#define NO_PAGE 0xffffffffu
#define WARP_LANES 32u

// ---- random numbers: SplitMix64, one stream per thread (or per warp) ----

__device__ __forceinline__ u64 splitmix_next(u64 *state) {
    *state += 0x9e3779b97f4a7c15ull;
    u64 z = *state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in [0, n) by multiply-shift (n < 2^32; the bias is below 2^-32 * n).
__device__ __forceinline__ u32 random_below(u64 *state, u32 n) {
    return (u32)(((splitmix_next(state) >> 32) * (u64)n) >> 32);
}

__device__ __forceinline__ u64 stream_seed(u64 seed, u64 stream) {
    u64 s = seed ^ (stream * 0xd1342543de82ef95ull);
    splitmix_next(&s);
    return s;
}

__device__ __forceinline__ u32 global_thread(void) {
    return blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ u32 load_volatile(const u32 *p) {
    return *(const volatile u32 *)p;
}

// ---- bit runs inside one word ----

// Bit i is set iff bits i .. i+n-1 of `free_bits` are all set (1 <= n <= 32).
__device__ __forceinline__ u32 run_starts(u32 free_bits, u32 n) {
    u32 starts = free_bits;
    for (u32 i = 1; i < n && starts; i++) {
        starts &= free_bits >> i;
    }
    return starts;
}

__device__ __forceinline__ u32 run_mask(u32 n, u32 start) {
    return (n >= 32u ? FULL_WORD : ((1u << n) - 1u)) << start;
}

// The lowest `count` set bits of `bits`.
__device__ __forceinline__ u32 lowest_set_bits(u32 bits, u32 count) {
    u32 kept = 0;
    for (u32 i = 0; i < count && bits; i++) {
        u32 low = bits & (0u - bits);
        kept |= low;
        bits ^= low;
    }
    return kept;
}

// Index of the `rank`-th (0-based) set bit of `bits`; `bits` has more than `rank`.
__device__ __forceinline__ u32 nth_set_bit(u32 bits, u32 rank) {
    for (u32 i = 0; i < rank; i++) {
        bits &= bits - 1u;
    }
    return (u32)(__ffs(bits) - 1);
}

// RW-BM claim of a run of `pages` (1..=32) pages: probe random words until one has such a
// run and our atomicOr sets all of it. Bits of the run that our atomicOr did set while
// another bit of it was already taken are ours alone and are cleared again; the search
// then stays in the word with the value atomicOr returned. Returns the first page, or
// NO_PAGE after `max_probes` words.
__device__ u32 bitmap_claim_run(u32 *words, u32 word_count, u32 pages, u64 *rng,
                                u32 max_probes, u32 *probes) {
    while (*probes < max_probes) {
        u32 w = random_below(rng, word_count);
        *probes += 1u;
        u32 seen = load_volatile(&words[w]);
        for (;;) {
            u32 starts = run_starts(~seen, pages);
            if (starts == 0u) {
                break;
            }
            u32 start = (u32)(__ffs(starts) - 1);
            u32 mask = run_mask(pages, start);
            u32 before = atomicOr(&words[w], mask);
            if ((before & mask) == 0u) {
                return w * 32u + start;
            }
            u32 set_by_us = mask & ~before;
            if (set_by_us != 0u) {
                atomicAnd(&words[w], ~set_by_us);
            }
            seen = before;
        }
    }
    return NO_PAGE;
}

__device__ __forceinline__ void bitmap_release_run(u32 *words, u32 first_page, u32 pages) {
    __threadfence();
    atomicAnd(&words[first_page / 32u], ~run_mask(pages, first_page % 32u));
}

// ---- RW: one word per page ----

extern "C" __global__ void rw_alloc(u32 *pages, u32 total_pages, u32 requesters, u64 seed,
                                    u32 max_probes, u32 *out_page, u32 *out_probes) {
    u32 tid = global_thread();
    if (tid >= requesters) {
        return;
    }
    u64 rng = stream_seed(seed, tid);
    u32 probes = 0;
    u32 got = NO_PAGE;
    while (probes < max_probes) {
        u32 p = random_below(&rng, total_pages);
        probes++;
        if (atomicExch(&pages[p], 1u) == 0u) {
            got = p;
            break;
        }
    }
    out_page[tid] = got;
    out_probes[tid] = probes;
}

// CRW: the page after the last one this thread obtained first (`last_page`, kept across
// kernels), then random pages as RW.
extern "C" __global__ void crw_alloc(u32 *pages, u32 total_pages, u32 requesters, u64 seed,
                                     u32 max_probes, u32 *last_page, u32 *out_page,
                                     u32 *out_probes) {
    u32 tid = global_thread();
    if (tid >= requesters) {
        return;
    }
    u64 rng = stream_seed(seed, tid);
    u32 probes = 0;
    u32 got = NO_PAGE;
    u32 p = (last_page[tid] + 1u) % total_pages;
    while (probes < max_probes) {
        probes++;
        if (atomicExch(&pages[p], 1u) == 0u) {
            got = p;
            break;
        }
        p = random_below(&rng, total_pages);
    }
    if (got != NO_PAGE) {
        last_page[tid] = got;
    }
    out_page[tid] = got;
    out_probes[tid] = probes;
}

extern "C" __global__ void rw_free(u32 *pages, u32 requesters, const u32 *held_page) {
    u32 tid = global_thread();
    if (tid >= requesters || held_page[tid] == NO_PAGE) {
        return;
    }
    __threadfence();
    atomicExch(&pages[held_page[tid]], 0u);
}

// ---- RW-BM: one bit per page, runs of 1..=32 pages ----

extern "C" __global__ void rwbm_alloc(u32 *words, u32 word_count, u32 requesters,
                                      u32 pages_per_request, u64 seed, u32 max_probes,
                                      u32 *out_page, u32 *out_probes) {
    u32 tid = global_thread();
    if (tid >= requesters) {
        return;
    }
    u64 rng = stream_seed(seed, tid);
    u32 probes = 0;
    out_page[tid] =
        bitmap_claim_run(words, word_count, pages_per_request, &rng, max_probes, &probes);
    out_probes[tid] = probes;
}

extern "C" __global__ void rwbm_free(u32 *words, u32 requesters, u32 pages_per_request,
                                     const u32 *held_page) {
    u32 tid = global_thread();
    if (tid >= requesters || held_page[tid] == NO_PAGE) {
        return;
    }
    bitmap_release_run(words, held_page[tid], pages_per_request);
}

// ---- CoRW: a warp probes 32 consecutive words (1024 pages) per step ----
//
// Every lane of the warp stays in the loop until no lane needs a page, so the warp
// intrinsics see all 32 lanes (launch with blockDim a multiple of 32; lanes past
// `requesters` need nothing). Per step: lane l reads word (start + l) mod W; lanes whose
// word has free bits, while the free bits of the lanes before them do not yet cover the
// warp's need, take every free bit of their word with one atomicOr; the bits taken are
// ranked across the warp and handed to the needy lanes in order; the surplus goes back with
// atomicAnd (an exchange of the old value would erase a page freed meanwhile).

__device__ __forceinline__ u32 warp_exclusive_sum(u32 value, u32 lane) {
    u32 inclusive = value;
    for (u32 offset = 1; offset < WARP_LANES; offset <<= 1) {
        u32 below = __shfl_up_sync(FULL_WORD, inclusive, offset);
        if (lane >= offset) {
            inclusive += below;
        }
    }
    return inclusive - value;
}

extern "C" __global__ void corw_alloc(u32 *words, u32 word_count, u32 requesters, u64 seed,
                                      u32 max_steps, u32 *out_page, u32 *out_probes) {
    u32 tid = global_thread();
    u32 lane = threadIdx.x % WARP_LANES;
    bool need = tid < requesters;
    u32 got = NO_PAGE;
    u32 probes = 0;
    u64 rng = stream_seed(seed, tid / WARP_LANES);
    for (u32 step = 0; step < max_steps; step++) {
        u32 needy = __ballot_sync(FULL_WORD, need);
        if (needy == 0u) {
            break;
        }
        u32 total_need = __popc(needy);
        if (need) {
            probes++;
        }
        // Every lane draws the same start (same warp stream): no shuffle needed.
        u32 w = (random_below(&rng, word_count) + lane) % word_count;
        u32 free_seen = __popc(~load_volatile(&words[w]));
        u32 before_me = warp_exclusive_sum(free_seen, lane);
        u32 taken = 0u;
        if (free_seen != 0u && before_me < total_need) {
            taken = ~atomicOr(&words[w], FULL_WORD);
        }
        u32 taken_count = __popc(taken);
        u32 rank_base = warp_exclusive_sum(taken_count, lane);
        u32 used = rank_base >= total_need ? 0u : min(taken_count, total_need - rank_base);
        u32 kept = lowest_set_bits(taken, used);
        u32 surplus = taken & ~kept;
        if (surplus != 0u) {
            atomicAnd(&words[w], ~surplus);
        }
        u32 my_rank = __popc(needy & ((1u << lane) - 1u));
        for (u32 src = 0; src < WARP_LANES; src++) {
            u32 src_kept = __shfl_sync(FULL_WORD, kept, src);
            u32 src_base = __shfl_sync(FULL_WORD, rank_base, src);
            u32 src_word = __shfl_sync(FULL_WORD, w, src);
            u32 src_count = __popc(src_kept);
            if (need && my_rank >= src_base && my_rank < src_base + src_count) {
                got = src_word * 32u + nth_set_bit(src_kept, my_rank - src_base);
                need = false;
            }
        }
    }
    if (tid < requesters) {
        out_page[tid] = got;
        out_probes[tid] = probes;
    }
}

// CoRW's free: the lanes of a warp whose pages lie in the same word (CoRW hands a warp the
// bits of few words) combine their bits with shuffles, and the lowest of them clears them
// all with one atomicAnd. Every lane takes part in the shuffles (no early return).
extern "C" __global__ void corw_free(u32 *words, u32 requesters, const u32 *held_page) {
    u32 tid = global_thread();
    u32 lane = threadIdx.x % WARP_LANES;
    u32 page = tid < requesters ? held_page[tid] : NO_PAGE;
    u32 word = page == NO_PAGE ? NO_PAGE : page / 32u;
    u32 bit = page == NO_PAGE ? 0u : 1u << (page % 32u);
    u32 mask = 0u;
    u32 first_lane = WARP_LANES;
    for (u32 src = 0; src < WARP_LANES; src++) {
        u32 src_word = __shfl_sync(FULL_WORD, word, src);
        u32 src_bit = __shfl_sync(FULL_WORD, bit, src);
        if (src_word == word) {
            mask |= src_bit;
            first_lane = min(first_lane, src);
        }
    }
    if (word != NO_PAGE && first_lane == lane) {
        __threadfence();
        atomicAnd(&words[word], ~mask);
    }
}

// ---- warp-aggregated malloc/free of 1 .. 32 pages' worth of bytes ----
//
// A lane asking for at most one page's worth is "small": the warp's small requests, each
// rounded up to 16 bytes, are laid end to end (exclusive prefix sum) and the lowest small
// lane claims one run of ceil(sum / page) <= 32 pages for all of them. A larger request
// claims its own run of ceil(size / page) pages (the host refuses sizes over 32 pages). A
// handle is (first page of the run << 32) | byte offset in the run. Per run, `run_refs`
// counts the lanes sharing it and `run_pages` its length, both indexed by its first page;
// the lane that drops the count to zero frees the run.

#define SMALL_ALIGN 16u

extern "C" __global__ void warp_malloc(u32 *words, u32 word_count, u32 requesters,
                                       const u32 *size_bytes, u32 page_bytes, u64 seed,
                                       u32 max_probes, u32 *run_refs, u32 *run_pages,
                                       u64 *out_handle, u32 *out_probes) {
    u32 tid = global_thread();
    u32 lane = threadIdx.x % WARP_LANES;
    u32 size = tid < requesters ? size_bytes[tid] : 0u;
    bool small = size != 0u && size <= page_bytes;
    u32 small_lanes = __ballot_sync(FULL_WORD, small);
    u32 rounded = small ? (size + SMALL_ALIGN - 1u) / SMALL_ALIGN * SMALL_ALIGN : 0u;
    u32 offset = warp_exclusive_sum(rounded, lane);
    u32 total = __shfl_sync(FULL_WORD, offset + rounded, WARP_LANES - 1u);
    u64 rng = stream_seed(seed, tid);
    u32 probes = 0;
    u32 first = NO_PAGE;
    if (size > page_bytes) {
        u32 pages = (size + page_bytes - 1u) / page_bytes;
        first = bitmap_claim_run(words, word_count, pages, &rng, max_probes, &probes);
        if (first != NO_PAGE) {
            run_refs[first] = 1u;
            run_pages[first] = pages;
        }
    }
    u32 leader = small_lanes != 0u ? (u32)(__ffs(small_lanes) - 1) : 0u;
    u32 shared_first = NO_PAGE;
    if (small && lane == leader) {
        u32 pages = (total + page_bytes - 1u) / page_bytes;
        shared_first = bitmap_claim_run(words, word_count, pages, &rng, max_probes, &probes);
        if (shared_first != NO_PAGE) {
            run_refs[shared_first] = __popc(small_lanes);
            run_pages[shared_first] = pages;
        }
    }
    __syncwarp();
    shared_first = __shfl_sync(FULL_WORD, shared_first, leader);
    u32 leader_probes = __shfl_sync(FULL_WORD, probes, leader);
    if (small) {
        first = shared_first;
        probes = leader_probes;
    } else {
        offset = 0u;
    }
    if (tid < requesters) {
        out_handle[tid] = first == NO_PAGE ? ~0ull : (((u64)first << 32) | (u64)offset);
        out_probes[tid] = probes;
    }
}

extern "C" __global__ void warp_free(u32 *words, u32 requesters, u32 *run_refs,
                                     const u32 *run_pages, const u64 *handle) {
    u32 tid = global_thread();
    if (tid >= requesters || handle[tid] == ~0ull) {
        return;
    }
    u32 first = (u32)(handle[tid] >> 32);
    if (atomicSub(&run_refs[first], 1u) == 1u) {
        bitmap_release_run(words, first, run_pages[first]);
    }
}
