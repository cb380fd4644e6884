// Host-path probe (issue 15, item 2): long zero-gap free-running bursts into host-mapped memory.
// Compiled by NVRTC through CuPy's RawModule, after microbench.cu; launched by benchmarks/gpu/host_probe.py, which documents
// the protocol. One CTA = one producer (dynamic shared memory forces one CTA per SM).
//
// After one common start (a bounded grid barrier; CTA 0 then writes flags[0] = tag into host memory),
// producer p writes n_bursts bursts of words_per_producer 16-byte words back to back, no gap and no
// fence between bursts. Burst b goes to copy b % slots of the K slices (slots = n_bursts: every burst a
// fresh destination; slots = 1: the same addresses rewritten). Per burst thread 0 records (u64)
//   rec[2 (p n + b)]     %globaltimer before the burst's first store
//   rec[2 (p n + b) + 1] %globaltimer after its stores were issued and a __syncthreads (no fence)
// After the last burst every thread runs __threadfence_system (fence_end = 1) or a GPU-scope
// __threadfence (fence_end = 0); thread 0 records fin[2 p] = %globaltimer, then counts itself done; the
// last producer to finish writes flags[1] = tag (after __threadfence_system when fence_end = 1) and
// records fin[2 p + 1]. The host polls flags[0] and flags[1]: with fence_end = 0 the done flag may
// overtake data still in flight (the host checks the data when it sees the flag).
// The helpers (u64, u32, gtimer, sm_id, pattern_word) are the microbenchmark's: host_probe.py compiles
// hw/microbench/microbench.cu and this file as one source.

extern "C" __global__ void __launch_bounds__(1024)
host_probe(uint4* __restrict__ dst, u32 words_per_producer, u32 slots, u32 n_bursts, u32 fence_end, u32 tag,
           u64 timeout_ns, u32* counter, volatile u32* flags, u64* __restrict__ rec, u64* __restrict__ fin,
           u32* __restrict__ sm_of, int* err) {
    extern __shared__ uint4 occupancy_pad[];
    __shared__ int ok;
    const u32 p = blockIdx.x;
    const u32 K = gridDim.x;
    if (threadIdx.x == 0) {
        ok = 1;
        sm_of[p] = sm_id();
        atomicAdd(counter, 1u);
        u64 t0 = gtimer();
        u64 spins = 0;
        while (*(volatile u32*)counter < K) {
            if ((++spins & 255ull) == 0 && (gtimer() - t0 > timeout_ns || spins > (1ull << 31))) {
                atomicCAS(err, 0, 1);
                ok = 0;
                break;
            }
        }
        if (ok && p == 0) flags[0] = tag;
    }
    __syncthreads();
    if (!ok) return;
    const size_t slice = (size_t)words_per_producer;
    uint4* base0 = dst + (size_t)p * slice;
    for (u32 b = 0; b < n_bursts; ++b) {
        u64 t_start = 0;
        if (threadIdx.x == 0) t_start = gtimer();
        __syncthreads();
        uint4* base = base0 + (size_t)(b % slots) * K * slice;
        for (u32 i = threadIdx.x; i < words_per_producer; i += blockDim.x) base[i] = pattern_word(p, b, i);
        __syncthreads();
        if (threadIdx.x == 0) {
            u64* r = rec + 2 * ((size_t)p * n_bursts + b);
            r[0] = t_start;
            r[1] = gtimer();
        }
    }
    if (fence_end) __threadfence_system(); else __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        fin[2 * p] = gtimer();
        fin[2 * p + 1] = 0;
        u32 done = atomicAdd(counter + 1, 1u);
        if (done == K - 1) {
            if (fence_end) __threadfence_system();
            flags[1] = tag;
            fin[2 * p + 1] = gtimer();
        }
    }
}
