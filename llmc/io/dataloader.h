// B x T batches of next-token training data from a glob of token shards (llmc/io/shard.h).
// Semantics (docs/dataloader.md has the full description):
//   - The shards matching the glob, sorted by name, are one token sequence per epoch (with
//     shuffle, concatenated in a per-epoch permuted order). It is cut into W = (N - 1) / (B*T)
//     windows of B*T + 1 tokens; window w starts at token w*B*T, so consecutive windows share one
//     token (the last target of one is the first input of the next), exactly as llm.c.
//     Windows run across shard boundaries; the tail of fewer than B*T + 1 tokens is not used.
//   - The epoch's window order: windows grouped by the shard position their first token lies in,
//     in shard order; with shuffle, each group is permuted. After the last batch of the epoch
//     the next epoch starts (with shuffle, new permutations derived from seed and epoch).
//   - Several processes (rank r of n), two ways to split (RankSplit):
//       Interleave (llm.c's): windows of B*T + 1 tokens; rank r takes the items r, r+n, r+2n, ...
//         of the order; every rank takes batches_per_epoch = W / n of them (the last W mod n
//         windows are skipped) so ranks stay in step.
//       Rows (what the trainer uses): the window is the GLOBAL batch, n*B*T + 1 tokens
//         (W = (N - 1) / (n*B*T)), and rank r reads rows r*B .. r*B+B-1 of it, i.e. the B*T + 1
//         tokens starting at r*B*T inside the window. So n ranks with batch B see, step by step,
//         exactly the rows (in the same order) that 1 rank with batch n*B sees, shuffled or not.
//   - Random rows (Rows only; the trainer's --sampler random): instead of windows, each row is the
//     T + 1 tokens at a random offset of the sequence (shards in path order), drawn with
//     replacement as nanoGPT's get_batch; the offset is a pure function of (seed, batch number,
//     global row), so the Rows equivalence and bit-exact resume hold. An "epoch" is still
//     batches_per_epoch batches (about N tokens).
//   - The position is (epoch, batches taken in the epoch): state()/restore() save and restore it,
//     and a restored loader yields exactly the batches an uninterrupted one would.
//   - Shard headers are read and validated up front; token contents are loaded lazily (at most
//     two shards are kept in memory; with random rows every shard, as any row may be in any), and
//     every token id is checked against the vocabulary when its shard is loaded.
#pragma once
#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "llmc/core/error.h"
#include "llmc/core/rng.h"
#include "llmc/io/shard.h"

namespace llmc {

// The one line for a shard pattern that matches a directory `dir` (GLOB_MARK's form, ending in '/'):
// -j data/x where 'data/x/val_*.bin' was meant.
inline InputError directory_match_error(const std::string& pattern, const std::string& dir) {
    return InputError("the shard pattern '" + pattern + "' matches the directory '" + dir +
                      "'; make it match shard files only, e.g. '" + dir + "train_*.bin' or '" + dir + "val_*.bin'");
}

// Refuses a shard pattern that matches a directory before anything reads a data set's identity from
// the directory above it (glob_dir of 'data/x' is 'data'): its notes and errors would be about that
// directory. The data loader refuses the same pattern with the same line (DataLoader::glob_paths).
inline void refuse_directory_match(const std::string& pattern) {
    glob_t g;
    std::string dir;
    if (glob(pattern.c_str(), GLOB_MARK, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc && dir.empty(); i++) {
            const std::string match = g.gl_pathv[i];
            if (!match.empty() && match.back() == '/') dir = match;
        }
    globfree(&g);
    if (!dir.empty()) throw directory_match_error(pattern, dir);
}

// The directory of the data set a shard glob reads: where its meta.json and tokenizer.bin are.
//   - a directory part without wildcards is that directory ("." when the pattern has none);
//   - a directory part with wildcards (data/*_sp/train_*.bin) is the one directory all its matches
//     are in; matches in several directories are refused (one glob reads one data set: one
//     tokenizer, one identity in the run's record; docs/training.md "One data set per glob");
//   - a pattern that matches nothing gives its directory part as written (the data loader then
//     names the missing files).
inline std::string glob_dir(const std::string& pattern) {
    const size_t slash = pattern.find_last_of('/');
    if (slash == std::string::npos) return ".";
    const std::string written = slash == 0 ? "/" : pattern.substr(0, slash);
    if (written.find_first_of("*?[") == std::string::npos) return written;
    std::set<std::string> dirs;
    glob_t g;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const std::string match = g.gl_pathv[i];
            const size_t end = match.find_last_of('/');
            dirs.insert(end == 0 ? "/" : match.substr(0, end));
        }
    }
    globfree(&g);
    if (dirs.empty()) return written;
    if (dirs.size() > 1) {
        std::string names;
        for (const std::string& d : dirs) names += (names.empty() ? "" : ", ") + d;
        throw InputError("the shard pattern '" + pattern + "' matches shards in " + std::to_string(dirs.size()) +
                         " directories (" + names +
                         "): a glob reads one data set (one meta.json and tokenizer); give one directory, e.g. '" +
                         *dirs.begin() + pattern.substr(slash) + "'");
    }
    return *dirs.begin();
}

// Whether the shard pattern matches any path (the data loader's error names one that matches none).
inline bool shard_pattern_matches(const std::string& pattern) {
    glob_t g;
    const int rc = glob(pattern.c_str(), 0, nullptr, &g);
    const bool any = rc == 0 && g.gl_pathc > 0;
    globfree(&g);
    return any;
}

// The loader's position plus a fingerprint of the loader that produced it; restore() refuses
// a state from a loader with a different batch shape, process count, shuffle, seed or data.
// How ranks divide the data (see the comment at the top of this file).
enum class RankSplit { Interleave, Rows };

struct LoaderState {
    int64_t epoch = 0;  // epochs completed
    int64_t batch = 0;  // batches this rank has taken in the current epoch
    int64_t B = 0, T = 0, world_size = 0, shuffle = 0, seed = 0;
    int64_t total_tokens = 0, num_shards = 0;

    static constexpr int64_t kTag = 0x4C4F4144;  // "LOAD": version 1 of this layout
    static constexpr size_t kSize = 10;

    std::vector<int64_t> to_vector() const {
        return {kTag, epoch, batch, B, T, world_size, shuffle, seed, total_tokens, num_shards};
    }
    static LoaderState from_vector(const std::vector<int64_t>& v) {
        if (v.size() != kSize || v[0] != kTag) {
            throw InputError("data-loader state has " + std::to_string(v.size()) + " values" +
                             (v.empty() ? std::string() : " and tag " + std::to_string(v[0])) + " (expected " +
                             std::to_string(kSize) + " values, tag " + std::to_string(kTag) +
                             "); the training-state file is corrupt or from another version, start a fresh run");
        }
        LoaderState s;
        s.epoch = v[1];
        s.batch = v[2];
        s.B = v[3];
        s.T = v[4];
        s.world_size = v[5];
        s.shuffle = v[6];
        s.seed = v[7];
        s.total_tokens = v[8];
        s.num_shards = v[9];
        return s;
    }
};

class DataLoader {
public:
    // random_rows (RankSplit::Rows only): every row from a random offset instead of windows ("Random
    // rows" in docs/dataloader.md); `shuffle` is then not used.
    DataLoader(const std::string& pattern, int B, int T, int rank, int world_size, bool shuffle, uint64_t seed,
               int vocab_size, RankSplit split = RankSplit::Interleave, bool random_rows = false)
        : pattern_(pattern),
          B_(B),
          T_(T),
          rank_(rank),
          world_(world_size),
          shuffle_(shuffle && !random_rows),
          seed_(seed),
          vocab_(vocab_size),
          rows_(split == RankSplit::Rows),
          random_(random_rows) {
        if (random_rows && split != RankSplit::Rows)
            throw std::logic_error("DataLoader: random rows need RankSplit::Rows");
        if (B <= 0 || T <= 0) {
            throw InputError("data loader: batch size B=" + std::to_string(B) +
                             " and sequence length T=" + std::to_string(T) + " must both be positive; fix -b/-t");
        }
        if (world_size <= 0 || rank < 0 || rank >= world_size) {
            throw InputError("data loader: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                             " processes is invalid (need 0 <= rank < world_size); check the MPI launch");
        }
        if (vocab_size <= 0) {
            throw InputError("data loader: vocabulary size " + std::to_string(vocab_size) +
                             " must be positive; fix --vocab");
        }
        paths_ = glob_paths(pattern);
        for (const std::string& p : paths_) {
            check_is_shard(pattern, p);
            counts_.push_back(read_shard_header(p).num_tokens);
        }
        total_ = std::accumulate(counts_.begin(), counts_.end(), (int64_t)0);
        const int64_t bt = (int64_t)B * T;
        window_tokens_ = rows_ ? bt * world_size : bt;  // tokens a window advances (plus one shared)
        windows_ = (total_ - 1) / window_tokens_;
        batches_per_epoch_ = rows_ ? windows_ : windows_ / world_size;
        if (batches_per_epoch_ < 1) {
            throw InputError("shards matching '" + pattern + "' hold " + std::to_string(total_) + " tokens in " +
                             std::to_string(paths_.size()) +
                             " file(s), too few for one window of B*T+1 = " + std::to_string(bt + 1) +
                             " tokens for each of " + std::to_string(world_size) + " rank(s) (need at least " +
                             std::to_string(bt * world_size + 1) + "); use a smaller -b/-t or more data");
        }
        window_buf_.resize((size_t)(random_ ? T : bt) + 1);
    }

    // Fills inputs and targets, each (B, T) int32 row-major: targets[i] = token after inputs[i].
    void next_batch(int* inputs, int* targets) {
        const int64_t bt = (int64_t)B_ * T_;
        if (random_) {
            next_random_rows(inputs, targets);
        } else if (rows_) {  // rows r*B .. r*B+B-1 of the global window
            read_window(window_at(batch_) * window_tokens_ + (int64_t)rank_ * bt);
        } else {
            const int64_t item = rank_ + batch_ * world_;  // index into this epoch's window order
            read_window(window_at(item) * window_tokens_);
        }
        for (int64_t i = 0; !random_ && i < bt; i++) {
            inputs[i] = (int)window_buf_[(size_t)i];
            targets[i] = (int)window_buf_[(size_t)i + 1];
        }
        if (++batch_ == batches_per_epoch_) {
            batch_ = 0;
            epoch_++;
        }
    }

    // Back to the first batch of epoch 0 (used before each validation pass).
    void reset() {
        epoch_ = 0;
        batch_ = 0;
    }

    LoaderState state() const {
        LoaderState s;
        s.epoch = epoch_;
        s.batch = batch_;
        s.B = B_;
        s.T = T_;
        s.world_size = world_;
        s.shuffle = random_ ? kRandomRows : shuffle_ ? 1 : 0;
        s.seed = (int64_t)seed_;
        s.total_tokens = total_;
        s.num_shards = (int64_t)paths_.size();
        return s;
    }

    // `fork`: the state is a checkpoint's that --fork-from continues (named so in the error).
    void restore(const LoaderState& s, bool fork = false) {
        const LoaderState mine = state();
        if (s.B != mine.B || s.T != mine.T || s.world_size != mine.world_size || s.shuffle != mine.shuffle ||
            s.seed != mine.seed || s.total_tokens != mine.total_tokens || s.num_shards != mine.num_shards) {
            throw InputError(
                "data-loader state was saved by " + describe(s) + " but this loader (shards '" + pattern_ + "') has " +
                describe(mine) +
                (fork ? "; fork with the -b/-t, process count, shuffle, sampler, seed and shards of the checkpoint's "
                        "run, or start a fresh run (-e CHECKPOINT: its weights only)"
                      : "; resume with the same -b/-t, process count, shuffle, sampler, seed and shards, or start a "
                        "fresh run"));
        }
        if (s.epoch < 0 || s.batch < 0 || s.batch >= batches_per_epoch_) {
            throw InputError("data-loader state has epoch " + std::to_string(s.epoch) + " batch " +
                             std::to_string(s.batch) + " but an epoch has " + std::to_string(batches_per_epoch_) +
                             " batches; the training-state file is corrupt, start a fresh run");
        }
        epoch_ = s.epoch;
        batch_ = s.batch;
    }

    int64_t total_tokens() const { return total_; }
    size_t num_shards() const { return paths_.size(); }
    int64_t batches_per_epoch() const { return batches_per_epoch_; }
    int64_t epoch() const { return epoch_; }
    const std::vector<std::string>& shard_paths() const { return paths_; }

private:
    // A file whose first 4 bytes are not a shard's magic, matched by a wildcard pattern, is another kind
    // of file the glob caught (DIR/*.bin and DIR/tokenizer.bin): refused naming the pattern, not the file.
    static void check_is_shard(const std::string& pattern, const std::string& path) {
        if (pattern.find_first_of("*?[") == std::string::npos) return;  // a file named on its own: its header
        std::FILE* f = std::fopen(path.c_str(), "rb");
        if (f == nullptr) return;  // read_shard_header names the error
        int32_t magic = 0;
        const bool read = std::fread(&magic, 4, 1, f) == 1;
        std::fclose(f);
        if (!read || magic == kShardMagic) return;
        throw InputError("the shard pattern '" + pattern + "' matches " + path +
                         ", which is not a token shard (bad magic " + std::to_string(magic) +
                         " at byte offset 0, a shard's is " + std::to_string(kShardMagic) + "): " +
                         (pattern == glob_dir(pattern) + "/train_*.bin" || pattern == glob_dir(pattern) + "/val_*.bin"
                              ? "a damaged shard: regenerate it with data/prepare.py"
                              : "give a pattern that matches only the shards, e.g. '" + glob_dir(pattern) +
                                    "/train_*.bin' (a damaged shard: regenerate it with data/prepare.py)"));
    }

    static std::vector<std::string> glob_paths(const std::string& pattern) {
        glob_t g;
        const int rc = glob(pattern.c_str(), GLOB_MARK, nullptr, &g);  // GLOB_MARK: dirs end in '/'
        std::vector<std::string> paths;
        if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
        globfree(&g);
        if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
            // a relative pattern is read from the current directory: name the path looked for
            const std::string where =
                !pattern.empty() && pattern[0] != '/'
                    ? " (relative to the current directory: " + (std::filesystem::current_path() / pattern).string() +
                          ")"
                    : "";
            throw InputError(
                "no files match the shard pattern '" + pattern + "'" + where +
                "; check -i/-j or create the shards with python3 data/prepare.py (e.g. make data-tinyshakespeare)");
        }
        if (rc != 0)
            throw InputError("cannot read the files matching '" + pattern + "' (glob error); check the pattern");
        for (const std::string& p : paths)
            if (!p.empty() && p.back() == '/') throw directory_match_error(pattern, p);
        std::sort(paths.begin(), paths.end());
        return paths;
    }

    static std::string describe(const LoaderState& s) {
        return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " processes=" + std::to_string(s.world_size) +
               (s.shuffle == kRandomRows ? std::string(" sampler=random") : " shuffle=" + std::to_string(s.shuffle)) +
               " seed=" + std::to_string((uint64_t)s.seed) + " over " + std::to_string(s.total_tokens) + " tokens in " +
               std::to_string(s.num_shards) + " shard(s)";
    }

    // splitmix64 finalizer: turns (seed, epoch, shard) into independent RNG seeds.
    static uint64_t mix(uint64_t a, uint64_t b) {
        uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }

    template <typename V>
    static void shuffle_in_place(V& v, uint64_t seed) {  // Fisher-Yates
        Rng rng(seed);
        for (size_t i = v.size(); i > 1; i--) std::swap(v[i - 1], v[(size_t)rng.below(i)]);
    }

    // Shard order, token offsets and window groups of epoch `layout_epoch_` (recomputed per epoch).
    void ensure_layout() {
        if (layout_epoch_ == epoch_) return;
        const size_t S = paths_.size();
        const int64_t bt = window_tokens_;
        order_.resize(S);
        std::iota(order_.begin(), order_.end(), 0);
        if (shuffle_) shuffle_in_place(order_, mix(seed_, (uint64_t)epoch_));
        offsets_.assign(S + 1, 0);
        first_window_.assign(S + 1, windows_);
        for (size_t p = 0; p < S; p++) {
            offsets_[p + 1] = offsets_[p] + counts_[(size_t)order_[p]];
            first_window_[p] = std::min(windows_, (offsets_[p] + bt - 1) / bt);  // first w with w*bt >= offset
        }
        layout_epoch_ = epoch_;
        perm_group_ = -1;
    }

    // Random rows: row g = rank*B + b (of the world's n*B rows) of batch k = epoch*batches_per_epoch +
    // batch is the T+1 tokens of the sequence (shards in path order) from offset
    // mix(mix(seed ^ kRandomSalt, k), g) mod (N - T): drawn with replacement, a pure function of
    // (seed, k, g), so n processes x B rows are 1 process x n*B rows and a resumed loader continues.
    void next_random_rows(int* inputs, int* targets) {
        const int64_t k = epoch_ * batches_per_epoch_ + batch_;
        const uint64_t span = (uint64_t)(total_ - T_);  // offsets 0 .. N-T-1: the row's T+1 tokens fit
        for (int b = 0; b < B_; b++) {
            const uint64_t g = (uint64_t)rank_ * (uint64_t)B_ + (uint64_t)b;
            read_window((int64_t)(mix(mix(seed_ ^ kRandomSalt, (uint64_t)k), g) % span));
            for (int i = 0; i < T_; i++) {
                inputs[(size_t)b * T_ + i] = (int)window_buf_[(size_t)i];
                targets[(size_t)b * T_ + i] = (int)window_buf_[(size_t)i + 1];
            }
        }
    }

    // Window id (its start is id * window_tokens_) of item `item` in this epoch's window order.
    int64_t window_at(int64_t item) {
        ensure_layout();
        if (!shuffle_) return item;
        // The group (shard position) holding item: the last p with first_window_[p] <= item.
        const int64_t p =
            (int64_t)(std::upper_bound(first_window_.begin(), first_window_.end(), item) - first_window_.begin()) - 1;
        if (p != perm_group_) {
            perm_.resize((size_t)(first_window_[(size_t)p + 1] - first_window_[(size_t)p]));
            std::iota(perm_.begin(), perm_.end(), (int64_t)0);
            shuffle_in_place(perm_, mix(mix(seed_, (uint64_t)epoch_), 0x5EED0000ull + (uint64_t)order_[(size_t)p]));
            perm_group_ = p;
        }
        return first_window_[(size_t)p] + perm_[(size_t)(item - first_window_[(size_t)p])];
    }

    // Copies the window_buf_.size() tokens (B*T + 1, or T + 1 for random rows) starting at `start` of
    // this epoch's sequence into window_buf_.
    void read_window(int64_t start) {
        ensure_layout();
        size_t filled = 0;
        size_t p = (size_t)(std::upper_bound(offsets_.begin(), offsets_.end(), start) - offsets_.begin()) - 1;
        int64_t local = start - offsets_[p];
        while (filled < window_buf_.size()) {
            const std::vector<uint32_t>& toks = shard(order_[p]);
            const size_t n = std::min(window_buf_.size() - filled, toks.size() - (size_t)local);
            std::copy(toks.begin() + local, toks.begin() + local + (int64_t)n, window_buf_.begin() + (int64_t)filled);
            filled += n;
            p++;
            local = 0;
        }
    }

    // Tokens of shard file `f`, loaded (and validated against the vocabulary) on first use;
    // the two most recently used shards stay in memory.
    const std::vector<uint32_t>& shard(int f) {
        for (size_t i = 0; i < cache_.size(); i++) {
            if (cache_[i].first == f) {
                if (i != 0) std::swap(cache_[0], cache_[i]);
                return cache_[0].second;
            }
        }
        std::vector<uint32_t> toks = read_shard_tokens(paths_[(size_t)f], vocab_);
        if ((int64_t)toks.size() != counts_[(size_t)f]) {
            throw InputError("shard '" + paths_[(size_t)f] + "' changed while training (" +
                             std::to_string(toks.size()) + " tokens, was " + std::to_string(counts_[(size_t)f]) +
                             "); do not rewrite shards during a run");
        }
        if (cache_.size() == (random_ ? paths_.size() : 2)) cache_.pop_back();  // random rows: every shard
        cache_.insert(cache_.begin(), {f, std::move(toks)});
        return cache_[0].second;
    }

    // configuration
    std::string pattern_;
    int B_, T_, rank_, world_;
    bool shuffle_;
    uint64_t seed_;
    int vocab_;
    bool rows_;                                                     // RankSplit::Rows
    bool random_;                                                   // random rows (shuffle_ is then false)
    static constexpr int64_t kRandomRows = 2;                       // LoaderState::shuffle of random rows
    static constexpr uint64_t kRandomSalt = 0x52414E44524F5753ull;  // "RANDROWS": offsets apart from shuffles
    // shards (sorted by path) and derived sizes
    std::vector<std::string> paths_;
    std::vector<int64_t> counts_;    // tokens per shard file
    int64_t total_ = 0;              // tokens in all shards
    int64_t window_tokens_ = 0;      // B*T (Interleave) or world*B*T (Rows)
    int64_t windows_ = 0;            // W = (total - 1) / window_tokens_ windows per epoch
    int64_t batches_per_epoch_ = 0;  // W / world_size (Interleave) or W (Rows)
    // position (all that state() saves)
    int64_t epoch_ = 0, batch_ = 0;
    // caches derived from the position
    int64_t layout_epoch_ = -1;
    std::vector<int> order_;             // (S,) shard file index at each position of this epoch
    std::vector<int64_t> offsets_;       // (S+1,) first token of each position in the epoch sequence
    std::vector<int64_t> first_window_;  // (S+1,) first window starting at or after offsets_[p]
    int64_t perm_group_ = -1;
    std::vector<int64_t> perm_;                                 // window permutation of group perm_group_
    std::vector<std::pair<int, std::vector<uint32_t>>> cache_;  // most recently used first
    std::vector<uint32_t> window_buf_;                          // (B*T + 1,)
};

}  // namespace llmc
