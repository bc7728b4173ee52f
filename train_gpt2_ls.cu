// train_gpt2_ls: the binary. Thin on purpose: parse the flags (llmc/cli.h), pick the device
// (llmc/device.h), build the backend, run the training loop or --eval-only (llmc/train_loop.h).
// Any user error (flags, data, checkpoints) ends as one line "error: <message>" and exit code 1.
#include <cstdio>
#include <memory>
#include <string>

#include <omp.h>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

#include "llmc/cli.h"
#include "llmc/cpu/gpt2_cpu.h"
#include "llmc/device.h"
#include "llmc/error.h"
#include "llmc/train_loop.h"

// Number of CUDA devices (0 without a GPU, a driver, or when built by a host compiler).
static int cuda_device_count() {
#ifdef __CUDACC__
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return n;
#else
    return 0;
#endif
}

int main(int argc, char** argv) {
    llmc::TrainCli cli;
    const int rc = cli.parse(argc, argv);
    if (rc >= 0) return rc;
    const llmc::TrainConfig& cfg = cli.config();
    try {
        std::string notice;
        const llmc::Device device = llmc::resolve_device(cfg.device, cuda_device_count(), &notice);
        if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
        (void)device;  // only the CPU backend exists so far (the CUDA backend: issue 5)
        if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
        const std::string device_name = "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
        llmc::BackendFactory make_backend = [&cfg](const llmc::ModelConfig& m) -> std::unique_ptr<llmc::Backend> {
            return std::make_unique<llmc::CpuBackend>(m, cfg.seed);
        };
        return cfg.eval_only ? llmc::run_eval(cfg, make_backend, device_name)
                             : llmc::run_training(cfg, make_backend, device_name, cli.config_file_text());
    } catch (const llmc::InputError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
