// The OpenMP wait policy in effect, as the CPU backend's device line shows it ("cpu (2 threads,
// OMP_WAIT_POLICY=PASSIVE)", in the trainer's console header and config.json, and in generate_gpt2_ls's
// summary line). libgomp read these variables when it was loaded; the programs set them only before
// that (llmc/app/threads.h), so the environment at run time is what libgomp uses.
#pragma once
#include <cstdlib>
#include <string>

namespace llmc {

// "OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=10000" (both when both are set), or "libgomp's default
// spin-wait" when neither is set.
inline std::string wait_policy_description(const char* omp_wait_policy, const char* gomp_spincount) {
    std::string s;
    if (omp_wait_policy != nullptr) s = std::string("OMP_WAIT_POLICY=") + omp_wait_policy;
    if (gomp_spincount != nullptr) s += (s.empty() ? "" : " ") + std::string("GOMP_SPINCOUNT=") + gomp_spincount;
    return s.empty() ? "libgomp's default spin-wait" : s;
}
inline std::string wait_policy_description() {
    return wait_policy_description(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"));
}

}  // namespace llmc
