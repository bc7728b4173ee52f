// Device emulation, the NCCL subset the project uses, defined against NVIDIA's own declarations
// (nccl.h), so an emulated binary links this instead of libnccl. Semantics from NCCL's
// documentation (the comments in nccl.h and the NCCL user guide); nothing here came from NCCL's
// source. docs/emulation.md says what it is and what it cannot show.
//
// How ranks meet. ncclGetUniqueId creates a file in /dev/shm (else /tmp), named after the process
// and a random nonce, holding a header (rank states, barrier counters) and one fixed-size data slot
// per rank; the id's 128 bytes carry a magic and the file's path. ncclCommInitRank maps the file
// (every rank, whether a thread of one process or a process of its own: the mapping is shared, the
// synchronization is lock-free std::atomic in it, which works across processes), checks that
// every rank gives the same nranks and a distinct rank, and waits for all nranks to join; then the
// file is unlinked (every rank has it mapped, so nothing is left behind in /dev/shm even if a rank
// later crashes). A communicator whose ranks never all join unlinks its file when it gives up; an
// id nobody ever joins is unlinked when the process that made it exits.
//
// Collectives run synchronously, chunk by chunk: each rank copies its part of the chunk into its
// slot, all ranks meet at a barrier, each rank computes its own output from the slots (reductions
// in rank order 0..nranks-1, so every rank gets the same bits, run after run), all ranks meet again
// (the slots may then be overwritten). The barrier: every rank has a counter of the barriers it
// reached; it publishes the next value (release) and waits (acquire) until every counter is there,
// sleeping on a futex word in the mapping that every arrival bumps. The first barrier of each
// collective also compares what every rank called (collective, count, type, op, root).
//
// Waits are bounded: LLMC_EMU_NCCL_TIMEOUT_S (default 300 s), then ncclSystemError naming the ranks
// that never arrived; a peer process that has exited is noticed within about a second
// (ncclRemoteError). A timeout, a dead peer, ncclCommAbort or ranks disagreeing at
// ncclCommInitRank mark the communicator broken in the shared header, so the other ranks fail at
// once (ncclRemoteError) instead of waiting out the limit. An argument refused on one rank does not
// (as with NCCL, its peers then wait: for the limit here).
//
// Arguments: sendbuff and recvbuff must lie inside emulated device allocations (cudaMalloc) of the
// sizes the call implies, and may overlap only in the documented in-place forms; otherwise
// ncclInvalidArgument (real NCCL faults on host memory and gives undefined results for other
// overlaps). Two ranks on one CUDA device are refused at ncclCommInitRank (ncclInvalidUsage, as
// NCCL's "duplicate GPU"). Every error is also printed to stderr, prefixed "emulated NCCL:".
// Reductions of int8/uint8/int32/uint32/int64/uint64, float, double and bf16 (each step rounded to
// the element type; integers wrap; ncclAvg = the sum divided by nranks, integers truncated; a NaN
// operand of max/min gives NaN); the copies (all-gather, broadcast) take every type.
// Group calls are queued per host thread and run at the outermost ncclGroupEnd, one thread per
// communicator, so one thread can drive several ranks. At most 64 ranks; each rank's slot is
// LLMC_EMU_NCCL_SLOT_BYTES (default 1 MiB, read by ncclGetUniqueId).
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nccl.h>

#include "dev/emu/device_state.h"

namespace {

constexpr int kMaxRanks = 64;                    // joined ranks are bits of one 64-bit word
constexpr size_t kDefaultSlotBytes = 1 << 20;    // per rank; LLMC_EMU_NCCL_SLOT_BYTES changes it
constexpr size_t kMinSlotBytes = 8 * kMaxRanks;  // a reduce-scatter sub-block holds >= one 8-byte element
constexpr double kDefaultTimeoutS = 300.0;
constexpr char kIdMagic[16] = "llmc-emu-nccl/1";
constexpr uint64_t kFileMagic = 0x314c4343454d4c4cull;  // "LLMECCL1"
constexpr uint64_t kCommMagic = 0x6d6d6f434c434345ull;

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the process-shared barrier needs lock-free atomics");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "the futex word must be a plain 32-bit word");

enum Kind : int32_t { kAllReduce = 1, kReduceScatter, kAllGather, kBroadcast };
const char* kind_name(int32_t k) {
    switch (k) {
        case kAllReduce: return "ncclAllReduce";
        case kReduceScatter: return "ncclReduceScatter";
        case kAllGather: return "ncclAllGather";
        case kBroadcast: return "ncclBroadcast";
        default: return "?";
    }
}

// Why a communicator is broken (Shared::broken), set once by the rank that found out.
enum Broken : int32_t { kNotBroken = 0, kAborted, kTimedOut, kPeerExited, kInitMismatch };

// What a rank called, compared at the first barrier of every collective.
struct Sig {
    int32_t kind, dt, op, root;
    uint64_t count, seq;
};

struct alignas(64) RankState {
    std::atomic<uint64_t> epoch;  // the last barrier this rank reached (1 = joined)
    std::atomic<int32_t> pid;     // 0 until the rank joins
    std::atomic<uint64_t> pidns;  // its pid namespace (the liveness check needs the same one)
    std::atomic<int32_t> device;  // its CUDA device (every rank is on this one machine)
    Sig sig[2];                   // indexed by the collective's sequence number & 1
};

// The start of the shared file; the data slots follow at data_offset().
struct Shared {
    uint64_t magic;
    uint64_t slot_bytes;
    uint64_t file_bytes;
    std::atomic<int32_t> nranks;  // 0 until the first rank sets it
    std::atomic<uint32_t> wake;   // futex word, bumped by every arrival and every break
    std::atomic<int32_t> broken;  // Broken
    std::atomic<int32_t> broken_by;
    std::atomic<uint64_t> joined;  // bit r: rank r has joined
    RankState rank[kMaxRanks];
};
constexpr size_t data_offset() { return (sizeof(Shared) + 4095) / 4096 * 4096; }

// ---- errors -------------------------------------------------------------------------------------
thread_local std::string last_error;

ncclResult_t fail(ncclResult_t r, const char* call, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t fail(ncclResult_t r, const char* call, const char* fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    last_error = std::string(call) + ": " + msg;
    std::fprintf(stderr, "emulated NCCL: %s\n", last_error.c_str());
    return r;
}

std::string rank_list(const std::vector<int>& r) {
    std::string s;
    for (size_t i = 0; i < r.size(); i++) s += (i ? ", " : "") + std::to_string(r[i]);
    return s;
}

// ---- data types and reductions --------------------------------------------------------------------
// Element size, 0 for a value outside ncclDataType_t.
size_t type_size(int dt) {
    switch (dt) {
        case ncclInt8:
        case ncclUint8:
        case ncclFloat8e4m3:
        case ncclFloat8e5m2: return 1;
        case ncclFloat16:
        case ncclBfloat16: return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32: return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64: return 8;
        default: return 0;
    }
}
const char* type_name(int dt) {
    switch (dt) {
        case ncclInt8: return "ncclInt8";
        case ncclUint8: return "ncclUint8";
        case ncclInt32: return "ncclInt32";
        case ncclUint32: return "ncclUint32";
        case ncclInt64: return "ncclInt64";
        case ncclUint64: return "ncclUint64";
        case ncclFloat16: return "ncclFloat16";
        case ncclFloat32: return "ncclFloat32";
        case ncclFloat64: return "ncclFloat64";
        case ncclBfloat16: return "ncclBfloat16";
        case ncclFloat8e4m3: return "ncclFloat8e4m3";
        case ncclFloat8e5m2: return "ncclFloat8e5m2";
        default: return "an unknown ncclDataType_t";
    }
}
bool reducible(int dt) { return type_size(dt) && dt != ncclFloat16 && dt != ncclFloat8e4m3 && dt != ncclFloat8e5m2; }
const char* op_name(int op) {
    switch (op) {
        case ncclSum: return "ncclSum";
        case ncclProd: return "ncclProd";
        case ncclMax: return "ncclMax";
        case ncclMin: return "ncclMin";
        case ncclAvg: return "ncclAvg";
        default: return "-";
    }
}

// bfloat16 as its bits: the upper half of a float; float -> bf16 rounds to nearest even.
struct Bf16 {
    uint16_t bits;
};
float to_float(Bf16 h) {
    const uint32_t u = (uint32_t)h.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
Bf16 to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) return Bf16{(uint16_t)((u >> 16) | 0x40)};  // stays a (quiet) NaN
    u += 0x7FFF + ((u >> 16) & 1);
    return Bf16{(uint16_t)(u >> 16)};
}

// One step of each reduction in the element type (integers wrap, as on the GPU; a NaN operand of
// max/min gives NaN), and the division of ncclAvg (integers truncate toward zero).
template <typename T>
T apply(int op, T a, T b) {
    if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        switch (op) {
            case ncclProd: return (T)(U)((U)a * (U)b);
            case ncclMax: return a < b ? b : a;
            case ncclMin: return b < a ? b : a;
            default: return (T)(U)((U)a + (U)b);  // ncclSum, ncclAvg
        }
    } else {
        switch (op) {
            case ncclProd: return a * b;
            case ncclMax: return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? b : a);
            case ncclMin: return std::isnan(a) || std::isnan(b) ? a + b : (b < a ? b : a);
            default: return a + b;
        }
    }
}
template <>
Bf16 apply<Bf16>(int op, Bf16 a, Bf16 b) {
    return to_bf16(apply<float>(op, to_float(a), to_float(b)));
}
template <typename T>
T divide(T a, int n) {
    if constexpr (std::is_integral_v<T>) return (T)(a / (T)n);
    else return a / (T)n;
}
template <>
Bf16 divide<Bf16>(Bf16 a, int n) {
    return to_bf16(to_float(a) / (float)n);
}

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// dst[i] = src[0][i] op src[1][i] op ... in rank order (then / n for ncclAvg). memcpy loads and
// stores: NCCL takes any buffer its element type fits, aligned or not.
template <typename T>
void reduce_typed(unsigned char* dst, const std::vector<const unsigned char*>& src, size_t n, int op) {
    const int nr = (int)src.size();
    for (size_t i = 0; i < n; i++) {
        T acc = load<T>(src[0] + i * sizeof(T));
        for (int q = 1; q < nr; q++) acc = apply<T>(op, acc, load<T>(src[q] + i * sizeof(T)));
        if (op == ncclAvg) acc = divide<T>(acc, nr);
        std::memcpy(dst + i * sizeof(T), &acc, sizeof(T));
    }
}
void reduce(unsigned char* dst, const std::vector<const unsigned char*>& src, size_t n, int dt, int op) {
    switch (dt) {
        case ncclInt8: return reduce_typed<int8_t>(dst, src, n, op);
        case ncclUint8: return reduce_typed<uint8_t>(dst, src, n, op);
        case ncclInt32: return reduce_typed<int32_t>(dst, src, n, op);
        case ncclUint32: return reduce_typed<uint32_t>(dst, src, n, op);
        case ncclInt64: return reduce_typed<int64_t>(dst, src, n, op);
        case ncclUint64: return reduce_typed<uint64_t>(dst, src, n, op);
        case ncclFloat32: return reduce_typed<float>(dst, src, n, op);
        case ncclFloat64: return reduce_typed<double>(dst, src, n, op);
        case ncclBfloat16: return reduce_typed<Bf16>(dst, src, n, op);
        default: std::abort();  // refused by the argument check
    }
}

// ---- settings --------------------------------------------------------------------------------------
bool env_number(const char* name, double* out) {
    const char* s = std::getenv(name);
    if (!s || !*s) return true;
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (*end || !(v > 0) || !std::isfinite(v)) return false;
    *out = v;
    return true;
}

uint64_t pid_namespace() {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

// False when process `pid` (in our pid namespace) has exited: gone, or a zombie nobody reaped yet.
bool process_alive(int pid) {
    if (kill(pid, 0) == -1 && errno == ESRCH) return false;
    char path[64], buf[512];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE* f = std::fopen(path, "r");
    if (!f) return true;  // cannot tell
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    const char* close = std::strrchr(buf, ')');
    return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, long ns) {
    timespec ts{ns / 1000000000L, ns % 1000000000L};
    // not FUTEX_PRIVATE: the word is in a mapping other processes share
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* word) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, std::numeric_limits<int>::max(), nullptr, nullptr,
            0);
}

// ---- ids made by this process (unlinked at exit if nobody joined them) ---------------------------
std::mutex made_mu;
std::vector<std::string>& made_ids() {
    static std::vector<std::string> v;
    return v;
}
pid_t made_by = 0;
void unlink_made_ids() {
    if (getpid() != made_by) return;  // a forked child does not own its parent's ids
    std::lock_guard<std::mutex> lock(made_mu);
    for (const auto& p : made_ids()) unlink(p.c_str());  // ENOENT when every rank joined: fine
}

}  // namespace

// ---- the communicator (nccl.h declares `struct ncclComm` opaque; this is its definition) ---------
struct ncclComm {
    enum State { Pending, Ready, Failed };
    uint64_t magic = kCommMagic;
    State state = Pending;
    std::string path;
    int nranks = 0, rank = 0, cuda_device = 0;
    double timeout_s = kDefaultTimeoutS;
    int fd = -1;
    void* map = nullptr;
    size_t map_bytes = 0;
    Shared* sh = nullptr;
    unsigned char* data = nullptr;
    size_t slot_bytes = 0;
    uint64_t epoch = 0;        // barriers this rank has passed
    uint64_t seq = 0;          // collectives this rank has run
    std::atomic<int> busy{0};  // a thread is inside a collective (ncclCommAbort waits for it)

    unsigned char* slot(int r) const { return data + (size_t)r * slot_bytes; }
};

namespace {

std::mutex live_mu;
std::set<ncclComm*>& live() {
    static std::set<ncclComm*> s;
    return s;
}
bool is_live(ncclComm* c) {
    std::lock_guard<std::mutex> lock(live_mu);
    return c && live().count(c) && c->magic == kCommMagic;
}

void unmap(ncclComm* c) {
    if (c->map) munmap(c->map, c->map_bytes);
    if (c->fd >= 0) close(c->fd);
    c->map = nullptr;
    c->sh = nullptr;
    c->fd = -1;
}

// Marks the communicator broken for every rank (the first reason wins) and wakes every waiter.
void break_comm(ncclComm* c, Broken why) {
    int32_t expect = kNotBroken;
    if (c->sh->broken.compare_exchange_strong(expect, why)) c->sh->broken_by.store(c->rank);
    c->sh->wake.fetch_add(1);
    futex_wake_all(&c->sh->wake);
}

ncclResult_t report_broken(ncclComm* c, const char* call) {
    const int why = c->sh->broken.load(std::memory_order_acquire);
    const int by = c->sh->broken_by.load();
    switch (why) {
        case kAborted: return fail(ncclRemoteError, call, "rank %d of the communicator called ncclCommAbort", by);
        case kTimedOut:
            return fail(ncclRemoteError, call, "rank %d of the communicator timed out waiting for other ranks", by);
        case kPeerExited:
            return fail(ncclRemoteError, call, "rank %d of the communicator found a rank whose process has exited", by);
        default:
            return fail(ncclInvalidArgument, call,
                        "ranks disagree on the communicator (rank %d found a different nranks or a rank given twice)",
                        by);
    }
}

void arrive(ncclComm* c, uint64_t target) {
    c->sh->rank[c->rank].epoch.store(target, std::memory_order_release);
    c->sh->wake.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&c->sh->wake);
}

// Waits until every rank has reached barrier `target`; `where` names it in messages.
ncclResult_t wait_all(ncclComm* c, uint64_t target, const char* call, const std::string& where) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto next_liveness = start + std::chrono::milliseconds(500);
    const uint64_t my_ns = pid_namespace();
    const int me = getpid();
    std::vector<int> missing;
    for (;;) {
        const uint32_t seen = c->sh->wake.load(std::memory_order_acquire);
        missing.clear();
        for (int q = 0; q < c->nranks; q++)
            if (c->sh->rank[q].epoch.load(std::memory_order_acquire) < target) missing.push_back(q);
        if (missing.empty()) return ncclSuccess;
        if (c->sh->broken.load(std::memory_order_acquire) != kNotBroken) return report_broken(c, call);
        const auto now = clock::now();
        const double waited = std::chrono::duration<double>(now - start).count();
        if (waited >= c->timeout_s) {
            break_comm(c, kTimedOut);
            return fail(ncclSystemError, call,
                        "rank %d waited %.1f s (LLMC_EMU_NCCL_TIMEOUT_S) at %s; rank(s) %s of %d never arrived",
                        c->rank, waited, where.c_str(), rank_list(missing).c_str(), c->nranks);
        }
        if (now >= next_liveness && my_ns) {
            next_liveness = now + std::chrono::milliseconds(500);
            for (int q : missing) {
                const int pid = c->sh->rank[q].pid.load();
                if (pid && pid != me && c->sh->rank[q].pidns.load() == my_ns && !process_alive(pid)) {
                    break_comm(c, kPeerExited);
                    return fail(ncclRemoteError, call, "rank %d (process %d) exited before it reached %s", q, pid,
                                where.c_str());
                }
            }
        }
        futex_wait(&c->sh->wake, seen, 50 * 1000 * 1000L);
    }
}

// ---- joining --------------------------------------------------------------------------------------
ncclResult_t join(ncclComm* c) {
    const char* call = "ncclCommInitRank";
    c->fd = open(c->path.c_str(), O_RDWR | O_CLOEXEC);
    if (c->fd < 0) {
        if (errno == ENOENT)
            return fail(ncclInvalidArgument, call,
                        "rank %d: the id's communicator file %s is gone: its ranks all joined already (a rank or an id "
                        "used twice?), it gave up waiting, or the process that made the id has exited",
                        c->rank, c->path.c_str());
        return fail(ncclSystemError, call, "open %s: %s", c->path.c_str(), std::strerror(errno));
    }
    struct stat st;
    if (fstat(c->fd, &st) != 0 || (size_t)st.st_size < data_offset())
        return fail(ncclSystemError, call, "%s is not an emulated NCCL communicator file", c->path.c_str());
    c->map_bytes = (size_t)st.st_size;
    c->map = mmap(nullptr, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
    if (c->map == MAP_FAILED) {
        c->map = nullptr;
        return fail(ncclSystemError, call, "mmap %s: %s", c->path.c_str(), std::strerror(errno));
    }
    c->sh = static_cast<Shared*>(c->map);
    if (c->sh->magic != kFileMagic || c->sh->file_bytes != c->map_bytes)
        return fail(ncclSystemError, call, "%s is not an emulated NCCL communicator file", c->path.c_str());
    c->slot_bytes = c->sh->slot_bytes;
    c->data = static_cast<unsigned char*>(c->map) + data_offset();

    int32_t first = 0;
    if (!c->sh->nranks.compare_exchange_strong(first, c->nranks) && first != c->nranks) {
        break_comm(c, kInitMismatch);
        unlink(c->path.c_str());
        return fail(ncclInvalidArgument, call, "rank %d was given nranks %d, another rank of the same id nranks %d",
                    c->rank, c->nranks, first);
    }
    const uint64_t bit = 1ull << c->rank;
    if (c->sh->joined.fetch_or(bit) & bit) {
        break_comm(c, kInitMismatch);
        unlink(c->path.c_str());
        return fail(ncclInvalidArgument, call, "rank %d joined twice (ranks must be unique within a communicator)",
                    c->rank);
    }
    RankState& rs = c->sh->rank[c->rank];
    rs.pidns.store(pid_namespace());
    rs.pid.store(getpid());
    rs.device.store(c->cuda_device);
    arrive(c, 1);
    const ncclResult_t r = wait_all(c, 1, call, "ncclCommInitRank (" + std::to_string(c->nranks) + " ranks)");
    unlink(c->path.c_str());  // everyone has it mapped (or it gave up): the name is not needed again
    if (r != ncclSuccess) return r;
    // NCCL refuses two ranks on one GPU; the emulated ranks all share one machine. Every rank
    // checks every pair, so all of them fail alike.
    for (int a = 0; a < c->nranks; a++)
        for (int b = a + 1; b < c->nranks; b++)
            if (c->sh->rank[a].device.load() == c->sh->rank[b].device.load())
                return fail(ncclInvalidUsage, call,
                            "rank %d and rank %d are both on CUDA device %d: each rank needs its own device "
                            "(cudaSetDevice before ncclCommInitRank; LLMC_EMU_DEVICE_COUNT gives the emulation more)",
                            a, b, c->sh->rank[a].device.load());
    c->epoch = 1;
    c->state = ncclComm::Ready;
    return ncclSuccess;
}

// ---- group calls ------------------------------------------------------------------------------------
// Between ncclGroupStart and ncclGroupEnd, calls are queued (per host thread) and run at the
// outermost ncclGroupEnd: the calls of each communicator in issue order, different communicators on
// threads of their own (so one thread can drive several ranks, as the documentation allows).
struct Deferred {
    ncclComm* comm;
    std::function<ncclResult_t()> run;
};
thread_local int group_depth = 0;
thread_local std::vector<Deferred> group_queue;

ncclResult_t submit(ncclComm* c, std::function<ncclResult_t()> fn) {
    if (group_depth > 0) {
        group_queue.push_back({c, std::move(fn)});
        return ncclSuccess;
    }
    return fn();
}

// ---- argument checks --------------------------------------------------------------------------------
ncclResult_t check_comm(ncclComm* c, const char* call) {
    if (!is_live(c))
        return fail(ncclInvalidArgument, call, "comm %p is not a communicator (never created, or destroyed)", (void*)c);
    return ncclSuccess;
}
ncclResult_t check_ready(ncclComm* c, const char* call) {
    if (c->state == ncclComm::Failed)
        return fail(ncclInvalidUsage, call, "the communicator's initialization failed; destroy it");
    if (c->state != ncclComm::Ready)
        return fail(ncclInvalidUsage, call, "the communicator is not initialized (ncclGroupEnd not called yet?)");
    if (c->sh->broken.load() != kNotBroken) return report_broken(c, call);
    return ncclSuccess;
}

// `what` (sendbuff/recvbuff) must be `bytes` of emulated device memory.
ncclResult_t check_buffer(const void* p, size_t bytes, const char* what, const char* call) {
    if (!p) return fail(ncclInvalidArgument, call, "%s is NULL", what);
    auto& d = llmc::emu::device();
    std::lock_guard<std::mutex> lock(d.mu);
    if (!d.device_range(p, bytes))
        return fail(ncclInvalidArgument, call, "%s %p %s (%zu bytes needed)", what, p,
                    d.is_device(p) ? "runs past the end of its device allocation"
                                   : "is not emulated device memory (cudaMalloc); a GPU cannot use host memory here",
                    bytes);
    return ncclSuccess;
}

// sendbuff and recvbuff may overlap only in the documented in-place form (`in_place`, described by `rule`).
ncclResult_t check_overlap(const void* send, size_t sbytes, const void* recv, size_t rbytes, bool in_place,
                           const char* rule, const char* call) {
    const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
    if (s < r + rbytes && r < s + sbytes && !in_place)
        return fail(
            ncclInvalidArgument, call,
            "sendbuff %p and recvbuff %p overlap, but not in the in-place form (%s); the result would be undefined",
            send, recv, rule);
    return ncclSuccess;
}

ncclResult_t check_type(int dt, bool reduction, const char* call) {
    if (!type_size(dt)) return fail(ncclInvalidArgument, call, "datatype %d is not an ncclDataType_t", dt);
    if (reduction && !reducible(dt))
        return fail(ncclInvalidArgument, call,
                    "reductions of %s are not emulated (ncclInt8/Uint8/Int32/Uint32/Int64/Uint64, ncclFloat32/64, "
                    "ncclBfloat16 are)",
                    type_name(dt));
    return ncclSuccess;
}
ncclResult_t check_op(int op, const char* call) {
    if (op < ncclSum || op > ncclAvg)
        return fail(ncclInvalidArgument, call,
                    "reduction op %d is not ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg "
                    "(ncclRedOpCreatePreMulSum is not emulated)",
                    op);
    return ncclSuccess;
}

// ---- the collectives ----------------------------------------------------------------------------------
struct Coll {
    int32_t kind;
    const unsigned char* send;
    unsigned char* recv;
    size_t count;  // per rank for reduce-scatter (recvcount) and all-gather (sendcount)
    int dt, op, root;
};

ncclResult_t run_collective(ncclComm* c, const Coll& o) {
    const char* call = kind_name(o.kind);
    if (ncclResult_t e = check_ready(c, call)) return e;
    c->busy.fetch_add(1);
    struct Unbusy {
        ncclComm* c;
        ~Unbusy() { c->busy.fetch_sub(1); }
    } unbusy{c};
    const int n = c->nranks, me = c->rank;
    const size_t es = type_size(o.dt);
    c->seq++;
    Sig mine{o.kind, o.dt, o.op, o.root, (uint64_t)o.count, c->seq};
    c->sh->rank[me].sig[c->seq & 1] = mine;
    // elements per chunk: a reduce-scatter slot holds one sub-block for every destination rank
    const size_t per_chunk = o.kind == kReduceScatter ? c->slot_bytes / n / es : c->slot_bytes / es;
    const size_t sub_bytes = per_chunk * es;
    const size_t nchunks = (o.count + per_chunk - 1) / per_chunk;
    auto& dev = llmc::emu::device();
    for (size_t k = 0; k < nchunks; k++) {
        const size_t off = k * per_chunk, len = std::min(per_chunk, o.count - off);
        {  // my part of the chunk into my slot
            std::lock_guard<std::mutex> lock(dev.mu);
            unsigned char* s = c->slot(me);
            switch (o.kind) {
                case kAllReduce:
                case kAllGather: std::memcpy(s, o.send + off * es, len * es); break;
                case kBroadcast:
                    if (me == o.root) std::memcpy(s, o.send + off * es, len * es);
                    break;
                case kReduceScatter:
                    for (int b = 0; b < n; b++)
                        std::memcpy(s + b * sub_bytes, o.send + ((size_t)b * o.count + off) * es, len * es);
                    break;
            }
        }
        const std::string where = std::string(call) + " #" + std::to_string(c->seq) + " (count " +
                                  std::to_string(o.count) + "), chunk " + std::to_string(k + 1) + " of " +
                                  std::to_string(nchunks);
        arrive(c, ++c->epoch);
        if (ncclResult_t e = wait_all(c, c->epoch, call, where)) return e;
        if (k == 0)
            for (int q = 0; q < n; q++) {
                const Sig& s = c->sh->rank[q].sig[c->seq & 1];
                if (s.kind != mine.kind || s.dt != mine.dt || s.op != mine.op || s.root != mine.root ||
                    s.count != mine.count)
                    return fail(
                        ncclInvalidArgument, call,
                        "collective #%llu differs between ranks: rank %d called %s(count %llu, %s, op %s, root %d), "
                        "rank %d called %s(count %llu, %s, op %s, root %d)",
                        (unsigned long long)c->seq, me, call, (unsigned long long)mine.count, type_name(mine.dt),
                        op_name(mine.op), mine.root, q, kind_name(s.kind), (unsigned long long)s.count, type_name(s.dt),
                        op_name(s.op), s.root);
            }
        {  // my output from the slots
            std::lock_guard<std::mutex> lock(dev.mu);
            std::vector<const unsigned char*> src(n);
            switch (o.kind) {
                case kAllReduce:
                    for (int q = 0; q < n; q++) src[q] = c->slot(q);
                    reduce(o.recv + off * es, src, len, o.dt, o.op);
                    break;
                case kReduceScatter:
                    for (int q = 0; q < n; q++) src[q] = c->slot(q) + me * sub_bytes;
                    reduce(o.recv + off * es, src, len, o.dt, o.op);
                    break;
                case kAllGather:
                    for (int q = 0; q < n; q++)
                        std::memcpy(o.recv + ((size_t)q * o.count + off) * es, c->slot(q), len * es);
                    break;
                case kBroadcast: std::memcpy(o.recv + off * es, c->slot(o.root), len * es); break;
            }
        }
        arrive(c, ++c->epoch);  // done reading the slots: they may be overwritten
        if (ncclResult_t e = wait_all(c, c->epoch, call, where)) return e;
    }
    return ncclSuccess;
}

// The checks every collective makes before it runs (or is queued in a group).
ncclResult_t start(ncclComm* c, const Coll& o) {
    const char* call = kind_name(o.kind);
    if (ncclResult_t e = check_comm(c, call)) return e;
    const bool reduction = o.kind == kAllReduce || o.kind == kReduceScatter;
    if (ncclResult_t e = check_type(o.dt, reduction, call)) return e;
    if (reduction)
        if (ncclResult_t e = check_op(o.op, call)) return e;
    if (o.kind == kBroadcast && (o.root < 0 || o.root >= c->nranks))
        return fail(ncclInvalidArgument, call, "root %d is not a rank of this %d-rank communicator", o.root, c->nranks);
    const size_t es = type_size(o.dt), n = (size_t)c->nranks, me = (size_t)c->rank;
    if (o.count > std::numeric_limits<size_t>::max() / es / n)
        return fail(ncclInvalidArgument, call, "count %zu is too large", o.count);
    const size_t bytes = o.count * es;
    // for the per-step report (step_counters.h): the size of the send buffer the call implies
    llmc::emu::device().counters.collective(call, o.kind == kReduceScatter ? bytes * n : bytes);
    if (o.count == 0) return ncclSuccess;  // nothing to move, on every rank alike
    switch (o.kind) {
        case kAllReduce:
            if (ncclResult_t e = check_buffer(o.send, bytes, "sendbuff", call)) return e;
            if (ncclResult_t e = check_buffer(o.recv, bytes, "recvbuff", call)) return e;
            if (ncclResult_t e =
                    check_overlap(o.send, bytes, o.recv, bytes, o.send == o.recv, "sendbuff == recvbuff", call))
                return e;
            break;
        case kBroadcast:  // sendbuff is used on the root only
            if (c->rank == o.root) {
                if (ncclResult_t e = check_buffer(o.send, bytes, "sendbuff", call)) return e;
                if (ncclResult_t e =
                        check_overlap(o.send, bytes, o.recv, bytes, o.send == o.recv, "sendbuff == recvbuff", call))
                    return e;
            }
            if (ncclResult_t e = check_buffer(o.recv, bytes, "recvbuff", call)) return e;
            break;
        case kReduceScatter:
            if (ncclResult_t e = check_buffer(o.send, bytes * n, "sendbuff", call)) return e;
            if (ncclResult_t e = check_buffer(o.recv, bytes, "recvbuff", call)) return e;
            if (ncclResult_t e = check_overlap(o.send, bytes * n, o.recv, bytes, o.recv == o.send + me * bytes,
                                               "recvbuff == sendbuff + rank * recvcount", call))
                return e;
            break;
        case kAllGather:
            if (ncclResult_t e = check_buffer(o.send, bytes, "sendbuff", call)) return e;
            if (ncclResult_t e = check_buffer(o.recv, bytes * n, "recvbuff", call)) return e;
            if (ncclResult_t e = check_overlap(o.send, bytes, o.recv, bytes * n, o.send == o.recv + me * bytes,
                                               "sendbuff == recvbuff + rank * sendcount", call))
                return e;
            break;
    }
    return submit(c, [c, o] { return run_collective(c, o); });
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    if (!version) return fail(ncclInvalidArgument, "ncclGetVersion", "version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (emulated NCCL: see its message on stderr)";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument (emulated NCCL: see its message on stderr)";
        case ncclInvalidUsage: return "invalid usage (emulated NCCL: see its message on stderr)";
        case ncclRemoteError: return "remote process exited or there was a network error (emulated NCCL: see stderr)";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    const char* call = "ncclGetUniqueId";
    if (!id) return fail(ncclInvalidArgument, call, "uniqueId is NULL");
    size_t slot = kDefaultSlotBytes;
    if (const char* s = std::getenv("LLMC_EMU_NCCL_SLOT_BYTES"); s && *s) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(s, &end, 10);
        if (*end || v < kMinSlotBytes || v > (1ull << 26))
            return fail(ncclInvalidArgument, call, "LLMC_EMU_NCCL_SLOT_BYTES '%s' is not a size from %zu to 2^26 bytes",
                        s, kMinSlotBytes);
        slot = (size_t)v / 64 * 64;
    }
    const char* dir = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
    std::random_device rd;
    char path[112];
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        const unsigned long long nonce = ((unsigned long long)rd() << 32) ^ rd();
        std::snprintf(path, sizeof path, "%s/llmc-emu-nccl-%d-%016llx", dir, (int)getpid(), nonce);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) return fail(ncclSystemError, call, "create %s: %s", path, std::strerror(errno));
    }
    if (fd < 0) return fail(ncclSystemError, call, "could not create a unique file in %s", dir);
    const size_t bytes = data_offset() + (size_t)kMaxRanks * slot;  // sparse: only used slots take memory
    if (ftruncate(fd, (off_t)bytes) != 0) {
        const int err = errno;
        close(fd);
        unlink(path);
        return fail(ncclSystemError, call, "size %s: %s", path, std::strerror(err));
    }
    void* m = mmap(nullptr, data_offset(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        unlink(path);
        return fail(ncclSystemError, call, "mmap %s: %s", path, std::strerror(errno));
    }
    Shared* sh = new (m) Shared();
    sh->slot_bytes = slot;
    sh->file_bytes = bytes;
    std::atomic_thread_fence(std::memory_order_release);
    sh->magic = kFileMagic;
    munmap(m, data_offset());
    {
        std::lock_guard<std::mutex> lock(made_mu);
        if (made_ids().empty()) {
            made_by = getpid();
            std::atexit(unlink_made_ids);
        }
        made_ids().push_back(path);
    }
    std::memset(id->internal, 0, sizeof id->internal);
    std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
    std::memcpy(id->internal + sizeof kIdMagic, path, std::strlen(path) + 1);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    const char* call = "ncclCommInitRank";
    if (!comm) return fail(ncclInvalidArgument, call, "comm is NULL");
    *comm = nullptr;
    if (nranks < 1 || nranks > kMaxRanks)
        return fail(ncclInvalidArgument, call, "nranks %d is not from 1 to %d (the emulation's limit)", nranks,
                    kMaxRanks);
    if (rank < 0 || rank >= nranks)
        return fail(ncclInvalidArgument, call, "rank %d is not from 0 to nranks-1 = %d", rank, nranks - 1);
    if (std::memcmp(commId.internal, kIdMagic, sizeof kIdMagic) != 0 ||
        !std::memchr(commId.internal + sizeof kIdMagic, 0, sizeof commId.internal - sizeof kIdMagic))
        return fail(ncclInvalidArgument, call, "the id did not come from the emulated ncclGetUniqueId");
    double timeout = kDefaultTimeoutS;
    if (!env_number("LLMC_EMU_NCCL_TIMEOUT_S", &timeout))
        return fail(ncclInvalidArgument, call, "LLMC_EMU_NCCL_TIMEOUT_S '%s' is not a positive number of seconds",
                    std::getenv("LLMC_EMU_NCCL_TIMEOUT_S"));
    auto* c = new ncclComm();
    c->path = commId.internal + sizeof kIdMagic;
    c->nranks = nranks;
    c->rank = rank;
    c->timeout_s = timeout;
    cudaGetDevice(&c->cuda_device);  // the device current when the rank was created (documented)
    {
        std::lock_guard<std::mutex> lock(live_mu);
        live().insert(c);
    }
    if (group_depth > 0) {  // joins at ncclGroupEnd; the handle is valid now
        *comm = c;
        group_queue.push_back({c, [c] {
                                   const ncclResult_t r = join(c);
                                   if (r != ncclSuccess) c->state = ncclComm::Failed;
                                   return r;
                               }});
        return ncclSuccess;
    }
    const ncclResult_t r = join(c);
    if (r != ncclSuccess) {
        {
            std::lock_guard<std::mutex> lock(live_mu);
            live().erase(c);
        }
        unmap(c);
        delete c;
        return r;
    }
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (ncclResult_t e = check_comm(comm, "ncclCommDestroy")) return e;
    {
        std::lock_guard<std::mutex> lock(live_mu);
        live().erase(comm);
    }
    unmap(comm);
    comm->magic = 0;
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    if (ncclResult_t e = check_comm(comm, "ncclCommAbort")) return e;
    {
        std::lock_guard<std::mutex> lock(live_mu);
        live().erase(comm);
    }
    if (comm->sh) {
        break_comm(comm, kAborted);  // the other ranks fail at once instead of waiting for this one
        if (comm->state != ncclComm::Ready) unlink(comm->path.c_str());
        // a thread of this process inside a collective on this comm wakes and leaves (bounded)
        for (int i = 0; i < 2000 && comm->busy.load() > 0; i++)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (comm->busy.load() == 0) {
        unmap(comm);
        comm->magic = 0;
        delete comm;
    }  // else: leaked rather than unmapped under a thread that still uses it
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    // every operation completed before it returned: nothing to flush
    return check_comm(comm, "ncclCommFinalize");
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    if (ncclResult_t e = check_comm(comm, "ncclCommGetAsyncError")) return e;
    if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError", "asyncError is NULL");
    *asyncError = comm->state == ncclComm::Failed                     ? ncclInvalidUsage
                  : comm->sh && comm->sh->broken.load() != kNotBroken ? ncclRemoteError
                                                                      : ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (ncclResult_t e = check_comm(comm, "ncclCommCount")) return e;
    if (!count) return fail(ncclInvalidArgument, "ncclCommCount", "count is NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (ncclResult_t e = check_comm(comm, "ncclCommUserRank")) return e;
    if (!rank) return fail(ncclInvalidArgument, "ncclCommUserRank", "rank is NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    if (ncclResult_t e = check_comm(comm, "ncclCommCuDevice")) return e;
    if (!device) return fail(ncclInvalidArgument, "ncclCommCuDevice", "device is NULL");
    *device = comm->cuda_device;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd", "no ncclGroupStart to end");
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Deferred> q;
    q.swap(group_queue);
    // the calls of each communicator, in issue order
    std::vector<ncclComm*> order;
    std::map<ncclComm*, std::vector<std::function<ncclResult_t()>>> per;
    for (auto& d : q) {
        if (!per.count(d.comm)) order.push_back(d.comm);
        per[d.comm].push_back(std::move(d.run));
    }
    std::vector<ncclResult_t> result(order.size(), ncclSuccess);
    auto run_all = [&](size_t i) {
        for (auto& fn : per[order[i]])
            if ((result[i] = fn()) != ncclSuccess) break;
    };
    if (order.size() == 1) {
        run_all(0);
    } else {
        std::vector<std::thread> threads;
        for (size_t i = 0; i < order.size(); i++) threads.emplace_back(run_all, i);
        for (auto& t : threads) t.join();
    }
    for (ncclResult_t r : result)
        if (r != ncclSuccess) return r;
    return ncclSuccess;
}

// The emulated collectives run when called; a stream that captures for a CUDA graph would need them
// recorded instead, which this emulation does not do: refused (ncclInvalidUsage).
static ncclResult_t refuse_capture(cudaStream_t stream, const char* call) {
    if (!llmc::emu::device().capture_of(stream)) return ncclSuccess;
    return fail(ncclInvalidUsage, call, "the stream captures a CUDA graph; the emulation does not capture NCCL calls");
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = refuse_capture(stream, "ncclAllReduce")) return r;
    return start(comm, Coll{kAllReduce, static_cast<const unsigned char*>(sendbuff),
                            static_cast<unsigned char*>(recvbuff), count, (int)datatype, (int)op, -1});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = refuse_capture(stream, "ncclReduceScatter")) return r;
    return start(comm, Coll{kReduceScatter, static_cast<const unsigned char*>(sendbuff),
                            static_cast<unsigned char*>(recvbuff), recvcount, (int)datatype, (int)op, -1});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = refuse_capture(stream, "ncclAllGather")) return r;
    return start(comm, Coll{kAllGather, static_cast<const unsigned char*>(sendbuff),
                            static_cast<unsigned char*>(recvbuff), sendcount, (int)datatype, -1, -1});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    if (ncclResult_t r = refuse_capture(stream, "ncclBroadcast")) return r;
    return start(comm, Coll{kBroadcast, static_cast<const unsigned char*>(sendbuff),
                            static_cast<unsigned char*>(recvbuff), count, (int)datatype, -1, root});
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

}  // extern "C"
