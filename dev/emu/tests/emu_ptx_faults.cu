// The emulated ldmatrix and cp.async (dev/emu/ldmatrix.h, dev/emu/cp_async.h) refuse what the PTX
// ISA leaves undefined, the emulated griddepcontrol (dev/emu/griddep.h) a programmatic grid whose
// threads do not all wait, and they show what a GPU would hide: small kernels run by test/test_emulation.py,
// which expects each broken one to end with the right "emulated device error" and each correct one
// to pass. Run emulated only (build/emu/self/emu_ptx_faults); nvcc compiles it too, for its kernels'
// static shared memory (dev/emu/static_smem_table.py), so the device code here must be CUDA. The
// instruction semantics themselves are checked on emulation and on a GPU by
// test/gpu/test_ldmatrix_cp_async.cu.
//   emu_ptx_faults MODE      MODE as listed in main(); exit 0 = the kernel ran and its result is right
// Two correct kernels look at what only the emulation can show: the destinations of pending copies
// hold the poison after each wait per the ISA (a GPU leaves such a read undefined), and .x1 ignores
// the addresses of lanes 8-31 (the ISA: only sm_75 and below need them valid).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include "llmc/cuda/common.cuh"
#include "llmc/cuda/ptx.cuh"

using llmc::cuda::launch_kernel;
namespace ptx = llmc::cuda;

namespace emu_ptx_faults {

// ---- correct kernels ----------------------------------------------------------------------------
// Per thread: group 0 and group 1 committed, a third copy not committed. status[t] counts the
// destinations that are not what the ISA says after each wait (poison 0xFF.. = still pending).
__global__ void group_states_kernel(int* status, const uint4* src) {
    __shared__ uint4 s[3 * 32];
    const int t = threadIdx.x;
    auto is = [&](int g, bool done) {
        const unsigned char* d = reinterpret_cast<const unsigned char*>(&s[g * 32 + t]);
        const unsigned char* want = reinterpret_cast<const unsigned char*>(&src[g * 32 + t]);
        bool poisoned = true, same = true;
        for (int i = 0; i < 16; i++) {
            poisoned = poisoned && d[i] == 0xFF;
            same = same && d[i] == want[i];
        }
        return done ? same : poisoned;
    };
    int wrong = 0;
    ptx::cp_async_16(&s[t], &src[t]);
    ptx::cp_async_commit_group();
    ptx::cp_async_16(&s[32 + t], &src[32 + t]);
    ptx::cp_async_commit_group();
    ptx::cp_async_16(&s[64 + t], &src[64 + t]);
    wrong += !is(0, false) + !is(1, false) + !is(2, false);  // nothing completes at issue
    ptx::cp_async_wait_group<1>();
    wrong += !is(0, true) + !is(1, false) + !is(2, false);  // the oldest group only
    ptx::cp_async_wait_group<0>();
    wrong += !is(0, true) + !is(1, true) + !is(2, false);  // every group; the uncommitted copy waits
    ptx::cp_async_wait_all();
    wrong += !is(0, true) + !is(1, true) + !is(2, true);
    status[t] = wrong;
}

// .x1 with lanes 8-31 pointing at misaligned global memory: only lanes 0-7 supply rows.
__global__ void ldmatrix_x1_unused_lanes_kernel(uint32_t* out, const char* junk) {
    __shared__ __align__(16) uint16_t m[64];
    for (int i = threadIdx.x; i < 64; i += 32) m[i] = (uint16_t)i;
    __syncthreads();
    const void* row = threadIdx.x < 8 ? static_cast<const void*>(m + 8 * threadIdx.x) : junk + 3;
    uint32_t r[1];
    ptx::ldmatrix_x1(r, row);
    out[threadIdx.x] = r[0];
}

// ---- broken kernels -----------------------------------------------------------------------------
__global__ void ldmatrix_misaligned_kernel(uint32_t* out) {
    __shared__ __align__(16) uint16_t m[72];
    for (int i = threadIdx.x; i < 72; i += 32) m[i] = 0;
    __syncthreads();
    uint32_t r[4];
    ptx::ldmatrix_x4(r, m + 8 * (threadIdx.x % 8) + (threadIdx.x == 3 ? 4 : 0));  // lane 3: 8 bytes off
    out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_global_kernel(uint32_t* out, const uint16_t* global_rows) {
    uint32_t r[2];
    ptx::ldmatrix_x2(r, global_rows + 8 * (threadIdx.x % 16));  // rows in global memory
    out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_mixed_kernel(uint32_t* out) {
    __shared__ __align__(16) uint16_t m[256];
    for (int i = threadIdx.x; i < 256; i += 32) m[i] = 0;
    __syncthreads();
    uint32_t r[4] = {0, 0, 0, 0};
    uint32_t(&r2)[2] = *reinterpret_cast<uint32_t(*)[2]>(r);
    if (threadIdx.x == 5) ptx::ldmatrix_x2(r2, m + 8 * threadIdx.x);  // lane 5 runs another .num
    else ptx::ldmatrix_x4(r, m + 8 * threadIdx.x);
    out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_partial_warp_kernel(uint32_t* out) {  // launched with 16 threads
    __shared__ __align__(16) uint16_t m[128];
    for (int i = threadIdx.x; i < 128; i += blockDim.x) m[i] = 0;
    __syncthreads();
    uint32_t r[1];
    ptx::ldmatrix_x1(r, m + 8 * (threadIdx.x % 8));
    out[threadIdx.x] = r[0];
}

// atom.global.add.u32 on an address the ISA does not allow: shared memory (mode 0) or a word
// that is not 4-byte aligned (mode 1).
__global__ void atom_fault_kernel(uint32_t* out, int mode) {
    __shared__ uint32_t word;
    if (mode == 0) out[0] = llmc::cuda::atom_add_global_u32(&word, 1u);
    else out[1] = llmc::cuda::atom_add_global_u32(reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(out) + 2), 1u);
}

// griddepcontrol (dev/emu/griddep.h): out[t] = t after the wait; skip >= 0: that thread returns
// before the wait (mode "griddep-one-thread-skips-wait"), -2: no thread waits.
__global__ void griddep_kernel(uint32_t* out, int skip) {
    if ((int)threadIdx.x == skip) return;
    if (skip != -2) ptx::griddep_begin();
    out[threadIdx.x] = threadIdx.x;
}

// cp.async misuse, one thread each (mode selects what goes wrong).
enum class CpFault {
    MisalignedDst,
    GlobalDst,
    SharedSrc,
    SrcSizeAbove16,
    PendingAtExit,
    UncommittedAtExit,
    SourceWritten,
    DestinationWritten,
    Overlap
};
__global__ void cp_async_fault_kernel(uint4* out, uint4* src, int mode) {
    __shared__ uint4 s[4];
    unsigned char* s_bytes = reinterpret_cast<unsigned char*>(s);
    switch ((CpFault)mode) {
        case CpFault::MisalignedDst: ptx::cp_async_16(s_bytes + 8, src); break;
        case CpFault::GlobalDst: ptx::cp_async_16(out, src); break;
        case CpFault::SharedSrc: ptx::cp_async_16(&s[0], &s[1]); break;
        case CpFault::SrcSizeAbove16: ptx::cp_async_16_zfill(&s[0], src, 17); break;
        case CpFault::PendingAtExit:
            ptx::cp_async_16(&s[0], src);
            ptx::cp_async_commit_group();
            return;  // never waited for
        case CpFault::UncommittedAtExit:
            ptx::cp_async_16(&s[0], src);
            ptx::cp_async_wait_group<0>();  // waits for committed groups only: this copy is in none
            return;
        case CpFault::SourceWritten:
            ptx::cp_async_16(&s[0], src);
            src[0].x += 1;  // the source changes before the copy completes
            ptx::cp_async_wait_all();
            break;
        case CpFault::DestinationWritten:
            ptx::cp_async_16(&s[0], src);
            s[0].x = 7;  // a store into the pending copy's destination
            ptx::cp_async_wait_all();
            break;
        case CpFault::Overlap:
            ptx::cp_async_16(&s[0], src);
            ptx::cp_async_16(&s[0], src + 1);  // the same destination, no order between the two
            ptx::cp_async_wait_all();
            break;
    }
    ptx::cp_async_wait_all();
    out[0] = s[0];
}

}  // namespace emu_ptx_faults

namespace {
using namespace emu_ptx_faults;

int group_states() {
    uint4 h[96];
    for (int i = 0; i < 96; i++) h[i] = make_uint4(i + 1, 2 * i + 1, 3 * i + 1, 4 * i + 1);
    uint4* src = nullptr;
    int* status = nullptr;
    CUDA_CHECK(cudaMalloc(&src, sizeof h));
    CUDA_CHECK(cudaMalloc(&status, 32 * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(src, h, sizeof h, cudaMemcpyHostToDevice));
    launch_kernel(group_states_kernel, 1, 32, 0, 0, status, src);
    CUDA_CHECK(cudaGetLastError());
    int st[32], wrong = 0;
    CUDA_CHECK(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
    for (int v : st) wrong += v;
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(status));
    std::printf("cp.async group states: %s (%d destinations not as the ISA says)\n", wrong ? "FAIL" : "OK", wrong);
    return wrong ? 1 : 0;
}

int x1_unused_lanes() {
    uint32_t* out = nullptr;
    char* junk = nullptr;
    CUDA_CHECK(cudaMalloc(&out, 32 * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc(&junk, 64));
    launch_kernel(ldmatrix_x1_unused_lanes_kernel, 1, 32, 0, 0, out, static_cast<const char*>(junk));
    CUDA_CHECK(cudaGetLastError());
    uint32_t h[32];
    CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(out));
    CUDA_CHECK(cudaFree(junk));
    int wrong = 0;
    for (int lane = 0; lane < 32; lane++) {  // element (r, c) of the matrix is 8r + c
        const uint32_t e = 8 * (lane / 4) + 2 * (lane % 4);
        wrong += h[lane] != (e | ((e + 1) << 16));
    }
    std::printf("ldmatrix .x1 with unused lane addresses: %s\n", wrong ? "FAIL" : "OK");
    return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    uint32_t* out = nullptr;
    uint4* src = nullptr;
    CUDA_CHECK(cudaMalloc(&out, 64 * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc(&src, 4 * sizeof(uint4)));
    CUDA_CHECK(cudaMemset(src, 1, 4 * sizeof(uint4)));
    uint4* out4 = reinterpret_cast<uint4*>(out);
    const char* cp_modes[] = {"cp-async-misaligned-dst", "cp-async-global-dst",          "cp-async-shared-src",
                              "cp-async-src-size-17",    "cp-async-pending-at-exit",     "cp-async-uncommitted-at-exit",
                              "cp-async-source-written", "cp-async-destination-written", "cp-async-overlap"};
    if (mode == "cp-async-group-states" || mode == "ldmatrix-x1-unused-lanes") {
        CUDA_CHECK(cudaFree(out));
        CUDA_CHECK(cudaFree(src));
        return mode == "cp-async-group-states" ? group_states() : x1_unused_lanes();
    }
    if (mode == "ldmatrix-misaligned") launch_kernel(ldmatrix_misaligned_kernel, 1, 32, 0, 0, out);
    else if (mode == "ldmatrix-global")
        launch_kernel(ldmatrix_global_kernel, 1, 32, 0, 0, out, reinterpret_cast<const uint16_t*>(src));
    else if (mode == "ldmatrix-mixed-qualifiers") launch_kernel(ldmatrix_mixed_kernel, 1, 32, 0, 0, out);
    else if (mode == "ldmatrix-partial-warp") launch_kernel(ldmatrix_partial_warp_kernel, 1, 16, 0, 0, out);
    else if (mode == "griddep-programmatic-with-wait") {
        // the wait in every thread, launched programmatic and plainly; without the wait, plainly
        launch_kernel(griddep_kernel, 1, 64, 0, llmc::cuda::LaunchStream(0, true), out, -1);
        launch_kernel(griddep_kernel, 1, 64, 0, 0, out, -1);
        launch_kernel(griddep_kernel, 1, 64, 0, 0, out, -2);
        CUDA_CHECK(cudaGetLastError());
        uint32_t h[64];
        CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        for (uint32_t t = 0; t < 64; t++)
            if (h[t] != t) return std::printf("griddep: out[%u] = %u\n", t, h[t]), 1;
        std::printf("griddep with the wait, and a plain launch without it: OK\n");
        return 0;
    } else if (mode == "griddep-programmatic-without-wait")
        launch_kernel(griddep_kernel, 1, 64, 0, llmc::cuda::LaunchStream(0, true), out, -2);
    else if (mode == "griddep-one-thread-skips-wait")
        launch_kernel(griddep_kernel, 1, 64, 0, llmc::cuda::LaunchStream(0, true), out, 37);
    else if (mode == "atom-shared") launch_kernel(atom_fault_kernel, 1, 1, 0, 0, out, 0);
    else if (mode == "atom-misaligned") launch_kernel(atom_fault_kernel, 1, 1, 0, 0, out, 1);
    else {
        int k = 0;
        while (k < (int)(sizeof cp_modes / sizeof *cp_modes) && mode != cp_modes[k]) k++;
        if (k == (int)(sizeof cp_modes / sizeof *cp_modes)) {
            std::fprintf(stderr,
                         "usage: emu_ptx_faults cp-async-group-states|ldmatrix-x1-unused-lanes|"
                         "ldmatrix-misaligned|ldmatrix-global|ldmatrix-mixed-qualifiers|ldmatrix-partial-warp|"
                         "atom-shared|atom-misaligned|griddep-programmatic-with-wait|griddep-programmatic-without-wait|"
                         "griddep-one-thread-skips-wait");
            for (const char* m : cp_modes) std::fprintf(stderr, "|%s", m);
            std::fprintf(stderr, "\n");
            return 2;
        }
        launch_kernel(cp_async_fault_kernel, 1, 1, 0, 0, out4, src, k);
    }
    CUDA_CHECK(cudaGetLastError());
    std::printf("%s: the broken kernel ran to the end unnoticed\n", mode.c_str());
    return 0;
}
