// Shared by the store kernel (microbench.cu) and the NVSHMEM put path's helpers (put_helpers.cu), so both
// issue paths run the same timer reads, the same bounded grid barrier and the same bounded spin.
// Inlined into each source by xstage.hw.microbench.runner.cuda_source (NVRTC gets one string); nvcc finds it
// beside the including file.
#ifndef XSTAGE_SYNC_CUH
#define XSTAGE_SYNC_CUH

typedef unsigned long long u64;
typedef unsigned int u32;

#define ERR_BARRIER_TIMEOUT 1
#define ERR_SPIN_BOUND 2
#define MAX_SPINS (1ull << 31)

__device__ __forceinline__ u64 gtimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ u32 sm_id() {
    u32 s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

// Grid-wide barrier on a monotonically increasing counter (zeroed by the host before a launch).
// All CTAs must be co-resident: the host launches at most one CTA per SM. Thread 0 spins, bounded
// by `timeout_ns` of %globaltimer and by MAX_SPINS iterations. Returns false on timeout.
__device__ __forceinline__ bool grid_barrier(u32* counter, u32 target, u64 timeout_ns, int* err, bool fence = true) {
    __shared__ int ok;
    __syncthreads();
    if (threadIdx.x == 0) {
        ok = 1;
        if (fence) __threadfence();
        atomicAdd(counter, 1u);
        u64 t0 = gtimer();
        u64 spins = 0;
        while (*(volatile u32*)counter < target) {
            if ((++spins & 255ull) == 0 && (gtimer() - t0 > timeout_ns || spins > MAX_SPINS)) {
                atomicCAS(err, 0, ERR_BARRIER_TIMEOUT);
                ok = 0;
                break;
            }
        }
        if (fence) __threadfence();
    }
    __syncthreads();
    return ok != 0;
}

// Spin thread 0 until %globaltimer passes `until_ns` (bounded). Returns false on the bound.
__device__ __forceinline__ bool spin_until(u64 until_ns, int* err) {
    __shared__ int ok;
    __syncthreads();
    if (threadIdx.x == 0) {
        ok = 1;
        u64 spins = 0;
        while (gtimer() < until_ns) {
            if (++spins > MAX_SPINS) { atomicCAS(err, 0, ERR_SPIN_BOUND); ok = 0; break; }
        }
    }
    __syncthreads();
    return ok != 0;
}

#endif  // XSTAGE_SYNC_CUH
