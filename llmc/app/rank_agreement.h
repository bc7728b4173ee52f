// The processes of one run must run one experiment: the same settings and the same data on every rank.
// A launch that gives them different flags (mpirun's `A : B`, a node-local --config file) or different
// data behind one path (node-local disks) would otherwise train silently on a mix (another -l on one
// rank: the replicas drift apart), hang in a collective (another -x) or fail at the first checkpoint
// (another -o). Checked once the flags are parsed, before the run reads its data or writes anything, on
// every rank alike: when some rank's hash differs from rank 0's, every rank throws the same
// InputErrorOnEveryRank, naming the lowest such rank and, for the settings, the first flag (in the flag
// table's order) that differs.
//
// Rules:
//   - Every call is collective: all ranks call it at the same point with the same kind of input.
//   - The settings are the run's flags as config_file_text() writes them (every flag but the machine's,
//     --device, --threads, --cuda-graph and --pdl, and the launch flags) plus --fork-from. --device must
//     resolve to one kind on every rank: it picks the collective these checks run on.
//   - One process: no check, no collective.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <system_error>
#include <string>
#include <utility>
#include <vector>

#include "llmc/app/run_record.h"
#include "llmc/core/error.h"
#include "llmc/dist/collective.h"
#include "llmc/io/checkpoint.h"
#include "llmc/io/data_identity.h"

namespace llmc {

// (lowest rank whose hash differs from rank 0's, how many differ); (-1, 0) when all agree: the smallest
// and the largest of each 32-bit half equal (4 reductions; every rank gets the same results, so every rank
// takes the same branch). Then rank 0's hash, sent as a Sum that only rank 0 adds to.
inline std::pair<int, int> ranks_differing_from_rank0(Collective& comm, uint64_t hash) {
    const bool root = comm.rank() == 0;
    const long long hi = (long long)(hash >> 32), lo = (long long)(hash & 0xffffffffULL);
    const long long hi_min = comm.all_reduce_int(hi, ReduceOp::Min), hi_max = comm.all_reduce_int(hi, ReduceOp::Max);
    const long long lo_min = comm.all_reduce_int(lo, ReduceOp::Min), lo_max = comm.all_reduce_int(lo, ReduceOp::Max);
    if (hi_min == hi_max && lo_min == lo_max) return {-1, 0};
    const long long root_hi = comm.all_reduce_int(root ? hi : 0, ReduceOp::Sum);  // rank 0's, on every rank
    const long long root_lo = comm.all_reduce_int(root ? lo : 0, ReduceOp::Sum);
    const bool differs = hi != root_hi || lo != root_lo;
    const long long count = comm.all_reduce_int(differs ? 1 : 0, ReduceOp::Sum);
    if (count == 0) return {-1, 0};
    const long long first = comm.all_reduce_int(differs ? comm.rank() : comm.world_size(), ReduceOp::Min);
    return {(int)first, (int)count};
}

inline uint64_t text_hash(const std::string& s) { return fnv1a64(s.data(), s.size()); }

// config_text: TrainCli::config_file_text() ("key=value" lines); fork_from: --fork-from's value.
inline void check_ranks_share_settings(Collective& comm, const std::string& config_text, const std::string& fork_from) {
    if (comm.world_size() == 1) return;
    std::map<std::string, std::string> value;  // long name -> its line's value text
    size_t pos = 0;
    while (pos < config_text.size()) {
        size_t end = config_text.find('\n', pos);
        if (end == std::string::npos) end = config_text.size();
        const std::string line = config_text.substr(pos, end - pos);
        const size_t eq = line.find('=');
        if (eq != std::string::npos) value[line.substr(0, eq)] = line.substr(eq + 1);
        pos = end + 1;
    }
    value["fork-from"] = fork_from;
    const std::vector<std::string> names = table_flag_names();
    std::string all;
    for (const std::string& n : names) all += n + "=" + value[n] + "\n";
    const auto [rank, count] = ranks_differing_from_rank0(comm, text_hash(all));
    if (count == 0) return;
    std::string flag;  // the first flag that differs on some rank (every rank runs the same loop)
    for (const std::string& n : names)
        if (ranks_differing_from_rank0(comm, text_hash(value[n])).second > 0) {
            flag = "--" + n;
            break;
        }
    const std::string world = std::to_string(comm.world_size());
    throw InputErrorOnEveryRank(
        "the processes of this run were started with different settings: rank " + std::to_string(rank) + "'s " +
        (flag.empty() ? "flags differ" : flag + " differs") + " from rank 0's (" + std::to_string(count) + " of " +
        world + " ranks differ); start every process with the same flags and --config file, e.g. mpirun -np " + world +
        " ./train_gpt2_ls FLAGS");
}

// What a rank finds behind a shard glob: each shard's path and size, and the content hash its data set's
// meta.json gives ("" when it lists none).
inline std::string shards_identity(const std::vector<std::string>& paths) {
    std::string out;
    for (const std::string& p : paths) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(p, ec);
        out += p + " " + (ec ? std::string("?") : std::to_string(size)) + "\n";
    }
    return out + "content " + shards_content_hash(paths) + "\n";
}

// role: "training data -i 'GLOB'" or "validation data -j 'GLOB'"; identity: what this rank found there
// (its shards' names and sizes, the content hash its meta.json gives).
inline void check_ranks_share_data(Collective& comm, const std::string& role, const std::string& identity) {
    if (comm.world_size() == 1) return;
    const auto [rank, count] = ranks_differing_from_rank0(comm, text_hash(identity));
    if (count == 0) return;
    throw InputErrorOnEveryRank(
        "the processes of this run read different " + role + ": rank " + std::to_string(rank) +
        " finds other shards there than rank 0 (their names, sizes or content; " + std::to_string(count) + " of " +
        std::to_string(comm.world_size()) +
        " ranks differ); give every process the same data (a shared file system, or identical copies)");
}

}  // namespace llmc
