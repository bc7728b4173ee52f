// The peak dense bf16 tensor-core rate of a GPU by its name, for MFU (as llm.c looks it up). Host
// code only, so that host-only units (test/gpu/test_cuda_model.cu) need no device headers.
#pragma once
#include <string>

namespace llmc::cuda {

// Peak dense (no sparsity) bf16 tensor-core FLOP/s with fp32 accumulation, from the vendor's data
// sheets at boost clock (GH200 matches "H200": same rate; the NVL cards are rated lower, H200 NVL
// 1671 TFLOP/s with sparsity; GB200 5 PFLOP/s with sparsity per GPU); 0 for a device not in the
// table (MFU is then not reported). The first entry whose key is a substring of the device name
// wins, so specific names come first.
inline double bf16_peak_flops_for(const std::string& device_name) {
    struct Entry {
        const char* key;
        double tflops;
    };
    static const Entry table[] = {
        {"H100 PCIe", 756.0}, {"H100 NVL", 835.0}, {"H100", 989.4},    {"H800 PCIe", 756.0}, {"H800", 989.4},
        {"H200 NVL", 835.0},  {"H200", 989.4},     {"GB200", 2500.0},  {"B200", 2250.0},     {"A100", 312.0},
        {"A800", 312.0},      {"A10G", 70.0},      {"A10", 125.0},     {"L40S", 362.0},      {"L40", 181.0},
        {"L4", 121.0},        {"RTX 4090", 165.2}, {"RTX 3090", 71.0},
    };
    for (const Entry& e : table)
        if (device_name.find(e.key) != std::string::npos) return e.tflops * 1e12;
    return 0.0;
}

}  // namespace llmc::cuda
