// The OpenMP set-up of the two programs (llmc/app/threads.h): when they choose the wait policy,
// the thread count from --threads, OMP_NUM_THREADS and the affinity mask, the affinity count of a
// restricted thread, and the wait policy as the device line shows it (llmc/cpu/omp_wait.h).
#include <catch2/catch.hpp>

#include <sched.h>

#include <string>

#include "llmc/app/threads.h"
#include "llmc/cpu/omp_wait.h"

TEST_CASE("the programs choose the wait policy only when the environment chose none", "[threads]") {
    CHECK(llmc::program_chooses_wait_policy(nullptr, nullptr));
    CHECK_FALSE(llmc::program_chooses_wait_policy("ACTIVE", nullptr));
    CHECK_FALSE(llmc::program_chooses_wait_policy("passive", nullptr));
    CHECK_FALSE(llmc::program_chooses_wait_policy(nullptr, "300000"));
    CHECK_FALSE(llmc::program_chooses_wait_policy("", nullptr));  // set, even if empty: the user's
    CHECK(std::string(llmc::kDefaultWaitPolicy) == "PASSIVE");
}

TEST_CASE("thread count: --threads, else OMP_NUM_THREADS, else the affinity mask", "[threads]") {
    CHECK(llmc::thread_count_to_set(3, nullptr, 8) == 3);
    CHECK(llmc::thread_count_to_set(3, "5", 8) == 3);    // the flag wins over the environment
    CHECK(llmc::thread_count_to_set(0, "5", 8) == 0);    // 0: OpenMP keeps OMP_NUM_THREADS's count
    CHECK(llmc::thread_count_to_set(0, "4,2", 8) == 0);  // (a nested list, which OpenMP parses)
    CHECK(llmc::thread_count_to_set(0, "", 8) == 8);     // empty = unset
    CHECK(llmc::thread_count_to_set(0, nullptr, 8) == 8);
    CHECK(llmc::thread_count_to_set(0, nullptr, 1) == 1);
    CHECK(llmc::thread_count_to_set(0, nullptr, 0) == 1);  // an unreadable mask: one thread
}

TEST_CASE("affinity_cpu_count follows the thread's affinity mask", "[threads]") {
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
    const int all = CPU_COUNT(&saved);
    CHECK(llmc::affinity_cpu_count() == all);
    int first = 0;
    while (!CPU_ISSET(first, &saved)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);  // this thread only
    const int restricted = llmc::affinity_cpu_count();
    REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);
    CHECK(restricted == 1);
    CHECK(llmc::affinity_cpu_count() == all);
}

TEST_CASE("the wait policy in effect, as the device line shows it", "[threads]") {
    CHECK(llmc::wait_policy_description("PASSIVE", nullptr) == "OMP_WAIT_POLICY=PASSIVE");
    CHECK(llmc::wait_policy_description(nullptr, "10000") == "GOMP_SPINCOUNT=10000");
    CHECK(llmc::wait_policy_description("active", "5") == "OMP_WAIT_POLICY=active GOMP_SPINCOUNT=5");
    CHECK(llmc::wait_policy_description(nullptr, nullptr) == "libgomp's default spin-wait");
}
