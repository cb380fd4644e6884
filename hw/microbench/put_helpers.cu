// Device helpers of the NVSHMEM put path (hw/microbench/put_kernel.py): the Numba-CUDA kernel links this
// file (NVRTC) and calls these through cuda.declare_device. They are the put path's copies of the store
// kernel's helpers in microbench.cu (same timer reads, same bounded grid barrier, same bounded spin), so
// both issue paths run the same protocol. Numba's foreign-function ABI: the first argument receives the
// return value, the int return is a status (0). Pointers travel as 64-bit integers.

typedef unsigned long long u64;
typedef unsigned int u32;

#define ERR_BARRIER_TIMEOUT 1
#define ERR_SPIN_BOUND 2
#define MAX_SPINS (1ull << 31)

__device__ __forceinline__ u64 xs_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __device__ int xs_gtimer(u64* ret) {
    *ret = xs_now();
    return 0;
}

extern "C" __device__ int xs_clock(u64* ret) {
    *ret = (u64)clock64();
    return 0;
}

extern "C" __device__ int xs_smid(u32* ret) {
    u32 s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    *ret = s;
    return 0;
}

// microbench.cu's grid_barrier: called by every thread of every CTA; thread 0 arrives on `counter_addr`
// (u32, zeroed by the host) and spins until `target`, bounded by timeout_ns of %globaltimer and MAX_SPINS.
// *ret = 1 when every CTA arrived, 0 on the bound (err[0] set).
extern "C" __device__ int xs_grid_barrier(int* ret, u64 counter_addr, u64 target, u64 timeout_ns, u64 err_addr,
                                          u64 fence) {
    __shared__ int ok;
    u32* counter = reinterpret_cast<u32*>(counter_addr);
    int* err = reinterpret_cast<int*>(err_addr);
    __syncthreads();
    if (threadIdx.x == 0) {
        ok = 1;
        if (fence) __threadfence();
        atomicAdd(counter, 1u);
        u64 t0 = xs_now();
        u64 spins = 0;
        while (*(volatile u32*)counter < (u32)target) {
            if ((++spins & 255ull) == 0 && (xs_now() - t0 > timeout_ns || spins > MAX_SPINS)) {
                atomicCAS(err, 0, ERR_BARRIER_TIMEOUT);
                ok = 0;
                break;
            }
        }
        if (fence) __threadfence();
    }
    __syncthreads();
    *ret = ok;
    return 0;
}

// microbench.cu's spin_until: thread 0 spins until %globaltimer passes until_ns (bounded); *ret = 0 on the bound.
extern "C" __device__ int xs_spin_until(int* ret, u64 until_ns, u64 err_addr) {
    __shared__ int ok;
    __syncthreads();
    if (threadIdx.x == 0) {
        ok = 1;
        u64 spins = 0;
        while (xs_now() < until_ns) {
            if (++spins > MAX_SPINS) { atomicCAS(reinterpret_cast<int*>(err_addr), 0, ERR_SPIN_BOUND); ok = 0; break; }
        }
    }
    __syncthreads();
    *ret = ok;
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
