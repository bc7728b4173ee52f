// File rendezvous: hands rank 0's bootstrap bytes (NCCL's unique id, 128 bytes) to every rank of
// a run through a directory all of them see, without MPI. Host-only (no NCCL, no GPU), so it is
// tested on the CPU with threads and stale files (test/test_rendezvous.cpp); the NCCL collective
// (llmc/cuda/collective_nccl.cuh) passes ncclGetUniqueId's bytes through it.
//
// Files in DIR, <job> = $SLURM_JOB_ID.$SLURM_STEP_ID under Slurm, else "run":
//   rdv_<job>_join_<r>  rank r > 0: its nonce (64 random bits drawn when it starts)
//   rdv_<job>_id        rank 0: the bytes and the nonce of every rank it collected
//   rdv_<job>_ack_<r>   rank r > 0: its nonce, once it has taken the bytes
// Protocol:
//   rank 0  removes every file of <job> (stale ones from a crashed run), then repeatedly: reads the
//           join files, (re)writes the id file when it has all of them or one changed, and is done
//           when every rank has acked the nonce the id file carries for it; then removes the files.
//   rank r  keeps its join file present with its nonce (rank 0 may have removed it as stale), and
//           takes the id file only when it carries r's own nonce, then writes its ack.
// A stale id file cannot be taken (it carries another run's nonces), so no rank joins NCCL with
// an id whose rank 0 is gone; a stale join or ack is removed by rank 0 or overwritten by its rank.
// Every file is written atomically (temp + rename). Waits are bounded (timeout_s): the error names
// the rank, the directory and the ranks that did not show up.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/core/error.h"

namespace llmc {

struct RendezvousOptions {
    std::string dir;         // shared directory
    std::string job;         // run name inside it ("" = from Slurm's environment, else "run")
    double timeout_s = 300;  // give up after this long without completing
    int poll_ms = 50;
};

inline std::string rendezvous_job_from_env() {
    const char* job = std::getenv("SLURM_JOB_ID");
    const char* step = std::getenv("SLURM_STEP_ID");
    return job ? std::string(job) + "." + (step ? step : "0") : "run";
}

namespace rdv_detail {

constexpr uint64_t kMagic = 0x31564452434D4C4CULL;  // "LLMCRDV1"

inline bool read_all(const std::string& path, std::vector<char>& out) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    out.clear();
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
    std::fclose(f);
    return true;
}
inline bool read_u64(const std::string& path, uint64_t& v) {
    std::vector<char> b;
    if (!read_all(path, b) || b.size() != 8) return false;
    std::memcpy(&v, b.data(), 8);
    return true;
}
inline void write_u64(const std::string& path, uint64_t v) { write_file_atomic(path, &v, sizeof v); }

// id file: magic, world, payload size, payload, nonce of ranks 1..world-1
inline std::vector<char> encode_id(int world, const std::vector<char>& payload, const std::vector<uint64_t>& nonces) {
    std::vector<char> b(8 + 8 + 8 + payload.size() + 8 * nonces.size());
    uint64_t h[3] = {kMagic, (uint64_t)world, (uint64_t)payload.size()};
    std::memcpy(b.data(), h, sizeof h);
    std::memcpy(b.data() + 24, payload.data(), payload.size());
    std::memcpy(b.data() + 24 + payload.size(), nonces.data(), 8 * nonces.size());
    return b;
}
// True (and the payload) when b is a complete id file of this world carrying `nonce` for `rank`.
inline bool decode_id(const std::vector<char>& b, int world, int rank, uint64_t nonce, std::vector<char>& payload) {
    if (b.size() < 24) return false;
    uint64_t h[3];
    std::memcpy(h, b.data(), sizeof h);
    if (h[0] != kMagic || h[1] != (uint64_t)world || h[2] > b.size()) return false;
    const size_t n = (size_t)h[2];
    if (b.size() != 24 + n + 8 * (size_t)(world - 1)) return false;
    uint64_t mine;
    std::memcpy(&mine, b.data() + 24 + n + 8 * (size_t)(rank - 1), 8);
    if (mine != nonce) return false;
    payload.assign(b.begin() + 24, b.begin() + 24 + (long)n);
    return true;
}

inline uint64_t fresh_nonce(int rank) {
    std::random_device rd;
    const uint64_t t = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    uint64_t x =
        ((uint64_t)rd() << 32) ^ rd() ^ (t * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)::getpid() << 20) ^ (uint64_t)rank;
    return x ? x : 1;
}

}  // namespace rdv_detail

// Rank 0 passes its bytes in `payload`; every rank gets rank 0's bytes back. Throws InputError on
// a timeout or an unusable directory.
inline std::vector<char> rendezvous_exchange(const RendezvousOptions& opt, int rank, int world,
                                             const std::vector<char>& payload) {
    using namespace rdv_detail;
    if (world < 1 || rank < 0 || rank >= world)
        throw InputError("--rendezvous: rank " + std::to_string(rank) + " of " + std::to_string(world) +
                         " is out of range");
    if (world == 1) return payload;
    const std::string job = opt.job.empty() ? rendezvous_job_from_env() : opt.job;
    const std::string base = opt.dir + "/rdv_" + job + "_";
    const std::string id_path = base + "id";
    auto join_path = [&](int r) { return base + "join_" + std::to_string(r); };
    auto ack_path = [&](int r) { return base + "ack_" + std::to_string(r); };
    const auto t0 = std::chrono::steady_clock::now();
    auto timed_out = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > opt.timeout_s;
    };
    auto nap = [&] { std::this_thread::sleep_for(std::chrono::milliseconds(opt.poll_ms)); };
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", opt.timeout_s);

    if (rank == 0) {
        std::remove(id_path.c_str());
        for (int r = 1; r < world; r++) {
            std::remove(join_path(r).c_str());
            std::remove(ack_path(r).c_str());
        }
        std::vector<uint64_t> written;  // the nonces in the id file now (empty: none written)
        for (;;) {
            std::vector<uint64_t> joined(world - 1, 0);
            bool all = true;
            for (int r = 1; r < world; r++) all &= read_u64(join_path(r), joined[r - 1]);
            if (all && joined != written) {
                const std::vector<char> b = encode_id(world, payload, joined);
                write_file_atomic(id_path, b.data(), b.size());
                written = joined;
            }
            if (!written.empty()) {
                bool acked = true;
                for (int r = 1; r < world && acked; r++) {
                    uint64_t a = 0;
                    acked = read_u64(ack_path(r), a) && a == written[r - 1];
                }
                if (acked) break;
            }
            if (timed_out()) {
                std::string missing;
                for (int r = 1; r < world; r++) {
                    uint64_t a = 0;
                    if (!(read_u64(ack_path(r), a) && !written.empty() && a == written[r - 1]))
                        missing += " " + std::to_string(r);
                }
                throw InputError("--rendezvous: rank 0 waited " + std::string(secs) + " s in " + opt.dir +
                                 " for ranks" + missing +
                                 "; start every rank with the same --rendezvous directory "
                                 "(one all ranks see) and world size");
            }
            nap();
        }
        std::remove(id_path.c_str());
        for (int r = 1; r < world; r++) {
            std::remove(join_path(r).c_str());
            std::remove(ack_path(r).c_str());
        }
        return payload;
    }

    const uint64_t nonce = fresh_nonce(rank);
    std::vector<char> b, out;
    for (;;) {
        uint64_t j = 0;
        if (!read_u64(join_path(rank), j) || j != nonce) write_u64(join_path(rank), nonce);
        if (read_all(id_path, b) && decode_id(b, world, rank, nonce, out)) {
            write_u64(ack_path(rank), nonce);
            return out;
        }
        if (timed_out())
            throw InputError("--rendezvous: rank " + std::to_string(rank) + " waited " + std::string(secs) + " s in " +
                             opt.dir +
                             " for rank 0 of this run; start rank 0 with the same --rendezvous directory "
                             "(one all ranks see) and world size");
        nap();
    }
}

}  // namespace llmc
