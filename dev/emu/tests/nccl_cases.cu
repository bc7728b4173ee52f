// The emulated NCCL (dev/emu/nccl.cpp) against NCCL's documented definitions, checked here
// from those definitions alone (the API reference and the user guide's "Collective Operations" and
// "In-place Operations"), element by element:
//   ncclAllReduce      every rank's recvbuff[i] = op over ranks of sendbuff_r[i]   (in place: send == recv)
//   ncclReduceScatter  rank r's recvbuff[i] = op over ranks of sendbuff_q[r*recvcount + i]
//                      (in place: recvbuff == sendbuff + r*recvcount)
//   ncclAllGather      recvbuff[q*sendcount + i] = sendbuff_q[i]  (in place: sendbuff == recvbuff + r*sendcount)
//   ncclBroadcast      recvbuff[i] = root's sendbuff[i]; sendbuff ignored elsewhere (in place: send == recv)
// Ops sum, prod, max, min, avg; types float, double, int32, int64, bf16, uint8 (and half for the
// copies); counts 1, 7 and 1001 (many chunks: the tests shrink the per-rank slot with
// LLMC_EMU_NCCL_SLOT_BYTES) plus one case above the default slot; worlds of 1-4 ranks as threads of
// this process, a world driven by one thread through ncclGroupStart/End, and worlds of 2 and 4
// ranks as processes (this program started again with --rank). Inputs are small integers, so every
// documented result is exact in every type and order (avg: the ranks' values differ by offsets that
// sum to zero); one float avg with arbitrary inputs is compared with a tolerance and, in the thread
// worlds, must have the same bits on every rank ("identical copies"). Out of place, sendbuff must
// come back unchanged. No communicator file may be left in /dev/shm or /tmp afterwards.
// Errors: nranks disagreeing, rank >= nranks, a rank used twice, two ranks on one device (NCCL's
// "duplicate GPU", ncclInvalidUsage), a rank that never arrives (bounded by LLMC_EMU_NCCL_TIMEOUT_S,
// not a hang), a peer process that exits or aborts, host pointers, a buffer too small, unsupported
// types and ops, overlaps outside the in-place forms, collectives that differ between ranks.
// The rank threads launch no kernels (docs/emulation.md says why).
//   nccl_cases [--only api|threads|group|large|errors|processes|process-errors]   exit 0 = all passed
// Waits are limited to LLMC_EMU_NCCL_TIMEOUT_S seconds (default here 20) outside the error cases.
#include <dirent.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

extern char** environ;

namespace {

using Bytes = std::vector<unsigned char>;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- pass / fail ---------------------------------------------------------------------------------
std::mutex report_mu;
int n_checks = 0, n_failed = 0;
bool check(bool ok, const std::string& what) {
    std::lock_guard<std::mutex> lock(report_mu);
    n_checks++;
    if (!ok && ++n_failed <= 40) std::printf("FAIL %s\n", what.c_str());
    if (!ok && n_failed == 41) std::printf("(further failures not printed)\n");
    std::fflush(stdout);
    return ok;
}
std::string res(ncclResult_t r) { return std::to_string((int)r) + " (" + ncclGetErrorString(r) + ")"; }

// ---- element types -------------------------------------------------------------------------------
struct Type {
    ncclDataType_t t;
    size_t size;
    const char* name;
    bool is_unsigned;
};
const Type kF32{ncclFloat, 4, "float", false}, kF64{ncclDouble, 8, "double", false}, kI32{ncclInt32, 4, "int32", false},
    kI64{ncclInt64, 8, "int64", false}, kBF16{ncclBfloat16, 2, "bf16", false}, kU8{ncclUint8, 1, "uint8", true},
    kF16{ncclFloat16, 2, "half", false};
const Type kReductionTypes[] = {kF32, kF64, kI32, kI64, kBF16, kU8};
const Type kCopyTypes[] = {kF32, kBF16, kI64, kU8, kF16};

// v is a small integer (or, for float, any float value): exact in every type used here.
void encode(const Type& t, double v, unsigned char* p) {
    switch (t.t) {
        case ncclFloat: {
            const float f = (float)v;
            std::memcpy(p, &f, 4);
            break;
        }
        case ncclDouble: std::memcpy(p, &v, 8); break;
        case ncclInt32: {
            const int32_t x = (int32_t)v;
            std::memcpy(p, &x, 4);
            break;
        }
        case ncclInt64: {
            const int64_t x = (int64_t)v;
            std::memcpy(p, &x, 8);
            break;
        }
        case ncclUint8: *p = (unsigned char)v; break;
        case ncclBfloat16: {  // bf16 is the upper half of a float; small integers lose nothing
            const float f = (float)v;
            uint32_t u;
            std::memcpy(&u, &f, 4);
            if (u & 0xFFFF) std::abort();
            const uint16_t h = (uint16_t)(u >> 16);
            std::memcpy(p, &h, 2);
            break;
        }
        default: std::abort();
    }
}
double decode(const Type& t, const unsigned char* p) {
    switch (t.t) {
        case ncclFloat: {
            float f;
            std::memcpy(&f, p, 4);
            return f;
        }
        case ncclDouble: {
            double d;
            std::memcpy(&d, p, 8);
            return d;
        }
        case ncclInt32: {
            int32_t x;
            std::memcpy(&x, p, 4);
            return x;
        }
        case ncclInt64: {
            int64_t x;
            std::memcpy(&x, p, 8);
            return (double)x;
        }
        case ncclUint8: return *p;
        case ncclBfloat16: {
            uint16_t h;
            std::memcpy(&h, p, 2);
            const uint32_t u = (uint32_t)h << 16;
            float f;
            std::memcpy(&f, &u, 4);
            return f;
        }
        default: std::abort();
    }
}

// ---- inputs --------------------------------------------------------------------------------------
uint64_t mix(uint64_t x) {  // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
// offsets per world size that sum to zero: avg of base + offset is base, exactly
const int kAvgOffsets[5][4] = {{0}, {0}, {1, -1}, {1, -1, 0}, {1, -1, 2, -2}};

// Element j of rank q's input for a reduction with `op` in a world of n ranks.
double value(int op, const Type& t, uint64_t seed, int q, size_t j, int n) {
    const uint64_t h = mix(seed * 1000003ull ^ ((uint64_t)q << 48) ^ j);
    if (op == ncclProd) return t.is_unsigned ? 1.0 + (h & 1) : ((h & 1) ? 1.0 : 2.0) * ((h & 2) ? -1.0 : 1.0);
    if (op == ncclAvg) {
        const uint64_t b = mix(seed ^ (j * 7919));
        return (t.is_unsigned ? 3.0 + (double)(b % 10) : (double)(b % 13) - 6.0) + kAvgOffsets[n][q];
    }
    return t.is_unsigned ? (double)(h % 17) : (double)(h % 17) - 8.0;
}
double fold(int op, double a, double b) {
    switch (op) {
        case ncclProd: return a * b;
        case ncclMax: return a > b ? a : b;
        case ncclMin: return a < b ? a : b;
        default: return a + b;
    }
}
// The documented result: op over ranks 0..n-1 of their element j (avg: the sum over n).
double reference(int op, const Type& t, uint64_t seed, size_t j, int n) {
    double acc = value(op, t, seed, 0, j, n);
    for (int q = 1; q < n; q++) acc = fold(op, acc, value(op, t, seed, q, j, n));
    return op == ncclAvg ? acc / n : acc;
}
Bytes input(int op, const Type& t, uint64_t seed, int q, size_t count, int n) {
    Bytes b(count * t.size);
    for (size_t j = 0; j < count; j++) encode(t, value(op, t, seed, q, j, n), &b[j * t.size]);
    return b;
}
// Arbitrary bytes (the copies move elements whatever they hold).
Bytes raw(uint64_t seed, int q, size_t bytes) {
    Bytes b(bytes);
    for (size_t i = 0; i < bytes; i++) b[i] = (unsigned char)mix(seed ^ ((uint64_t)q << 40) ^ i);
    return b;
}

// ---- emulated device memory ----------------------------------------------------------------------
struct DevBuf {
    unsigned char* p = nullptr;
    size_t bytes = 0;
    explicit DevBuf(size_t b) : bytes(b) {
        if (cudaMalloc(reinterpret_cast<void**>(&p), b) != cudaSuccess) std::abort();
        poison();
    }
    ~DevBuf() { cudaFree(p); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    void poison() { cudaMemset(p, 0xFF, bytes); }
    void put(const Bytes& b, size_t at = 0) { cudaMemcpy(p + at, b.data(), b.size(), cudaMemcpyHostToDevice); }
    Bytes get(size_t at = 0, size_t n = SIZE_MAX) const {
        Bytes b(n == SIZE_MAX ? bytes - at : n);
        cudaMemcpy(b.data(), p + at, b.size(), cudaMemcpyDeviceToHost);
        return b;
    }
};

struct Rank {
    ncclComm_t comm = nullptr;
    int n = 1, r = 0;
    std::string tag;  // "threads world 3 rank 1"
};

std::string describe(const Rank& R, const char* coll, const Type& t, int op, size_t count, bool in_place) {
    char b[256];
    std::snprintf(b, sizeof b, "%s: %s %s%s%s count %zu %s", R.tag.c_str(), coll, t.name, op >= 0 ? " " : "",
                  op == ncclSum    ? "sum"
                  : op == ncclProd ? "prod"
                  : op == ncclMax  ? "max"
                  : op == ncclMin  ? "min"
                  : op == ncclAvg  ? "avg"
                                   : "",
                  count, in_place ? "in place" : "out of place");
    return b;
}

// Compares reduction output element by element with the reference; elements [0, count) of the
// result correspond to reference elements first + i.
void expect_reduced(const std::string& what, const Type& t, int op, uint64_t seed, int n, const Bytes& got,
                    size_t count, size_t first) {
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < count; i++) {
        if (decode(t, &got[i * t.size]) != reference(op, t, seed, first + i, n)) {
            if (!bad) first_bad = i;
            bad++;
        }
    }
    char b[160] = "";
    if (bad)
        std::snprintf(b, sizeof b, " (%zu of %zu differ; element %zu: %g, expected %g)", bad, count, first_bad,
                      decode(t, &got[first_bad * t.size]), reference(op, t, seed, first + first_bad, n));
    check(!bad, what + b);
}

// ---- one case of each collective -----------------------------------------------------------------
void all_reduce_case(const Rank& R, const Type& t, int op, size_t count, bool in_place, uint64_t seed) {
    const std::string what = describe(R, "ncclAllReduce", t, op, count, in_place);
    const Bytes mine = input(op, t, seed, R.r, count, R.n);
    DevBuf send(mine.size());
    send.put(mine);
    DevBuf recv(in_place ? 0 : mine.size());
    unsigned char* out = in_place ? send.p : recv.p;
    const ncclResult_t e = ncclAllReduce(send.p, out, count, t.t, (ncclRedOp_t)op, R.comm, 0);
    if (!check(e == ncclSuccess, what + ": returned " + res(e))) return;
    expect_reduced(what, t, op, seed, R.n, in_place ? send.get() : recv.get(), count, 0);
    if (!in_place) check(send.get() == mine, what + ": sendbuff was modified");
}

void reduce_scatter_case(const Rank& R, const Type& t, int op, size_t count, bool in_place, uint64_t seed) {
    const std::string what = describe(R, "ncclReduceScatter", t, op, count, in_place);
    const Bytes mine = input(op, t, seed, R.r, count * R.n, R.n);
    DevBuf send(mine.size());
    send.put(mine);
    DevBuf recv(in_place ? 0 : count * t.size);
    unsigned char* out = in_place ? send.p + R.r * count * t.size : recv.p;
    const ncclResult_t e = ncclReduceScatter(send.p, out, count, t.t, (ncclRedOp_t)op, R.comm, 0);
    if (!check(e == ncclSuccess, what + ": returned " + res(e))) return;
    const Bytes got = in_place ? send.get(R.r * count * t.size, count * t.size) : recv.get();
    expect_reduced(what, t, op, seed, R.n, got, count, R.r * count);
    if (!in_place) check(send.get() == mine, what + ": sendbuff was modified");
}

void all_gather_case(const Rank& R, const Type& t, size_t count, bool in_place, uint64_t seed) {
    const std::string what = describe(R, "ncclAllGather", t, -1, count, in_place);
    const size_t bytes = count * t.size;
    const Bytes mine = raw(seed, R.r, bytes);
    DevBuf recv(bytes * R.n);
    DevBuf send(in_place ? 0 : bytes);
    const unsigned char* from = in_place ? recv.p + R.r * bytes : send.p;
    if (in_place) recv.put(mine, R.r * bytes);
    else send.put(mine);
    const ncclResult_t e = ncclAllGather(from, recv.p, count, t.t, R.comm, 0);
    if (!check(e == ncclSuccess, what + ": returned " + res(e))) return;
    const Bytes got = recv.get();
    int bad = -1;
    for (int q = 0; q < R.n && bad < 0; q++)
        if (Bytes(got.begin() + q * bytes, got.begin() + (q + 1) * bytes) != raw(seed, q, bytes)) bad = q;
    check(bad < 0, what + (bad < 0 ? "" : ": the block of rank " + std::to_string(bad) + " differs from its sendbuff"));
    if (!in_place) check(send.get() == mine, what + ": sendbuff was modified");
}

void broadcast_case(const Rank& R, const Type& t, size_t count, bool in_place, int root, uint64_t seed, bool legacy) {
    const std::string what =
        describe(R, legacy ? "ncclBcast" : "ncclBroadcast", t, -1, count, in_place) + " root " + std::to_string(root);
    const size_t bytes = count * t.size;
    const Bytes data = raw(seed, root, bytes);
    DevBuf recv(bytes);
    DevBuf send(in_place || R.r != root ? 0 : bytes);
    if (R.r == root) (in_place ? recv : send).put(data);
    // the documentation: sendbuff is only used on the root, so the other ranks may pass NULL
    const unsigned char* from = in_place ? recv.p : R.r == root ? send.p : nullptr;
    const ncclResult_t e = legacy ? ncclBcast(recv.p, count, t.t, root, R.comm, 0)
                                  : ncclBroadcast(from, recv.p, count, t.t, root, R.comm, 0);
    if (!check(e == ncclSuccess, what + ": returned " + res(e))) return;
    check(recv.get() == data, what + ": recvbuff is not the root's sendbuff");
    if (R.r == root && !in_place) check(send.get() == data, what + ": sendbuff was modified");
}

// A float average of arbitrary values: close to the exact average and the same bits on every rank.
Bytes inexact_average(const Rank& R, size_t count, uint64_t seed) {
    const std::string what = R.tag + ": ncclAllReduce float avg of arbitrary values";
    auto val = [&](int q, size_t j) {
        return (double)(float)((double)(mix(seed ^ ((uint64_t)q << 32) ^ j) >> 11) * 0x1p-53 * 2.0 - 1.0);
    };
    Bytes mine(count * 4);
    for (size_t j = 0; j < count; j++) encode(kF32, val(R.r, j), &mine[j * 4]);
    DevBuf buf(mine.size());
    buf.put(mine);
    const ncclResult_t e = ncclAllReduce(buf.p, buf.p, count, ncclFloat, ncclAvg, R.comm, 0);
    check(e == ncclSuccess, what + ": returned " + res(e));
    const Bytes got = buf.get();
    double worst = 0;
    for (size_t j = 0; j < count; j++) {
        double ref = 0;
        for (int q = 0; q < R.n; q++) ref += val(q, j);
        ref /= R.n;
        const double g = decode(kF32, &got[j * 4]);
        worst = std::isfinite(g) ? std::max(worst, std::fabs(g - ref)) : INFINITY;
    }
    check(worst <= 1e-6, what + ": largest error " + std::to_string(worst));
    return got;
}

// Every collective, op, type, count and placement in one world; returns the inexact average's bytes.
Bytes sweep(const Rank& R) {
    uint64_t seed = 1000 + R.n;  // the same sequence on every rank
    const size_t counts[] = {1, 7, 1001};
    for (size_t count : counts)
        for (const Type& t : kReductionTypes)
            for (int op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg})
                for (bool in_place : {false, true}) {
                    all_reduce_case(R, t, op, count, in_place, ++seed);
                    reduce_scatter_case(R, t, op, count, in_place, ++seed);
                }
    for (size_t count : counts)
        for (const Type& t : kCopyTypes)
            for (bool in_place : {false, true}) all_gather_case(R, t, count, in_place, ++seed);
    for (size_t count : counts)
        for (int root = 0; root < R.n; root++)
            for (bool in_place : {false, true})
                broadcast_case(R, count == 7 ? kU8 : kF32, count, in_place, root, ++seed, false);
    broadcast_case(R, kI64, 5, true, R.n - 1, ++seed, true);
    // count 0: nothing to do, on every rank (buffers may be NULL)
    const ncclResult_t e = ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, R.comm, 0);
    check(e == ncclSuccess, R.tag + ": ncclAllReduce of count 0 returned " + res(e));
    return inexact_average(R, 1001, ++seed);
}

// ---- worlds --------------------------------------------------------------------------------------
void set_env(const char* name, const std::string& v) {
    if (v.empty()) unsetenv(name);
    else setenv(name, v.c_str(), 1);
}
// The wait limit outside the cases that set their own: a rank that fails its arguments leaves the
// others waiting, as on a GPU, so a broken emulation must not cost the default 300 s per wait.
std::string default_timeout = "20";

bool new_id(ncclUniqueId* id, const std::string& slot_bytes) {
    set_env("LLMC_EMU_NCCL_SLOT_BYTES", slot_bytes);
    const ncclResult_t e = ncclGetUniqueId(id);
    return check(e == ncclSuccess, "ncclGetUniqueId returned " + res(e));
}

// Joins rank r (device r, as a trainer would pick) and checks what the communicator reports.
bool join(Rank& R, const ncclUniqueId& id) {
    cudaSetDevice(R.r);
    const ncclResult_t e = ncclCommInitRank(&R.comm, R.n, id, R.r);
    if (!check(e == ncclSuccess, R.tag + ": ncclCommInitRank returned " + res(e))) return false;
    int count = -1, rank = -1, dev = -1;
    check(ncclCommCount(R.comm, &count) == ncclSuccess && count == R.n, R.tag + ": ncclCommCount");
    check(ncclCommUserRank(R.comm, &rank) == ncclSuccess && rank == R.r, R.tag + ": ncclCommUserRank");
    check(ncclCommCuDevice(R.comm, &dev) == ncclSuccess && dev == R.r, R.tag + ": ncclCommCuDevice");
    return true;
}

// Runs body on n threads, one rank each, all joined to one new id.
void threads_world(int n, const std::string& slot_bytes, const std::string& label,
                   const std::function<void(Rank&)>& body) {
    ncclUniqueId id;
    if (!new_id(&id, slot_bytes)) return;
    std::vector<std::thread> ts;
    for (int r = 0; r < n; r++)
        ts.emplace_back([&, r] {
            Rank R;
            R.n = n;
            R.r = r;
            R.tag = label + " world " + std::to_string(n) + " rank " + std::to_string(r);
            if (!join(R, id)) return;
            body(R);
            const ncclResult_t e = ncclCommDestroy(R.comm);
            check(e == ncclSuccess, R.tag + ": ncclCommDestroy returned " + res(e));
        });
    for (auto& t : ts) t.join();
}

void thread_worlds() {
    for (int n = 1; n <= 4; n++) {
        const auto t0 = Clock::now();
        std::vector<Bytes> avg(n);
        threads_world(n, "512", "threads", [&](Rank& R) { avg[R.r] = sweep(R); });
        for (int r = 1; r < n; r++)
            check(avg[r] == avg[0], "threads world " + std::to_string(n) + ": rank " + std::to_string(r) +
                                        "'s float average differs in its bits from rank 0's");
        std::printf("threads world %d: done in %.2f s\n", n, seconds_since(t0));
    }
}

// One host thread drives every rank of a world, through group calls (the documented way).
void group_world() {
    const int n = 3;
    ncclUniqueId id;
    if (!new_id(&id, "1024")) return;
    ncclComm_t comms[n] = {};
    check(ncclGroupStart() == ncclSuccess, "group: ncclGroupStart");
    for (int r = 0; r < n; r++) {
        cudaSetDevice(r);
        const ncclResult_t e = ncclCommInitRank(&comms[r], n, id, r);
        check(e == ncclSuccess, "group: ncclCommInitRank of rank " + std::to_string(r) + " returned " + res(e));
    }
    ncclResult_t e = ncclGroupEnd();
    if (!check(e == ncclSuccess, "group: ncclGroupEnd after the ranks' ncclCommInitRank returned " + res(e))) return;
    for (int r = 0; r < n; r++) {
        int dev = -1;
        check(ncclCommCuDevice(comms[r], &dev) == ncclSuccess && dev == r,
              "group: ncclCommCuDevice of rank " + std::to_string(r));
    }
    const size_t count = 1001;
    const uint64_t seed = 77;
    std::vector<DevBuf*> bufs;
    check(ncclGroupStart() == ncclSuccess, "group: ncclGroupStart");
    check(ncclGroupStart() == ncclSuccess, "group: nested ncclGroupStart");
    for (int r = 0; r < n; r++) {
        bufs.push_back(new DevBuf(count * 4));
        bufs[r]->put(input(ncclMax, kF32, seed, r, count, n));
        e = ncclAllReduce(bufs[r]->p, bufs[r]->p, count, ncclFloat, ncclMax, comms[r], 0);
        check(e == ncclSuccess, "group: queued ncclAllReduce of rank " + std::to_string(r) + " returned " + res(e));
    }
    check(ncclGroupEnd() == ncclSuccess, "group: inner ncclGroupEnd");
    e = ncclGroupEnd();
    check(e == ncclSuccess, "group: ncclGroupEnd running the all-reduces returned " + res(e));
    for (int r = 0; r < n; r++) {
        expect_reduced("group: ncclAllReduce float max of rank " + std::to_string(r), kF32, ncclMax, seed, n,
                       bufs[r]->get(), count, 0);
        delete bufs[r];
        check(ncclCommDestroy(comms[r]) == ncclSuccess, "group: ncclCommDestroy");
    }
    check(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart is ncclInvalidUsage");
}

// Counts above one default-size slot (1 MiB per rank): several chunks at the real chunk size.
void large_world() {
    threads_world(2, "", "large", [](Rank& R) {
        all_reduce_case(R, kF32, ncclSum, (1 << 18) + 5, false, 91);
        reduce_scatter_case(R, kF32, ncclSum, (1 << 17) + 3, true, 92);
        all_gather_case(R, kBF16, (1 << 19) + 1, true, 93);
    });
}

// ---- errors --------------------------------------------------------------------------------------
bool last_error_has(const std::string& text) {
    return std::string(ncclGetLastError(nullptr)).find(text) != std::string::npos;
}

void api_checks() {
    int v = 0;
    check(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "ncclGetVersion gives NCCL_VERSION_CODE");
    for (int r = ncclSuccess; r <= ncclInProgress; r++)
        check(ncclGetErrorString((ncclResult_t)r) && *ncclGetErrorString((ncclResult_t)r),
              "ncclGetErrorString(" + std::to_string(r) + ")");
    int devices = 0;
    check(cudaGetDeviceCount(&devices) == cudaSuccess && devices == 4, "LLMC_EMU_DEVICE_COUNT=4 gives 4 devices");
    check(cudaSetDevice(3) == cudaSuccess, "cudaSetDevice(3)");
    int d = -1;
    check(cudaGetDevice(&d) == cudaSuccess && d == 3, "cudaGetDevice after cudaSetDevice(3)");
    std::thread([] {
        int d2 = -1;
        check(cudaGetDevice(&d2) == cudaSuccess && d2 == 0, "the current device is per host thread (0 in a new one)");
    }).join();
    {
        DevBuf b(16);
        cudaPointerAttributes a;
        check(cudaPointerGetAttributes(&a, b.p) == cudaSuccess && a.type == cudaMemoryTypeDevice && a.device == 3,
              "memory allocated while device 3 is current is on device 3");
    }
    check(cudaSetDevice(4) == cudaErrorInvalidDevice, "cudaSetDevice(4) of 4 devices is cudaErrorInvalidDevice");
    (void)cudaGetLastError();
    cudaSetDevice(0);
}

// Runs f on n threads (rank r = thread r) and returns each result and its run time.
struct Outcome {
    ncclResult_t r = ncclSuccess;
    double s = 0;
    std::string msg;
};
std::vector<Outcome> on_threads(int n, const std::function<ncclResult_t(int)>& f) {
    std::vector<Outcome> out(n);
    std::vector<std::thread> ts;
    for (int r = 0; r < n; r++)
        ts.emplace_back([&, r] {
            const auto t0 = Clock::now();
            out[r].r = f(r);
            out[r].s = seconds_since(t0);
            out[r].msg = ncclGetLastError(nullptr);
        });
    for (auto& t : ts) t.join();
    return out;
}

void error_cases() {
    ncclUniqueId id;
    ncclComm_t c = nullptr;
    set_env("LLMC_EMU_NCCL_TIMEOUT_S", "1");
    // arguments refused before any rank waits
    new_id(&id, "");
    check(ncclCommInitRank(&c, 2, id, 2) == ncclInvalidArgument, "rank == nranks is ncclInvalidArgument");
    check(ncclCommInitRank(&c, 2, id, -1) == ncclInvalidArgument, "rank -1 is ncclInvalidArgument");
    check(ncclCommInitRank(&c, 0, id, 0) == ncclInvalidArgument, "nranks 0 is ncclInvalidArgument");
    ncclUniqueId zero;
    std::memset(&zero, 0, sizeof zero);
    check(ncclCommInitRank(&c, 1, zero, 0) == ncclInvalidArgument,
          "an id not from ncclGetUniqueId is ncclInvalidArgument");
    {  // the id above is still good: a world of 1 on it
        Rank R;
        R.tag = "errors world 1";
        if (join(R, id)) {
            DevBuf d(64 * 4), small(63 * 4);
            std::vector<float> host(64);
            ncclResult_t e = ncclAllReduce(host.data(), d.p, 64, ncclFloat, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("sendbuff"),
                  "host sendbuff is ncclInvalidArgument naming sendbuff");
            e = ncclAllReduce(d.p, host.data(), 64, ncclFloat, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("recvbuff"),
                  "host recvbuff is ncclInvalidArgument naming recvbuff");
            e = ncclAllReduce(d.p, small.p, 64, ncclFloat, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("past the end"),
                  "a recvbuff too small is ncclInvalidArgument");
            e = ncclAllGather(d.p, d.p, 64, ncclFloat, R.comm, 0);  // recvbuff needs nranks * sendcount: 64 here
            check(e == ncclSuccess, "all-gather of one rank in place returned " + res(e));
            e = ncclAllReduce(d.p, d.p, 64, ncclFloat16, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("ncclFloat16"),
                  "a half reduction is ncclInvalidArgument (not emulated)");
            e = ncclAllReduce(d.p, d.p, 64, ncclFloat8e4m3, ncclMax, R.comm, 0);
            check(e == ncclInvalidArgument, "an fp8 reduction is ncclInvalidArgument (not emulated)");
            e = ncclAllReduce(d.p, d.p, 4, (ncclDataType_t)99, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument, "datatype 99 is ncclInvalidArgument");
            e = ncclAllReduce(d.p, d.p, 4, ncclFloat, (ncclRedOp_t)7, R.comm, 0);
            check(e == ncclInvalidArgument, "op 7 is ncclInvalidArgument");
            e = ncclAllReduce(d.p, d.p + 4, 32, ncclFloat, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("overlap"),
                  "all-reduce with recvbuff = sendbuff + 1 element is refused");
            e = ncclBroadcast(d.p, d.p, 64, ncclFloat, 1, R.comm, 0);
            check(e == ncclInvalidArgument, "broadcast root 1 of 1 rank is ncclInvalidArgument");
            e = ncclAllGather(d.p + 4, d.p, 16, ncclFloat, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("overlap"),
                  "all-gather with sendbuff inside recvbuff at the wrong offset is refused");
            check(ncclCommDestroy(R.comm) == ncclSuccess, "ncclCommDestroy");
            int n = 0;
            check(ncclCommCount(R.comm, &n) == ncclInvalidArgument, "a destroyed communicator is ncclInvalidArgument");
            check(ncclCommInitRank(&c, 1, id, 0) == ncclInvalidArgument && last_error_has("gone"),
                  "an id whose communicator is complete cannot be joined again");
        }
    }
    // ranks disagree on nranks: every rank gets ncclInvalidArgument, quickly
    new_id(&id, "");
    auto o = on_threads(2, [&](int r) {
        ncclComm_t cc = nullptr;
        const ncclResult_t e = ncclCommInitRank(&cc, r == 0 ? 2 : 3, id, r);
        if (cc) ncclCommDestroy(cc);
        return e;
    });
    for (int r = 0; r < 2; r++)
        check(o[r].r == ncclInvalidArgument && o[r].s < 0.9, "nranks 2 vs 3: rank " + std::to_string(r) + " got " +
                                                                 res(o[r].r) + " after " + std::to_string(o[r].s) +
                                                                 " s");
    // a rank given twice
    new_id(&id, "");
    o = on_threads(2, [&](int) {
        ncclComm_t cc = nullptr;
        const ncclResult_t e = ncclCommInitRank(&cc, 2, id, 0);
        if (cc) ncclCommDestroy(cc);
        return e;
    });
    check(o[0].r == ncclInvalidArgument && o[1].r == ncclInvalidArgument && o[0].s < 0.9 && o[1].s < 0.9,
          "rank 0 twice: both get ncclInvalidArgument at once (" + res(o[0].r) + ", " + res(o[1].r) + ")");
    // two ranks on one device (the threads here never call cudaSetDevice: both on device 0)
    new_id(&id, "");
    o = on_threads(2, [&](int r) {
        ncclComm_t cc = nullptr;
        const ncclResult_t e = ncclCommInitRank(&cc, 2, id, r);
        if (cc) ncclCommDestroy(cc);
        return e;
    });
    for (int r = 0; r < 2; r++)
        check(o[r].r == ncclInvalidUsage && o[r].msg.find("both on CUDA device 0") != std::string::npos,
              "two ranks on device 0: rank " + std::to_string(r) + " got " + res(o[r].r) + ": " + o[r].msg);
    // a rank that never arrives: a bounded wait (LLMC_EMU_NCCL_TIMEOUT_S=1) naming it
    new_id(&id, "");
    o = on_threads(2, [&](int r) {
        ncclComm_t cc = nullptr;
        const ncclResult_t e = ncclCommInitRank(&cc, 3, id, r);
        if (cc) ncclCommDestroy(cc);
        return e;
    });
    int named = 0;
    for (int r = 0; r < 2; r++) {
        check((o[r].r == ncclSystemError || o[r].r == ncclRemoteError) && o[r].s < 5,
              "rank 2 of 3 never joins: rank " + std::to_string(r) + " got " + res(o[r].r) + " after " +
                  std::to_string(o[r].s) + " s");
        named += o[r].r == ncclSystemError && o[r].msg.find("rank(s) 2 of 3 never arrived") != std::string::npos;
    }
    check(named >= 1, "the timeout names the rank that never arrived: " + o[0].msg + " | " + o[1].msg);
    // ... and one that never arrives at a collective; the communicator then stays broken for all
    threads_world(2, "", "errors", [](Rank& R) {
        DevBuf d(8 * 4);
        d.put(input(ncclSum, kF32, 5, R.r, 8, 2));
        if (R.r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1600));  // rank 0 gives up first
        const auto t0 = Clock::now();
        const ncclResult_t e = ncclAllReduce(d.p, d.p, 8, ncclFloat, ncclSum, R.comm, 0);
        if (R.r == 0)
            check(e == ncclSystemError && last_error_has("rank(s) 1 of 2 never arrived") && seconds_since(t0) < 5,
                  R.tag + ": a late rank gives a bounded ncclSystemError naming it, got " + res(e));
        else check(e == ncclRemoteError, R.tag + ": the late rank finds the communicator broken, got " + res(e));
    });
    // collectives that differ between ranks: refused on every rank; the communicator still works
    set_env("LLMC_EMU_NCCL_TIMEOUT_S", "30");
    threads_world(2, "", "errors", [](Rank& R) {
        DevBuf d(8 * 4);
        d.put(input(ncclSum, kF32, 6, R.r, 8, 2));
        ncclResult_t e = ncclAllReduce(d.p, d.p, R.r == 0 ? 7 : 8, ncclFloat, ncclSum, R.comm, 0);
        check(e == ncclInvalidArgument && last_error_has("differs between ranks"),
              R.tag + ": counts 7 vs 8 refused, got " + res(e));
        e = ncclAllReduce(d.p, d.p, 8, ncclFloat, R.r == 0 ? ncclSum : ncclMax, R.comm, 0);
        check(e == ncclInvalidArgument, R.tag + ": ops sum vs max refused, got " + res(e));
        all_reduce_case(R, kF32, ncclSum, 8, true, 6);
        // reduce-scatter with recvbuff == sendbuff (MPI's in-place habit) is in place on rank 0
        // only and refused on rank 1 (rank 0 would wait for rank 1 alone, so only rank 1 calls it)
        if (R.r == 1) {
            DevBuf s(16 * 4);
            e = ncclReduceScatter(s.p, s.p, 8, ncclFloat, ncclSum, R.comm, 0);
            check(e == ncclInvalidArgument && last_error_has("recvbuff == sendbuff + rank * recvcount"),
                  R.tag + ": reduce-scatter with recvbuff == sendbuff on rank 1 refused, got " + res(e));
        }
    });
    // ncclCommAbort returns at once, and the other rank's collective fails at once
    threads_world(2, "", "errors", [](Rank& R) {
        if (R.r == 0) {
            const auto t0 = Clock::now();
            const ncclResult_t e = ncclCommAbort(R.comm);
            check(e == ncclSuccess && seconds_since(t0) < 1, R.tag + ": ncclCommAbort returned " + res(e));
            R.comm = nullptr;  // threads_world's ncclCommDestroy(NULL) is a no-op
            return;
        }
        DevBuf d(8 * 4);
        const auto t0 = Clock::now();
        const ncclResult_t e = ncclAllReduce(d.p, d.p, 8, ncclFloat, ncclSum, R.comm, 0);
        check(e == ncclRemoteError && last_error_has("ncclCommAbort") && seconds_since(t0) < 5,
              R.tag + ": after the peer's ncclCommAbort: " + res(e));
    });
    set_env("LLMC_EMU_NCCL_TIMEOUT_S", default_timeout);
}

// ---- ranks as processes ----------------------------------------------------------------------------
std::string self_path;

struct ChildResult {
    int status = -1;
    bool hung = false;
};

std::vector<ChildResult> run_processes(int n, const std::string& scenario, const std::string& timeout_s) {
    std::vector<ChildResult> out(n);
    ncclUniqueId id;
    if (!new_id(&id, "512")) return out;
    char idfile[] = "/tmp/nccl_cases_id_XXXXXX";
    const int fd = mkstemp(idfile);
    if (!check(fd >= 0 && write(fd, &id, sizeof id) == (ssize_t)sizeof id, "write the id file")) return out;
    close(fd);
    set_env("LLMC_EMU_NCCL_TIMEOUT_S", timeout_s.empty() ? default_timeout : timeout_s);
    std::vector<pid_t> pids(n, -1);
    for (int r = 0; r < n; r++) {
        const std::string rs = std::to_string(r), ns = std::to_string(n);
        const char* argv[] = {self_path.c_str(), "--rank", rs.c_str(),   "--nranks",       ns.c_str(),
                              "--id-file",       idfile,   "--scenario", scenario.c_str(), nullptr};
        if (posix_spawn(&pids[r], self_path.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
            pids[r] = -1;
    }
    set_env("LLMC_EMU_NCCL_TIMEOUT_S", default_timeout);
    const auto t0 = Clock::now();
    int left = n;
    for (int r = 0; r < n; r++) left -= pids[r] < 0;
    while (left > 0) {  // reap promptly (a rank whose process exited must not linger as a zombie)
        int st = 0;
        const pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < n; r++)
                if (pids[r] == p) out[r].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), left--;
            continue;
        }
        if (seconds_since(t0) > 120) {
            for (int r = 0; r < n; r++)
                if (out[r].status < 0 && pids[r] > 0) kill(pids[r], SIGKILL), out[r].hung = true;
            while (waitpid(-1, nullptr, 0) > 0) {}
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    unlink(idfile);
    return out;
}

void process_worlds() {
    for (int n : {2, 4}) {
        const auto t0 = Clock::now();
        const auto o = run_processes(n, "sweep", "");
        for (int r = 0; r < n; r++)
            check(o[r].status == 0, "processes world " + std::to_string(n) + " rank " + std::to_string(r) +
                                        ": exit status " + std::to_string(o[r].status) +
                                        (o[r].hung ? " (killed after 120 s)" : ""));
        std::printf("processes world %d: done in %.2f s\n", n, seconds_since(t0));
    }
}

void process_errors() {
    for (const char* s : {"absent", "exits", "aborts"}) {
        const int n = 3;
        const auto o = run_processes(n, s, std::string(s) == "absent" ? "1" : "60");
        for (int r = 0; r < n; r++)
            check(o[r].status == 0, std::string("processes ") + s + " rank " + std::to_string(r) + ": exit status " +
                                        std::to_string(o[r].status) + (o[r].hung ? " (killed after 120 s)" : ""));
    }
}

// A rank of a world of processes (this program started by run_processes).
int child(int r, int n, const std::string& idfile, const std::string& scenario) {
    ncclUniqueId id;
    FILE* f = std::fopen(idfile.c_str(), "rb");
    if (!f || std::fread(&id, sizeof id, 1, f) != 1) return 3;
    std::fclose(f);
    Rank R;
    R.n = n;
    R.r = r;
    R.tag = "processes " + scenario + " world " + std::to_string(n) + " rank " + std::to_string(r) + " (pid " +
            std::to_string(getpid()) + ")";
    const auto t0 = Clock::now();
    if (scenario == "absent") {  // the last rank never calls ncclCommInitRank
        if (r == n - 1) return 0;
        const ncclResult_t e = ncclCommInitRank(&R.comm, n, id, r);
        const bool named =
            last_error_has("rank(s) " + std::to_string(n - 1) + " of " + std::to_string(n) + " never arrived");
        check((e == ncclSystemError && named) || e == ncclRemoteError, R.tag + ": a rank that never starts gives " +
                                                                           res(e) + " after " +
                                                                           std::to_string(seconds_since(t0)) + " s");
        check(seconds_since(t0) < 5, R.tag + ": bounded by LLMC_EMU_NCCL_TIMEOUT_S=1");
    } else if (!join(R, id)) {
        return 1;
    } else if (scenario == "sweep") {
        sweep(R);
        check(ncclCommDestroy(R.comm) == ncclSuccess, R.tag + ": ncclCommDestroy");
    } else {  // exits / aborts: the last rank leaves after joining; the others' collective fails at once
        if (r == n - 1) {
            if (scenario == "aborts") check(ncclCommAbort(R.comm) == ncclSuccess, R.tag + ": ncclCommAbort");
            std::fflush(stdout);
            _exit(n_failed ? 1 : 0);  // no destroy: as if it crashed
        }
        DevBuf d(4);
        const auto t1 = Clock::now();
        const ncclResult_t e = ncclAllReduce(d.p, d.p, 1, ncclFloat, ncclSum, R.comm, 0);
        check(e == ncclRemoteError && seconds_since(t1) < 10, R.tag + ": a peer that " + scenario + " gives " + res(e) +
                                                                  " after " + std::to_string(seconds_since(t1)) +
                                                                  " s (the time limit is 60 s)");
        ncclCommDestroy(R.comm);
    }
    std::printf("%s: %d checks, %d failed\n", R.tag.c_str(), n_checks, n_failed);
    return n_failed ? 1 : 0;
}

// No communicator file of this process may be left in /dev/shm or /tmp.
void no_files_left() {
    const std::string prefix = "llmc-emu-nccl-" + std::to_string(getpid()) + "-";
    std::string left;
    for (const char* dir : {"/dev/shm", "/tmp"}) {
        DIR* d = opendir(dir);
        if (!d) continue;
        while (dirent* e = readdir(d))
            if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0)
                left += std::string(" ") + dir + "/" + e->d_name;
        closedir(d);
    }
    check(left.empty(), "communicator files left behind:" + left);
}

}  // namespace

int main(int argc, char** argv) {
    setenv("LLMC_EMU_DEVICE_COUNT", "4", 1);  // before the first CUDA call: one device per rank
    self_path = argv[0];
    int rank = -1, nranks = 0;
    std::string idfile, scenario, only;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--rank") rank = std::atoi(argv[i + 1]);
        else if (a == "--nranks") nranks = std::atoi(argv[i + 1]);
        else if (a == "--id-file") idfile = argv[i + 1];
        else if (a == "--scenario") scenario = argv[i + 1];
        else if (a == "--only") only = argv[i + 1];
        else return std::fprintf(stderr, "usage: nccl_cases [--only SECTION]\n"), 2;
    }
    if (rank >= 0) return child(rank, nranks, idfile, scenario);
    if (const char* t = std::getenv("LLMC_EMU_NCCL_TIMEOUT_S"); t && *t) default_timeout = t;
    set_env("LLMC_EMU_NCCL_TIMEOUT_S", default_timeout);
    const auto t0 = Clock::now();
    struct Section {
        const char* name;
        void (*run)();
    };
    const Section sections[] = {{"api", api_checks},
                                {"threads", thread_worlds},
                                {"group", group_world},
                                {"large", large_world},
                                {"errors", error_cases},
                                {"processes", process_worlds},
                                {"process-errors", process_errors}};
    bool ran = false;
    for (const Section& s : sections)
        if (only.empty() || only == s.name) {
            const auto ts = Clock::now();
            s.run();
            std::printf("== %s: %.2f s\n", s.name, seconds_since(ts));
            ran = true;
        }
    if (!ran) return std::fprintf(stderr, "nccl_cases: no section '%s'\n", only.c_str()), 2;
    no_files_left();
    if (n_failed) {
        std::printf("nccl_cases: %d of %d checks FAILED (%.1f s)\n", n_failed, n_checks, seconds_since(t0));
        return 1;
    }
    std::printf("nccl_cases: all %d checks passed (%.1f s)\n", n_checks, seconds_since(t0));
    return 0;
}
