// The OpenMP threads of the two programs (train_gpt2_ls, generate_gpt2_ls): how many, and how an idle
// thread waits. Both are chosen so that a machine whose cores are shared with other work slows the
// programs down in proportion, not tenfold (docs/training.md, "Threads", has the measurements).
//
// Wait policy. libgomp's default lets a thread that waits at a barrier spin for about 300,000
// iterations (a few ms) before it sleeps. When another process holds one of the cores, every barrier
// then waits for a descheduled thread while the others burn their time slices spinning: a training
// step was 10x slower, generation 35x. The programs therefore run with OMP_WAIT_POLICY=PASSIVE (a
// waiting thread sleeps at once) unless the environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT, which
// are then used as given. libgomp reads both once, when it is loaded (before main), so main sets the
// variable and re-executes the program (same pid, same arguments): use_passive_wait_policy().
//
// Thread count. --threads N > 0 is used as given; --threads 0 (the default) takes OMP_NUM_THREADS when
// it is set, else the number of CPUs this process may run on (its sched_getaffinity mask: `taskset`,
// cgroups' cpusets, Slurm's binding), which is also libgomp's own default.
//
// Both variables are checked first (omp_environment_error): a value libgomp cannot read it ignores with
// a warning (printed again by the re-execution) and goes on with its default, all CPUs or its spin
// policy, while the device line reported the value as in effect. Such a value is refused instead.
#pragma once
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <omp.h>

#include "llmc/app/thread_limit.h"

namespace llmc {

// The most threads OMP_NUM_THREADS may ask for (llmc/app/thread_limit.h says why).
constexpr unsigned long kMaxOmpThreads = kMaxThreads;

// The error for OpenMP variables libgomp would ignore or misread (OpenMP 5.2, "Environment Variables";
// libgomp warns "Invalid value" and keeps its default): OMP_NUM_THREADS not a list of positive integers
// ("4", "4,2"; as libgomp reads them: white space around each and a '+' sign taken) or one of them above
// kMaxOmpThreads, unless `threads_given` (--threads N > 0: the variable is not used); OMP_WAIT_POLICY not
// ACTIVE or PASSIVE (any case, white space around); an empty value of either included. "" when both are
// unset or valid.
inline std::string omp_environment_error(const char* num_threads, const char* wait_policy, bool threads_given) {
    auto space = [](char c) { return std::isspace((unsigned char)c) != 0; };
    if (num_threads != nullptr && !threads_given) {
        bool ok = true, too_many = false;
        const char* c = num_threads;
        for (;;) {  // one number of the list, then a comma and the next
            while (space(*c)) c++;
            if (*c == '+') c++;
            bool digit = false;
            unsigned long value = 0;  // up to kMaxOmpThreads + 1: more is too many, however many digits
            for (; std::isdigit((unsigned char)*c); c++) {
                digit = true;
                value = std::min(value * 10 + (unsigned long)(*c - '0'), kMaxOmpThreads + 1);
            }
            while (space(*c)) c++;
            ok = ok && digit && value > 0;
            too_many = too_many || value > kMaxOmpThreads;
            if (!ok || *c != ',') break;
            c++;
        }
        if (!ok || *c != '\0')
            return std::string("OMP_NUM_THREADS='") + num_threads +
                   "' is not a thread count (a positive integer); set one, unset it (all the CPUs this process may "
                   "use), or give --threads N";
        if (too_many)
            return std::string("OMP_NUM_THREADS='") + num_threads + "' asks for more than " +
                   std::to_string(kMaxOmpThreads) + " threads, more than any machine's CPUs; set a count up to " +
                   "the CPUs this process may use, unset it (all of them), or give --threads N";
    }
    if (wait_policy != nullptr) {
        const std::string given = wait_policy;
        const size_t first = given.find_first_not_of(" \t\n\v\f\r");
        std::string v = first == std::string::npos
                            ? std::string()
                            : given.substr(first, given.find_last_not_of(" \t\n\v\f\r") - first + 1);
        for (char& c : v) c = (char)std::toupper((unsigned char)c);
        if (v != "ACTIVE" && v != "PASSIVE")
            return "OMP_WAIT_POLICY='" + given + "' is not ACTIVE or PASSIVE; set one of them, " +
                   "or unset it (the programs then wait PASSIVE, docs/training.md \"Threads\")";
    }
    return "";
}

// Whether argv gives --threads N with N > 0 (the flag's last occurrence wins, as CLI11 takes it).
inline bool threads_flag_given(char** argv) {
    const char* value = nullptr;
    for (int i = 1; argv[i] != nullptr; i++) {
        if (std::strcmp(argv[i], "--") == 0) break;
        if (std::strcmp(argv[i], "--threads") == 0 && argv[i + 1] != nullptr) value = argv[++i];
        else if (std::strncmp(argv[i], "--threads=", 10) == 0) value = argv[i] + 10;
    }
    return value != nullptr && std::atoi(value) > 0;
}

// The value the programs give OMP_WAIT_POLICY when the environment chose no wait policy.
constexpr const char* kDefaultWaitPolicy = "PASSIVE";

// Whether the programs choose the wait policy: neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set (an
// empty value counts as set: libgomp ignores it, and so do we, rather than overriding the user).
inline bool program_chooses_wait_policy(const char* omp_wait_policy, const char* gomp_spincount) {
    return omp_wait_policy == nullptr && gomp_spincount == nullptr;
}

// First thing in main, before anything starts a thread or MPI: when the environment chose no wait
// policy, set OMP_WAIT_POLICY=PASSIVE and re-execute this program so that libgomp reads it. Returns
// true only when no re-exec was needed, or when it failed (then the variable is removed again, so that
// the device line, llmc/cpu/omp_wait.h, reports libgomp's default, which is what is in effect); false
// after printing the one error line when omp_environment_error finds one (main then exits 1).
inline bool use_passive_wait_policy(char** argv) {
    const std::string error =
        omp_environment_error(std::getenv("OMP_NUM_THREADS"), std::getenv("OMP_WAIT_POLICY"), threads_flag_given(argv));
    if (!error.empty()) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return false;
    }
    if (!program_chooses_wait_policy(std::getenv("OMP_WAIT_POLICY"), std::getenv("GOMP_SPINCOUNT"))) return true;
    if (setenv("OMP_WAIT_POLICY", kDefaultWaitPolicy, 1) != 0) return true;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");
    return true;
}

// The thread count for --threads `flag` (>= 0): the flag when > 0; 0 (leave OpenMP's count, which
// OMP_NUM_THREADS sets) when OMP_NUM_THREADS is set and not empty; else `affinity_cpus` (>= 1).
inline int thread_count_to_set(int flag, const char* omp_num_threads, int affinity_cpus) {
    if (flag > 0) return flag;
    if (omp_num_threads != nullptr && omp_num_threads[0] != '\0') return 0;
    return affinity_cpus > 0 ? affinity_cpus : 1;
}

// The number of CPUs in this process's affinity mask (1 when it cannot be read).
inline int affinity_cpu_count() {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 1;
    const int n = CPU_COUNT(&mask);
    return n > 0 ? n : 1;
}

// Sets OpenMP's thread count for --threads `flag` (thread_count_to_set with this process's environment
// and affinity).
inline void set_thread_count(int flag) {
    const int n = thread_count_to_set(flag, std::getenv("OMP_NUM_THREADS"), affinity_cpu_count());
    if (n > 0) omp_set_num_threads(n);
}

}  // namespace llmc
