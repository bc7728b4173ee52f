// The role of every shard a run reads, training or validation (docs/training.md "Data roles"):
//   - a shard whose directory has a meta.json with a "shards" object (data/prepare.py writes
//     {"train": [names], "val": [names]}) has the role of the list naming it; a shard that no list
//     names is not part of that data set and is refused;
//   - otherwise the role comes from the file name: a word "train" (train_000000.bin, llm.c's
//     fineweb_train_000001.bin) is training, "val", "valid", "validation", "test" or "eval" is
//     validation (words split at anything but letters and digits); neither or both: unknown.
// The rules a training run keeps: -i reads only training shards, -j only validation shards, no
// file is read by both nor a validation shard holds a training shard's bytes, and every shard of the role that a meta.json beside them lists is there; a shard of unknown role is read with one note on stderr per glob.
// --eval-only may read training shards (a loss on tokens the model trained on), said on stderr.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/core/error.h"

namespace llmc {

enum class ShardRole { Train, Val, Unlisted, Unknown };

inline const char* role_name(ShardRole r) {
    switch (r) {
        case ShardRole::Train: return "training";
        case ShardRole::Val: return "validation";
        case ShardRole::Unlisted: return "unlisted";
        default: return "unknown";
    }
}

struct ShardRoleOf {
    ShardRole role = ShardRole::Unknown;
    std::string source;  // "DIR/meta.json" when its "shards" lists decided, "its name" otherwise
};

// The role a file name states: train / val words of the name without its extension.
inline ShardRole role_from_name(const std::string& path) {
    const std::string stem = std::filesystem::path(path).stem().string();
    bool train = false, val = false;
    std::string word;
    for (size_t i = 0; i <= stem.size(); i++) {
        const char c = i < stem.size() ? stem[i] : '_';
        if (std::isalnum((unsigned char)c)) {
            word += (char)std::tolower((unsigned char)c);
            continue;
        }
        train = train || word == "train";
        val = val || word == "val" || word == "valid" || word == "validation" || word == "test" || word == "eval";
        word.clear();
    }
    return train == val ? ShardRole::Unknown : train ? ShardRole::Train : ShardRole::Val;
}

// Reads the "shards" lists of the meta.json files of the directories it is asked about, once each.
class ShardRoles {
public:
    ShardRoleOf of(const std::string& path) {
        const std::filesystem::path p(path);
        const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
        const Lists& lists = lists_of(dir);
        const std::string name = p.filename().string();
        if (!lists.known) return {role_from_name(path), "its name"};
        const auto named = [&](const std::vector<std::string>& v) {
            for (const std::string& n : v)
                if (n == name) return true;
            return false;
        };
        const std::string meta = dir + "/meta.json";
        if (named(lists.train)) return {ShardRole::Train, meta};
        if (named(lists.val)) return {ShardRole::Val, meta};
        return {ShardRole::Unlisted, meta};
    }

    // The shards of role `want` (Train or Val) that the meta.json beside `path` lists and that are not
    // files there (an interrupted copy, a deleted shard), and how many it lists of that role.
    std::vector<std::string> missing_listed(const std::string& path, ShardRole want, size_t* listed) {
        const std::filesystem::path p(path);
        const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
        const Lists& lists = lists_of(dir);
        const std::vector<std::string>& names = want == ShardRole::Train ? lists.train : lists.val;
        *listed = names.size();
        std::vector<std::string> out;
        for (const std::string& n : names) {
            std::error_code ec;
            if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / n, ec)) out.push_back(n);
        }
        return out;
    }

private:
    struct Lists {
        bool known = false;  // meta.json has a "shards" object
        std::vector<std::string> train, val;
    };
    std::map<std::string, Lists> dirs_;

    const Lists& lists_of(const std::string& dir) {
        const auto hit = dirs_.find(dir);
        if (hit != dirs_.end()) return hit->second;
        Lists& l = dirs_[dir];
        std::ifstream in(dir + "/meta.json");
        if (!in) return l;
        const auto j = nlohmann::ordered_json::parse(in, nullptr, false);
        if (!j.is_object() || !j.contains("shards") || !j["shards"].is_object()) return l;
        const auto names = [&](const char* key, std::vector<std::string>& out) {
            const auto it = j["shards"].find(key);
            if (it == j["shards"].end() || !it->is_array()) return;
            for (const auto& n : *it)
                if (n.is_string()) out.push_back(n.get<std::string>());
        };
        names("train", l.train);
        names("val", l.val);
        l.known = true;
        return l;
    }
};

// Checks that the shards `paths` matched by `what` (e.g. "-i 'data/x/*.bin'") all have the role
// `want` (Train or Val). A shard of the other role is refused when `refuse_other_role` (a training
// run), else (--eval-only reading training shards) said in one note; an unlisted shard is always
// refused; shards of unknown role get one note. Notes only when print_notes. A meta.json that decided
// a role and lists shards of `want` that are not in its directory is refused (a partial data set).
inline void check_shard_roles(const std::vector<std::string>& paths, ShardRole want, const std::string& what,
                              bool refuse_other_role, bool print_notes) {
    ShardRoles roles;
    const std::string want_name = role_name(want);
    std::vector<std::string> unknown, other;
    for (const std::string& path : paths) {
        const ShardRoleOf r = roles.of(path);
        if (r.role == ShardRole::Unlisted)
            throw InputError(what + " matches " + path + ", which " + r.source +
                             " does not list among its shards: it is not part of that data set; remove it, or "
                             "regenerate the data set with data/prepare.py");
        if (r.role == ShardRole::Unknown) unknown.push_back(path);
        if (r.role == want || r.role == ShardRole::Unknown) continue;
        const std::string why = r.source == "its name" ? "by its name" : "in " + r.source;
        if (refuse_other_role)
            throw InputError(what + " matches " + path + ", a " + role_name(r.role) + " shard (" + why + "); " +
                             (want == ShardRole::Train ? "training on validation data makes the validation loss "
                                                         "meaningless: give -i a pattern of the training shards only "
                                                         "(e.g. DIR/train_*.bin)"
                                                       : "a validation loss on training data measures memory, not "
                                                         "generalization: give -j a pattern of the validation shards "
                                                         "only (e.g. DIR/val_*.bin)"));
        if (other.empty()) other.push_back(path + " (" + why + ")");
    }
    std::vector<std::string> checked_dirs;  // a data set read in part: every shard its meta.json lists is there
    for (const std::string& path : paths) {
        const ShardRoleOf r = roles.of(path);
        if (r.role != want || r.source == "its name") continue;
        bool seen = false;
        for (const std::string& d : checked_dirs) seen = seen || d == r.source;
        if (seen) continue;
        checked_dirs.push_back(r.source);
        size_t listed = 0;
        const std::vector<std::string> missing = roles.missing_listed(path, want, &listed);
        if (missing.empty()) continue;
        std::string names;
        for (size_t i = 0; i < missing.size() && i < 3; i++) names += (i ? ", " : "") + missing[i];
        if (missing.size() > 3) names += ", ...";
        throw InputError(what + ": " + r.source + " lists " + std::to_string(listed) + " " + want_name +
                         " shard(s) and " + std::to_string(missing.size()) + " of them are missing (" + names +
                         "): the data set is incomplete; copy it again, or regenerate it with data/prepare.py");
    }
    if (!print_notes) return;
    if (!other.empty())
        std::fprintf(stderr, "note: %s reads %s shards, e.g. %s: the loss is on tokens the model trained on\n",
                     what.c_str(), role_name(want == ShardRole::Train ? ShardRole::Val : ShardRole::Train),
                     other.front().c_str());
    if (!unknown.empty())
        std::fprintf(stderr,
                     "note: %s: the role of %zu shard(s) is not known (no meta.json \"shards\" list beside them and "
                     "no train/val in the name, e.g. %s): check that they are %s data\n",
                     what.c_str(), unknown.size(), unknown.front().c_str(), want_name.c_str());
}

// Whether two files of equal size hold the same bytes: their first and last 64 KiB first (a shard's
// header and some 32K tokens at each end: distinct shards differ there), the whole only when those match.
inline bool same_bytes_of_equal_size(const std::string& a, const std::string& b, std::uintmax_t size) {
    std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
    if (!fa || !fb) return false;
    constexpr std::uintmax_t kEnd = 64 * 1024;
    std::vector<char> x(kEnd), y(kEnd);
    auto same_at = [&](std::uintmax_t off, std::uintmax_t n) {
        fa.seekg((std::streamoff)off);
        fb.seekg((std::streamoff)off);
        fa.read(x.data(), (std::streamsize)n);
        fb.read(y.data(), (std::streamsize)n);
        return fa && fb && std::equal(x.begin(), x.begin() + (std::ptrdiff_t)n, y.begin());
    };
    const std::uintmax_t head = size < kEnd ? size : kEnd;
    if (!same_at(0, head) || !same_at(size - head, head)) return false;
    for (std::uintmax_t off = 0; off < size; off += kEnd)
        if (!same_at(off, size - off < kEnd ? size - off : kEnd)) return false;
    return true;
}

// The validation shards of data/prepare.py (regular files val_*.bin) in directory dir, sorted.
inline std::vector<std::string> val_shards_in(const std::string& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        std::error_code type_ec;
        if (name.size() > 8 && name.rfind("val_", 0) == 0 && name.compare(name.size() - 4, 4, ".bin") == 0 &&
            it->is_regular_file(type_ec))
            found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    return found;
}

// The first of `candidates` that holds the same bytes as `path` ("" when none does, or path is empty or
// unreadable): only candidates of its size are read.
inline std::string copy_among(const std::string& path, const std::vector<std::string>& candidates) {
    std::error_code ec;
    const std::uintmax_t n = std::filesystem::file_size(path, ec);
    if (ec || n == 0) return "";
    for (const std::string& c : candidates) {
        std::error_code cec;
        if (std::filesystem::file_size(c, cec) == n && !cec && same_bytes_of_equal_size(path, c, n)) return c;
    }
    return "";
}

// Whether every file of `files` (at least one) holds the same bytes as one of `originals`.
inline bool all_copies_of(const std::vector<std::string>& files, const std::vector<std::string>& originals) {
    if (files.empty()) return false;
    for (const std::string& f : files)
        if (copy_among(f, originals).empty()) return false;
    return true;
}

// Refuses a file read both as training (-i) and as validation (-j) data.
inline void check_no_shared_shard(const std::vector<std::string>& train, const std::vector<std::string>& val,
                                  const std::string& train_what, const std::string& val_what) {
    std::map<std::string, std::string> seen;
    for (const std::string& p : train) {
        std::error_code ec;
        const auto c = std::filesystem::weakly_canonical(p, ec);
        seen[ec ? p : c.string()] = p;
    }
    for (const std::string& p : val) {
        std::error_code ec;
        const auto c = std::filesystem::weakly_canonical(p, ec);
        const auto hit = seen.find(ec ? p : c.string());
        if (hit != seen.end())
            throw InputError(val_what + " and " + train_what + " both read " + p +
                             ": validation data must be held out from training; give -i and -j disjoint shards "
                             "(e.g. DIR/train_*.bin and DIR/val_*.bin)");
    }
}

// Refuses a validation shard that holds the bytes of a training shard (a copy or a hard link of it
// under a validation name): the validation loss would be a loss on training tokens. After the roles'
// checks (a copy that a meta.json does not list is refused there, as not part of the data set).
inline void check_no_copied_shard(const std::vector<std::string>& train, const std::vector<std::string>& val,
                                  const std::string& train_what, const std::string& val_what) {
    for (const std::string& p : val) {
        const std::string original = copy_among(p, train);
        if (!original.empty())
            throw InputError(val_what + " reads " + p + ", which holds the same bytes as the training shard " +
                             original + " of " + train_what +
                             ": validation data must be held out from training; give -j shards that are not "
                             "copies of -i's (e.g. DIR/val_*.bin of data/prepare.py)");
    }
}

}  // namespace llmc
