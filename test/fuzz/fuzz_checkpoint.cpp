// libFuzzer harness: train_gpt2_ls model files (llmc/io/checkpoint.h load_model_checkpoint).
// The input is the file. Each input is loaded twice: as it is, and (when it carries our magic) with
// the header's parameter count, payload checksum and (versions 3 and 4) header checksum fixed up, so
// mutations of the header fields and of the file size reach the checks behind the checksum.
// Expected: a valid result or llmc::InputError (docs/reliability.md).
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

void load_and_check(const std::string& path, size_t size) {
    try {
        const ModelCheckpoint ck = load_model_checkpoint(path);
        FUZZ_CHECK(validate_model_config(ck.config).empty());
        const size_t n = param_layout(ck.config).total;
        FUZZ_CHECK(ck.params.size() == n && n == fuzz::exact_param_count(ck.config));  // n did not wrap around
        FUZZ_CHECK(size == CKPT_HEADER_BYTES + n * (ck.bf16 ? 2 : 4));
        FUZZ_CHECK(ck.step >= 0);
    } catch (const InputError&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("checkpoint");
    load_and_check(file.write(data, size), size);
    if (size < CKPT_HEADER_BYTES || fuzz::get_u32(data) != (uint32_t)MODEL_MAGIC) return 0;
    // the same header with a matching parameter count (when its fields describe a model) and checksum
    std::vector<uint8_t> fixed(data, data + size);
    int32_t h[CKPT_HEADER_INTS];
    std::memcpy(h, fixed.data(), CKPT_HEADER_BYTES);
    const ModelConfig c = get_config_fields(h);  // the reader's own decoding of the header
    if (validate_model_config(c).empty()) put_u64(h, 14, (uint64_t)param_layout(c).total);
    put_u64(h, 16, fnv1a64(fixed.data() + CKPT_HEADER_BYTES, size - CKPT_HEADER_BYTES));
    if (h[1] == MODEL_VERSION_SUMMED || h[1] == MODEL_VERSION_TOKENIZER)
        put_u64(h, CKPT_HEADER_SUM, header_checksum(h, CKPT_HEADER_SUM));
    std::memcpy(fixed.data(), h, CKPT_HEADER_BYTES);
    load_and_check(file.write(fixed.data(), size), size);
    return 0;
}
