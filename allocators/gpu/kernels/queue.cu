// The queue-of-free-pages baseline (the paper's foil), self-contained CUDA C for NVRTC.
//
// A ring of `capacity` slots (a power of two) holding free page numbers, with 64-bit
// head and tail counters in `ends` (ends[0] = head, ends[1] = tail; they never wrap in
// practice). An empty slot holds EMPTY_SLOT.
//
// Two dequeues:
// * queue_alloc_cas — the paper's queue: read head and tail, CAS head to head + 1, retry on
//   failure. Every waiting thread retries until its CAS wins, one winner per round of
//   retries, which is the model behind TAS = (N+1)/2 (probes = CAS attempts). Its cost grows
//   as N * concurrency: the host only runs it up to a bounded thread count.
// * queue_alloc_ticket — a stronger baseline: one atomicAdd on head per dequeue (a ticket),
//   so its probe count is 1 and the serialisation is in the hardware's atomics on one
//   address. A ticket past the tail means the queue ran dry: the thread gives up.
// A dequeue that won slot h waits for the slot to be filled (an enqueue takes its ticket
// before it writes), with a bound.
// Free: a ticket on tail (atomicAdd), then the page goes into the slot (atomicExch).

typedef unsigned int u32;
typedef unsigned long long u64;

#define NO_PAGE 0xffffffffu
#define EMPTY_SLOT 0xffffffffu

__device__ __forceinline__ u32 global_thread(void) {
    return blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ u64 load_volatile64(const u64 *p) {
    return *(const volatile u64 *)p;
}

// Takes the page of slot `ticket`, waiting (bounded) for its enqueue to finish.
__device__ __forceinline__ u32 take_slot(u32 *slots, u32 capacity, u64 ticket, u32 max_probes) {
    u32 *slot = &slots[ticket & (u64)(capacity - 1u)];
    for (u32 i = 0; i < max_probes; i++) {
        u32 page = atomicExch(slot, EMPTY_SLOT);
        if (page != EMPTY_SLOT) {
            return page;
        }
    }
    return NO_PAGE;
}

// Fills the ring with `count` free pages. One thread per slot.
extern "C" __global__ void queue_init(u32 *slots, u64 *ends, u32 capacity, const u32 *free_pages,
                                      u32 count) {
    u32 tid = global_thread();
    if (tid < capacity) {
        slots[tid] = tid < count ? free_pages[tid] : EMPTY_SLOT;
    }
    if (tid == 0u) {
        ends[0] = 0ull;
        ends[1] = (u64)count;
    }
}

extern "C" __global__ void queue_alloc_cas(u32 *slots, u64 *ends, u32 capacity, u32 requesters,
                                           u32 max_probes, u32 *out_page, u32 *out_probes) {
    u32 tid = global_thread();
    if (tid >= requesters) {
        return;
    }
    u32 probes = 0;
    u32 got = NO_PAGE;
    while (probes < max_probes) {
        probes++;
        u64 head = load_volatile64(&ends[0]);
        u64 tail = load_volatile64(&ends[1]);
        if (head >= tail) {
            continue;  // empty for now: a concurrent free may refill it
        }
        if (atomicCAS(&ends[0], head, head + 1ull) == head) {
            got = take_slot(slots, capacity, head, max_probes);
            break;
        }
    }
    out_page[tid] = got;
    out_probes[tid] = probes;
}

extern "C" __global__ void queue_alloc_ticket(u32 *slots, u64 *ends, u32 capacity,
                                              u32 requesters, u32 max_probes, u32 *out_page,
                                              u32 *out_probes) {
    u32 tid = global_thread();
    if (tid >= requesters) {
        return;
    }
    u64 ticket = atomicAdd(&ends[0], 1ull);
    u32 got = NO_PAGE;
    if (ticket < load_volatile64(&ends[1])) {
        got = take_slot(slots, capacity, ticket, max_probes);
    }
    out_page[tid] = got;
    out_probes[tid] = 1u;
}

extern "C" __global__ void queue_free(u32 *slots, u64 *ends, u32 capacity, u32 requesters,
                                      const u32 *held_page) {
    u32 tid = global_thread();
    if (tid >= requesters || held_page[tid] == NO_PAGE) {
        return;
    }
    u64 ticket = atomicAdd(&ends[1], 1ull);
    __threadfence();
    atomicExch(&slots[ticket & (u64)(capacity - 1u)], held_page[tid]);
}
