// libFuzzer harness: the checkpoint directory (llmc/io/checkpoint_dir.h) over whatever names a user's
// output directory may hold: parse_checkpoint_name, complete_steps, then prune_checkpoints with the
// `keep`, just-written step and pinned steps the input picks. The input: byte 0 = keep (0..7),
// byte 1 picks the protected step, byte 2 the pinned one, then one file name per line (names with
// '/' or NUL, "." and "..", names over 200 bytes are skipped; at most 64), each made an empty file in
// a fresh directory. What must hold after pruning (docs/reliability.md): nothing but checkpoint files
// is deleted; the newest complete step, anything newer, the protected and pinned steps and the newest
// `keep` other complete steps keep their marker and all their files; every other checkpoint file
// (older steps, unfinished saves, temporaries) is gone when keep > 0; the temporaries of steps up to
// the newest complete one are gone whatever `keep`; any step still marked complete has all the
// (non-temporary) files it had.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "llmc/io/checkpoint_dir.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

bool is_marker(const std::string& name) {
    int step;
    return parse_checkpoint_name(name, step) == CkptFileKind::Done && name.find(".tmp.") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempDir dir("checkpoint_dir");
    if (size < 3) return 0;
    const int keep = data[0] % 8;
    dir.clear();
    std::string text(reinterpret_cast<const char*>(data + 3), size - 3);
    size_t pos = 0, made = 0;
    while (pos <= text.size() && made < 64) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        const std::string name = text.substr(pos, end - pos);
        pos = end + 1;
        if (name.empty() || name == "." || name == ".." || name.size() > 200 ||
            name.find_first_of(std::string("/\0", 2)) != std::string::npos)
            continue;
        dir.put(name, "", 0);
        made++;
    }
    const std::set<std::string> before = dir.names();
    // every name: a kind, and a step >= 0 exactly when it is a checkpoint name; our own names parse back
    std::vector<std::pair<std::string, int>> ckpt_files;  // (name, step) of every checkpoint-named file
    for (const std::string& n : before) {
        int step = -2;
        const CkptFileKind kind = parse_checkpoint_name(n, step);
        FUZZ_CHECK((kind == CkptFileKind::None) == (step == -1));
        if (kind != CkptFileKind::None) ckpt_files.push_back({n, step});
        if (kind != CkptFileKind::None) {
            int again = -2;
            FUZZ_CHECK(parse_checkpoint_name(model_path("", step), again) == CkptFileKind::Model && again == step);
            FUZZ_CHECK(parse_checkpoint_name(state_path("", step, step % 100000), again) == CkptFileKind::State &&
                       again == step);
            FUZZ_CHECK(parse_checkpoint_name(done_path("", step), again) == CkptFileKind::Done && again == step);
        }
    }
    const std::vector<int> complete = complete_steps(dir.path());
    FUZZ_CHECK(std::is_sorted(complete.begin(), complete.end()));
    FUZZ_CHECK(std::adjacent_find(complete.begin(), complete.end()) == complete.end());  // each step once
    const int protect = complete.empty() || data[1] == 0 ? -1 : complete[data[1] % complete.size()];
    const std::vector<int> pinned =
        complete.empty() || data[2] == 0 ? std::vector<int>{} : std::vector<int>{complete[data[2] % complete.size()]};

    prune_checkpoints(dir.path(), keep, protect, pinned);

    const std::set<std::string> after = dir.names();
    auto step_of = [](const std::string& n) {  // -1: not a checkpoint name
        int s = -1;
        parse_checkpoint_name(n, s);
        return s;
    };
    // kept steps: protected, pinned, >= the newest complete one, and the newest `keep` others
    std::set<int> must_keep(pinned.begin(), pinned.end());
    if (protect >= 0) must_keep.insert(protect);
    std::vector<int> others;
    for (int s : complete)
        if (std::find(pinned.begin(), pinned.end(), s) == pinned.end()) others.push_back(s);
    for (size_t i = others.size() > (size_t)keep ? others.size() - (size_t)keep : 0; i < others.size(); i++)
        must_keep.insert(others[i]);
    for (const std::string& n : before) {
        const int step = step_of(n);
        // (with no complete step everything is newer than the newest: a first save in progress)
        const bool temporary = step >= 0 && n.find(".tmp.") != std::string::npos;
        const bool kept = temporary ? complete.empty() || step > complete.back()
                                    : step < 0 || keep <= 0 || must_keep.count(step) == 1 || complete.empty() ||
                                          step >= complete.back();
        // only checkpoint files go, only when pruning, and then every one not kept
        FUZZ_CHECK(after.count(n) == (kept ? 1u : 0u));
    }
    for (const std::string& n : after) {
        FUZZ_CHECK(before.count(n) == 1);
        if (!is_marker(n)) continue;  // a step still marked complete keeps every file it had
        for (const auto& f : ckpt_files)
            if (f.second == step_of(n) && f.first.find(".tmp.") == std::string::npos)
                FUZZ_CHECK(after.count(f.first) == 1);
    }
    return 0;
}
