// The most OpenMP threads either program runs, for --threads N and OMP_NUM_THREADS alike.
#pragma once

namespace llmc {

// The most CPUs a Linux kernel runs on (x86-64's NR_CPUS limit). A count above it is no machine's, and
// larger ones break libgomp: --threads 100000 crashed (SIGSEGV) and 30000 hung creating threads; in
// OMP_NUM_THREADS, above INT_MAX libgomp misreads it (3000000000 became -1294967296 threads and libgomp
// ran out of memory; above ULONG_MAX it warns and uses its default).
constexpr int kMaxThreads = 8192;

}  // namespace llmc
