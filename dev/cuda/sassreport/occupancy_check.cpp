// Theoretical occupancy on an H100 SXM by the CUDA toolkit's own calculator (cuda_occupancy.h, a
// host-only header), to cross-check dev/cuda/sass_report's computation. Reads lines
//   <key> <registers per thread> <threads per block> <static shared bytes> <dynamic shared bytes>
// (static without the 1 KiB the system reserves per block: the calculator adds
// reservedSharedMemPerBlock itself) and prints
//   <key> <active blocks per SM> <limiting factors: cudaOccLimitingFactor bits>
// or "<key> error <cudaOccError>" when the calculator refuses the input. Needs no GPU.
#include <cuda_occupancy.h>

#include <iostream>
#include <string>

int main() {
    cudaOccDeviceProp h100;  // H100 SXM5: compute capability 9.0, 132 SMs
    h100.computeMajor = 9;
    h100.computeMinor = 0;
    h100.maxThreadsPerBlock = 1024;
    h100.maxThreadsPerMultiprocessor = 2048;
    h100.regsPerBlock = 65536;
    h100.regsPerMultiprocessor = 65536;
    h100.warpSize = 32;
    h100.sharedMemPerBlock = 48 * 1024;
    h100.sharedMemPerMultiprocessor = 228 * 1024;
    h100.numSms = 132;
    h100.sharedMemPerBlockOptin = 227 * 1024;
    h100.reservedSharedMemPerBlock = 1024;
    cudaOccDeviceState state;  // default cache and carveout preference
    std::string key;
    int regs = 0, threads = 0;
    size_t static_smem = 0, dynamic_smem = 0;
    while (std::cin >> key >> regs >> threads >> static_smem >> dynamic_smem) {
        cudaOccFuncAttributes attr;
        attr.maxThreadsPerBlock = threads;
        attr.numRegs = regs;
        attr.sharedSizeBytes = static_smem;
        attr.partitionedGCConfig = PARTITIONED_GC_OFF;
        // the launchers raise cudaFuncAttributeMaxDynamicSharedMemorySize past 48 KiB (opt-in)
        attr.shmemLimitConfig =
            static_smem + dynamic_smem > 48 * 1024 ? FUNC_SHMEM_LIMIT_OPTIN : FUNC_SHMEM_LIMIT_DEFAULT;
        attr.maxDynamicSharedSizeBytes = dynamic_smem;
        attr.numBlockBarriers = 1;
        cudaOccResult result;
        const cudaOccError err =
            cudaOccMaxActiveBlocksPerMultiprocessor(&result, &h100, &attr, &state, threads, dynamic_smem);
        if (err != CUDA_OCC_SUCCESS) std::cout << key << " error " << (int)err << "\n";
        else std::cout << key << " " << result.activeBlocksPerMultiprocessor << " " << result.limitingFactors << "\n";
    }
    return 0;
}
