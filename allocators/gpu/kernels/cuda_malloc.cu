// CUDA's in-kernel malloc/free, the second baseline. Self-contained CUDA C for NVRTC.
//
// The device heap is the context's CU_LIMIT_MALLOC_HEAP_SIZE (8 MB by default); the host
// raises it before the first launch. Each thread asks for its own size and stores the
// pointer (0 when malloc returned NULL: the host counts those as failures); the free kernel
// frees what the allocation kernel got.

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 global_thread(void) {
    return blockIdx.x * blockDim.x + threadIdx.x;
}

extern "C" __global__ void cuda_malloc_alloc(u32 requesters, const u32 *size_bytes,
                                             u64 *out_pointer) {
    u32 tid = global_thread();
    if (tid >= requesters) {
        return;
    }
    void *p = malloc(size_bytes[tid]);
    out_pointer[tid] = (u64)p;
}

extern "C" __global__ void cuda_malloc_free(u32 requesters, const u64 *pointer) {
    u32 tid = global_thread();
    if (tid >= requesters || pointer[tid] == 0ull) {
        return;
    }
    free((void *)pointer[tid]);
}
