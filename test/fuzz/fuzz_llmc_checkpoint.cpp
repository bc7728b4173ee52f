// libFuzzer harness: llm.c GPT-2 checkpoints (magic 20240326, versions 3 and 5) through
// llmc/io/checkpoint.h load_model_checkpoint. The input is the file with its first int32 replaced by
// llm.c's magic, so every input takes the llm.c path (fuzz_checkpoint covers our own format).
// Expected: a valid result (an all-global model) or llmc::InputError (docs/reliability.md).
#include <cstdint>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("llmc_checkpoint");
    std::vector<uint8_t> bytes(data, data + size);
    if (size >= 4) fuzz::put_u32(bytes.data(), (uint32_t)LLMC_MAGIC);
    try {
        const ModelCheckpoint ck = load_model_checkpoint(file.write(bytes.data(), size));
        FUZZ_CHECK(ck.from_llmc && ck.step == 0);
        FUZZ_CHECK(validate_model_config(ck.config).empty());
        const ModelConfig& c = ck.config;
        FUZZ_CHECK(c.global_heads == c.num_heads && c.window == c.max_seq_len && c.tied_embeddings && !c.qk_norm);
        const size_t n = param_layout(c).total;
        FUZZ_CHECK(ck.params.size() == n && size == CKPT_HEADER_BYTES + n * (ck.bf16 ? 2 : 4));
        FUZZ_CHECK(n == fuzz::exact_param_count(c));  // n did not wrap around
    } catch (const InputError&) {}
    return 0;
}
