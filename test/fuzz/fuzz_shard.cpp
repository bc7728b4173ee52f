// libFuzzer harness: token shards (llmc/io/shard.h) and the data loader over them (llmc/io/dataloader.h).
// The input is the shard file. Expected: a valid result or llmc::InputError (docs/reliability.md).
#include <cstdint>
#include <vector>

#include "llmc/io/dataloader.h"
#include "llmc/io/shard.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

constexpr int kVocab = 50257;  // GPT-2's: a version-2 shard may hold larger ids (refused)

// Reads batches from a loader over the one shard: every id inside the vocabulary, targets shifted by one,
// and state()/restore() resumes at the same batch.
void exercise_loader(const std::string& path, int B, int T, int rank, int world, bool shuffle, RankSplit split) {
    DataLoader dl(path, B, T, rank, world, shuffle, 7, kVocab, split);
    FUZZ_CHECK(dl.batches_per_epoch() >= 1);
    const size_t bt = (size_t)B * T;
    std::vector<int> x(bt), y(bt), x2(bt), y2(bt);
    const int64_t steps = std::min<int64_t>(dl.batches_per_epoch() + 1, 4);  // crosses an epoch when short
    for (int64_t s = 0; s < steps; s++) {
        const LoaderState st = dl.state();
        dl.next_batch(x.data(), y.data());
        for (size_t i = 0; i < bt; i++) {
            FUZZ_CHECK(x[i] >= 0 && x[i] < kVocab && y[i] >= 0 && y[i] < kVocab);
            if (i + 1 < bt) FUZZ_CHECK(y[i] == x[i + 1]);  // one window of B*T + 1 tokens
        }
        DataLoader again(path, B, T, rank, world, shuffle, 7, kVocab, split);
        again.restore(LoaderState::from_vector(st.to_vector()));
        again.next_batch(x2.data(), y2.data());
        FUZZ_CHECK(x == x2 && y == y2);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("shard");
    const std::string& path = file.write(data, size);
    try {
        const ShardHeader h = read_shard_header(path);
        FUZZ_CHECK(h.version == 1 || h.version == 2);
        FUZZ_CHECK(h.num_tokens > 0 && (int64_t)size == kShardHeaderBytes + h.num_tokens * (h.version == 1 ? 2 : 4));
        const std::vector<uint32_t> toks = read_shard_tokens(path, kVocab);
        FUZZ_CHECK((int64_t)toks.size() == h.num_tokens);
        for (uint32_t t : toks) FUZZ_CHECK(t < (uint32_t)kVocab);
    } catch (const InputError&) {}
    try {
        exercise_loader(path, 1, 1, 0, 1, false, RankSplit::Interleave);
    } catch (const InputError&) {}
    try {
        exercise_loader(path, 2, 3, 1, 2, true, RankSplit::Rows);
    } catch (const InputError&) {}
    return 0;
}
