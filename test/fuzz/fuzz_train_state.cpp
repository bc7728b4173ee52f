// libFuzzer harness: training-state files (llmc/io/train_state.h load_train_state) and the loop state
// inside them (data-loader position, spike windows, logit alarm, RNG: what llmc/train/loop_state.h does
// with them on resume, repeated here). The input is the file, loaded for test/fuzz/fuzz_common.h's
// tiny model with the rank and process count its header names (so those checks pass and the rest is
// reached). Each input is loaded twice: as it is, and with the payload checksum (and, version 2, the
// header checksum) fixed up, so mutations reach the section parsing behind the checksum. Expected: a
// valid result or llmc::InputError (docs/reliability.md).
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/io/dataloader.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/train/spikes.h"
#include "llmc/io/train_state.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

// loop_state.h LoopState::from_train_state: loader position, the two spike windows, the optional alarm
// section, one RNG state.
void restore_loop_state(const TrainState& st) {
    const LoaderState ls = LoaderState::from_vector(st.loader);
    FUZZ_CHECK(ls.to_vector() == st.loader);
    SpikeDetector loss_spikes(fuzz::kSpikeWindow), norm_spikes(fuzz::kSpikeWindow);
    LogitAlarmConfig ac;
    ac.window = fuzz::kSpikeWindow;
    ac.z = 3.0f;
    LogitAlarm alarm(ac);
    size_t pos = loss_spikes.from_vector(st.extra, 0);
    pos = norm_spikes.from_vector(st.extra, pos);
    if (pos < st.extra.size() && LogitAlarm::is_state_tag(st.extra[pos])) pos = alarm.from_vector(st.extra, pos);
    FUZZ_CHECK(pos <= st.extra.size());
    if (pos != st.extra.size() || st.rng.size() != 1) throw InputError("unexpected loop-state layout");
    FUZZ_CHECK(loss_spikes.count() >= 0 && loss_spikes.count() <= fuzz::kSpikeWindow);
    (void)loss_spikes.zscore(1.0);
    loss_spikes.push(2.0);
    LogitStats s;
    s.num_layers = 1;
    s.num_heads = 1;
    s.max_logit = {1.0f};
    (void)alarm.observe(1, s);
}

void load_and_check(const std::string& path, size_t size, int rank, int world) {
    const ModelConfig c = fuzz::tiny_model();
    const size_t n = param_layout(c).total;
    try {
        const TrainState st = load_train_state(path, c, rank, world);
        FUZZ_CHECK(st.m.size() == n && st.v.size() == n && (st.master.empty() || st.master.size() == n));
        FUZZ_CHECK(st.step >= 0 && st.rank == rank && st.world_size == world);
        FUZZ_CHECK(size == CKPT_HEADER_BYTES + (2 * n + st.master.size()) * 4 +
                               (st.rng.size() + st.loader.size() + st.extra.size()) * 8);
        restore_loop_state(st);
    } catch (const InputError&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("train_state");
    const int rank = size >= 16 ? (int)fuzz::get_u32(data + 12) : 0;
    const int world = size >= 20 ? (int)fuzz::get_u32(data + 16) : 1;
    load_and_check(file.write(data, size), size, rank, world);
    if (size < CKPT_HEADER_BYTES || fuzz::get_u32(data) != (uint32_t)STATE_MAGIC) return 0;
    std::vector<uint8_t> fixed(data, data + size);
    int32_t h[CKPT_HEADER_INTS];
    std::memcpy(h, fixed.data(), CKPT_HEADER_BYTES);
    put_u64(h, 17, fnv1a64(fixed.data() + CKPT_HEADER_BYTES, size - CKPT_HEADER_BYTES));
    if (h[1] == STATE_VERSION) put_u64(h, STATE_HEADER_SUM, header_checksum(h, STATE_HEADER_SUM));
    std::memcpy(fixed.data(), h, CKPT_HEADER_BYTES);
    load_and_check(file.write(fixed.data(), size), size, rank, world);
    return 0;
}
