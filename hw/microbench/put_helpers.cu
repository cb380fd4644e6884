// Device helpers of the NVSHMEM put path (hw/microbench/put_kernel.py): the Numba-CUDA kernel links this
// file (NVRTC) and calls these through cuda.declare_device. They wrap the store kernel's helpers
// (xstage_sync.cuh: the same timer reads, bounded grid barrier and bounded spin), so both issue paths run
// the same protocol. Numba's foreign-function ABI: the first argument receives the
// return value, the int return is a status (0). Pointers travel as 64-bit integers.

#include "xstage_sync.cuh"

extern "C" __device__ int xs_gtimer(u64* ret) {
    *ret = gtimer();
    return 0;
}

extern "C" __device__ int xs_clock(u64* ret) {
    *ret = (u64)clock64();
    return 0;
}

extern "C" __device__ int xs_smid(u32* ret) {
    *ret = sm_id();
    return 0;
}

// xstage_sync.cuh's grid_barrier: called by every thread of every CTA; thread 0 arrives on `counter_addr`
// (u32, zeroed by the host) and spins until `target`, bounded by timeout_ns of %globaltimer and MAX_SPINS.
// *ret = 1 when every CTA arrived, 0 on the bound (err[0] set).
extern "C" __device__ int xs_grid_barrier(int* ret, u64 counter_addr, u64 target, u64 timeout_ns, u64 err_addr,
                                          u64 fence) {
    *ret = grid_barrier(reinterpret_cast<u32*>(counter_addr), (u32)target, timeout_ns,
                        reinterpret_cast<int*>(err_addr), fence != 0) ? 1 : 0;
    return 0;
}

// xstage_sync.cuh's spin_until: thread 0 spins until %globaltimer passes until_ns (bounded); *ret = 0 on the bound.
extern "C" __device__ int xs_spin_until(int* ret, u64 until_ns, u64 err_addr) {
    *ret = spin_until(until_ns, reinterpret_cast<int*>(err_addr)) ? 1 : 0;
    return 0;
}

// The clock-gap of microbench.cu (gap_kind 1): thread 0 spins `cycles` of clock64, then the CTA syncs.
extern "C" __device__ int xs_spin_cycles(int* ret, u64 cycles) {
    if (threadIdx.x == 0) {
        u64 c0 = (u64)clock64();
        while ((u64)clock64() - c0 < cycles) { }
    }
    __syncthreads();
    *ret = 1;
    return 0;
}
