// xstage remote-store microbenchmark (the X-Stage paper, Sec. 3.1). Compiled by NVRTC through
// CuPy's RawModule for sm_90; launched from hw/microbench.py, which also documents the protocol.
//
// One CTA = one producer. Each producer writes B bytes per burst as 16-byte stores (uint4, i.e.
// st.global.v4.u32) into its own slice of the target buffer, then runs a producer-side gap. The
// buffer holds `slots` copies of the K slices; burst b writes copy b % slots. Every 16-byte word
// encodes (producer, burst, word offset, hash), so a lost or misplaced store is caught afterwards
// by `verify_pattern`. `burst_kernel_multi` is the same producer loop with one destination per
// producer (the all-to-all peer pattern): producer p writes row row_of[p] of the region at
// dst_table[dst_of[p]] (one disjoint region per sender in every peer's buffer) and tags its words
// with tag_base | p (tag_base = rank << 16), checked by `verify_rows`.
//
// Per burst, thread 0 of the CTA records (all u64):
//   [0] %globaltimer before the first store           (burst start)
//   [1] %globaltimer after the CTA's stores were issued and a __syncthreads, with NO fence:
//       sender-visible issue end = the stores were accepted, not completed
//   [2] clock64 at [0]           [3] clock64 at [1]
//   [4] %globaltimer after __threadfence_system + __syncthreads (isolated mode only, else 0):
//       the CTA's stores are performed system-wide. In the end-fence kernels (`*_end_fence`, not in
//       isolated mode, zero gap only) the last burst alone records it, after the burst loop (its gap
//       is zero): the time the CTA's last store drained (a lockstep run's drained time, issue 15 item
//       4); every other burst keeps 0. The end fence is a template argument used after the loop, not a
//       run-time flag inside it: the kernels without it compile to the code they had before it existed,
//       and the loop of the kernels with it is the same source (a run-time flag inside the loop read free
//       running issue spans 2-3 timer ticks longer: docs/calibration/microbench-build.md).
//   [5] %globaltimer at the end of the gap
// Every spin is bounded (time and iterations); on a bound the kernel sets err[0] and returns.

#include "xstage_sync.cuh"

#define NREC 6
#define NO_PRODUCER 0xFFFFFFFFu   // a region row no producer writes (stays zero)

__device__ __forceinline__ uint4 pattern_word(u32 p, u32 b, u32 i) {
    u32 h = 0x9E3779B9u ^ (p * 0x85EBCA6Bu) ^ (b * 0xC2B2AE35u) ^ (i * 0x27D4EB2Fu);
    return make_uint4(p, b, i, h);
}

// gap_kind: 0 = spin on %globaltimer for gap_param ns; 1 = spin on clock64 for gap_param cycles;
//           2 = gap_param iterations of 4 independent FMA chains per thread (useful work).
// mode: 0 = free-running periodic (producers run independently after one common start),
//       1 = isolated (fence + grid barrier + settle after every burst: every burst starts with the
//           remote path drained),
//       2 = lockstep periodic (a grid barrier before every burst: the K producers start each burst
//           together, as the model's aggregate burst V = K * B assumes). NOTE: grid_barrier's thread 0
//           runs __threadfence() before arriving; on the host path that waits for its own earlier
//           stores, so on the H200 a lockstep burst started only after the previous one had drained
//           (zero-gap period = V/R with T_iss = T_iss0 for small V): the measured gap includes that wait.
//       3 = aligned periodic: the same per-burst barrier without any fence (atomics only), so the
//           bursts are aligned but requests left by the previous burst can still be in flight.
//
// One producer's bursts: burst b writes base0 + (b % slots) * slot_stride_words, words tagged `tag`.
// Every early return (error flag set) ends the producer; the kernel then returns.
template <bool kEndFence>
__device__ __forceinline__ void run_bursts(uint4* __restrict__ base0, size_t slot_stride_words, u32 tag,
                                           u32 words_per_producer, u32 slots, u32 n_bursts, u32 mode, u32 gap_kind,
                                           u64 gap_param, u64 settle_ns, u64 timeout_ns, u32* barrier_counter,
                                           u64* __restrict__ rec, u32* __restrict__ sm_of, float* __restrict__ sink,
                                           int* err) {
    const u32 p = blockIdx.x;
    const u32 K = gridDim.x;
    u32 barriers = 0;
    if (threadIdx.x == 0) sm_of[p] = sm_id();
    // Common start: every producer begins its first burst together.
    if (!grid_barrier(barrier_counter, K * ++barriers, timeout_ns, err)) return;
    float a0 = 1.0f + threadIdx.x * 1e-6f, a1 = a0 + 1e-3f, a2 = a0 + 2e-3f, a3 = a0 + 3e-3f;

    for (u32 b = 0; b < n_bursts; ++b) {
        if (mode >= 2 && b > 0 && !grid_barrier(barrier_counter, K * ++barriers, timeout_ns, err, mode == 2)) return;
        u64* r = rec + ((size_t)p * n_bursts + b) * NREC;
        u64 t_start = 0, c_start = 0;
        if (threadIdx.x == 0) { t_start = gtimer(); c_start = clock64(); }
        __syncthreads();
        uint4* base = base0 + (size_t)(b % slots) * slot_stride_words;
        for (u32 i = threadIdx.x; i < words_per_producer; i += blockDim.x) base[i] = pattern_word(tag, b, i);
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 c_end = clock64();
            u64 t_end = gtimer();
            r[0] = t_start; r[1] = t_end; r[2] = c_start; r[3] = c_end; r[4] = 0;
        }
        if (mode == 1) {
            __threadfence_system();  // each thread's own stores are performed system-wide
            __syncthreads();
            if (threadIdx.x == 0) r[4] = gtimer();
            if (!grid_barrier(barrier_counter, K * ++barriers, timeout_ns, err)) return;
            if (settle_ns > 0 && !spin_until(gtimer() + settle_ns, err)) return;
        }
        if (gap_kind == 0) {
            if (gap_param > 0 && !spin_until(gtimer() + gap_param, err)) return;
        } else if (gap_kind == 1) {
            if (threadIdx.x == 0) {
                u64 c0 = clock64();
                while ((u64)(clock64() - c0) < gap_param) { }
            }
            __syncthreads();
        } else {
            for (u64 k = 0; k < gap_param; ++k) {
                a0 = __fmaf_rn(a0, 1.0000001f, 1e-7f);
                a1 = __fmaf_rn(a1, 0.9999999f, 1e-7f);
                a2 = __fmaf_rn(a2, 1.0000002f, -1e-7f);
                a3 = __fmaf_rn(a3, 0.9999998f, 2e-7f);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) r[5] = gtimer();
    }
    if (kEndFence && mode != 1) {    // after the loop, so the bursts run the code of the build without it
        __threadfence_system();      // the last burst (zero gap): every thread's stores performed system-wide
        __syncthreads();
        if (threadIdx.x == 0) rec[((size_t)p * n_bursts + n_bursts - 1) * NREC + 4] = gtimer();
    }
    if (a0 + a1 + a2 + a3 == -1.0f) sink[p] = a0;  // keeps the FMA gap alive
}

template <bool kEndFence>
__device__ __forceinline__ void burst_body(uint4* __restrict__ dst, u32 words_per_producer, u32 slots, u32 n_bursts,
                                           u32 mode, u32 gap_kind, u64 gap_param, u64 settle_ns, u64 timeout_ns,
                                           u32* barrier_counter, u64* __restrict__ rec, u32* __restrict__ sm_of,
                                           float* __restrict__ sink, int* err) {
    const u32 p = blockIdx.x;
    run_bursts<kEndFence>(dst + (size_t)p * words_per_producer, (size_t)gridDim.x * words_per_producer, p,
                          words_per_producer, slots, n_bursts, mode, gap_kind, gap_param, settle_ns, timeout_ns,
                          barrier_counter, rec, sm_of, sink, err);
}

#define BURST_PARAMS uint4* __restrict__ dst, u32 words_per_producer, u32 slots, u32 n_bursts, u32 mode, \
    u32 gap_kind, u64 gap_param, u64 settle_ns, u64 timeout_ns, u32* barrier_counter, u64* __restrict__ rec, \
    u32* __restrict__ sm_of, float* __restrict__ sink, int* err
#define BURST_ARGS dst, words_per_producer, slots, n_bursts, mode, gap_kind, gap_param, settle_ns, timeout_ns, \
    barrier_counter, rec, sm_of, sink, err

extern "C" __global__ void __launch_bounds__(1024) burst_kernel(BURST_PARAMS) {
    extern __shared__ uint4 occupancy_pad[];  // dynamic smem: forces one CTA per SM
    burst_body<false>(BURST_ARGS);
}

extern "C" __global__ void __launch_bounds__(1024) burst_kernel_end_fence(BURST_PARAMS) {
    extern __shared__ uint4 occupancy_pad[];
    burst_body<true>(BURST_ARGS);
}

// The all-to-all peer pattern: producer p stores into the region dst_table[dst_of[p]] (this sender's
// region of that peer's buffer), row row_of[p] of `rows` per copy; its words carry tag_base | p.
template <bool kEndFence>
__device__ __forceinline__ void burst_multi_body(const u64* __restrict__ dst_table, const u32* __restrict__ dst_of,
                                                 const u32* __restrict__ row_of, u32 rows, u32 tag_base,
                                                 u32 words_per_producer, u32 slots, u32 n_bursts, u32 mode,
                                                 u32 gap_kind, u64 gap_param, u64 settle_ns, u64 timeout_ns,
                                                 u32* barrier_counter, u64* __restrict__ rec,
                                                 u32* __restrict__ sm_of, float* __restrict__ sink, int* err) {
    const u32 p = blockIdx.x;
    uint4* region = reinterpret_cast<uint4*>(dst_table[dst_of[p]]);
    run_bursts<kEndFence>(region + (size_t)row_of[p] * words_per_producer, (size_t)rows * words_per_producer,
                          tag_base | p, words_per_producer, slots, n_bursts, mode, gap_kind, gap_param, settle_ns,
                          timeout_ns, barrier_counter, rec, sm_of, sink, err);
}

#define BURST_MULTI_PARAMS const u64* __restrict__ dst_table, const u32* __restrict__ dst_of, \
    const u32* __restrict__ row_of, u32 rows, u32 tag_base, u32 words_per_producer, u32 slots, u32 n_bursts, \
    u32 mode, u32 gap_kind, u64 gap_param, u64 settle_ns, u64 timeout_ns, u32* barrier_counter, \
    u64* __restrict__ rec, u32* __restrict__ sm_of, float* __restrict__ sink, int* err
#define BURST_MULTI_ARGS dst_table, dst_of, row_of, rows, tag_base, words_per_producer, slots, n_bursts, mode, \
    gap_kind, gap_param, settle_ns, timeout_ns, barrier_counter, rec, sm_of, sink, err

extern "C" __global__ void __launch_bounds__(1024) burst_kernel_multi(BURST_MULTI_PARAMS) {
    extern __shared__ uint4 occupancy_pad[];  // dynamic smem: forces one CTA per SM
    burst_multi_body<false>(BURST_MULTI_ARGS);
}

extern "C" __global__ void __launch_bounds__(1024) burst_kernel_multi_end_fence(BURST_MULTI_PARAMS) {
    extern __shared__ uint4 occupancy_pad[];
    burst_multi_body<true>(BURST_MULTI_ARGS);
}

// Zero `n_words` 16-byte words (the host calls it before every run).
extern "C" __global__ void fill_zero(uint4* dst, u64 n_words) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n_words; i += (u64)gridDim.x * blockDim.x)
        dst[i] = make_uint4(0u, 0u, 0u, 0u);
}

// Check a whole region laid out as [slot][row][offset]: word (slot s, row j, offset i) must hold the
// pattern of the producer tagged tags[j] (j itself when tags is null) in the last burst that wrote
// slot s, or zeros if no burst did or no producer writes row j (NO_PRODUCER). out[0] = number of bad
// words, out[1] = smallest bad word index (initialised to ~0 by the host).
__device__ __forceinline__ void verify_region(const uint4* dst, u32 words_per_producer, u32 rows, u32 slots,
                                              u32 n_bursts, const u32* tags, u64* out) {
    const u64 per_slot = (u64)rows * words_per_producer;
    const u64 total = per_slot * slots;
    for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < total; g += (u64)gridDim.x * blockDim.x) {
        u32 s = (u32)(g / per_slot);
        u64 rem = g - (u64)s * per_slot;
        u32 j = (u32)(rem / words_per_producer);
        u32 i = (u32)(rem - (u64)j * words_per_producer);
        u32 tag = tags ? tags[j] : j;
        uint4 want = make_uint4(0u, 0u, 0u, 0u);
        if (s < n_bursts && tag != NO_PRODUCER) want = pattern_word(tag, s + ((n_bursts - 1 - s) / slots) * slots, i);
        uint4 got = dst[g];
        if (got.x != want.x || got.y != want.y || got.z != want.z || got.w != want.w) {
            atomicAdd(&out[0], 1ull);
            atomicMin(&out[1], (u64)g);
        }
    }
}

// The single-destination layout: row = producer.
extern "C" __global__ void verify_pattern(const uint4* dst, u32 words_per_producer, u32 K, u32 slots,
                                          u32 n_bursts, u64* out) {
    verify_region(dst, words_per_producer, K, slots, n_bursts, nullptr, out);
}

// One destination region of the all-to-all pattern: row j holds the producer tagged tags[j].
extern "C" __global__ void verify_rows(const uint4* dst, const u32* tags, u32 words_per_producer, u32 rows, u32 slots,
                                       u32 n_bursts, u64* out) {
    verify_region(dst, words_per_producer, rows, slots, n_bursts, tags, out);
}

// Flip `mask` in one 32-bit word (the self-test corrupts a stored word on purpose to show the
// device check catches it; works through a peer mapping too).
extern "C" __global__ void flip_bits(u32* word, u32 mask) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *word ^= mask;
}

// %globaltimer tick: thread 0 reads %globaltimer (and clock64) n times in a tight loop; then spins
// span_ns of %globaltimer and writes (globaltimer, clock64) at both ends, for the SM clock rate.
extern "C" __global__ void timer_probe(u64* gt, u64* ck, u32 n, u64 span_ns, u64* span, int* err) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (u32 k = 0; k < n; ++k) { gt[k] = gtimer(); ck[k] = clock64(); }
    u64 t0 = gtimer(), c0 = clock64(), t1 = t0, spins = 0;
    while ((t1 = gtimer()) - t0 < span_ns) {
        if (++spins > MAX_SPINS) { atomicCAS(err, 0, ERR_SPIN_BOUND); break; }
    }
    u64 c1 = clock64();
    span[0] = t0; span[1] = t1; span[2] = c0; span[3] = c1;
}
