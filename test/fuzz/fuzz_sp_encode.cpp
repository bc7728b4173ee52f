// libFuzzer harness: SentencePiece BPE encoding of arbitrary prompt bytes (llmc/text/sp_encoder.h
// SpBpeEncoder::encode) with a real model: test/fuzz/corpus/sp_model/prepare_sp360.model, the
// tokenizer.model data/prepare.py --tokenizer sp --vocab-size 360 trained (test/fuzz/make_seeds.py).
// Checks: every id is in the vocabulary and, for valid UTF-8 without U+2581 (which the model writes
// for a space), the pieces' bytes (sp_token_bytes, as in tokenizer.bin) give the text back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "llmc/text/sp_encoder.h"
#include "test/fuzz/fuzz_common.h"

#ifndef LLMC_FUZZ_DIR
#define LLMC_FUZZ_DIR "test/fuzz"
#endif

using namespace llmc;

namespace {

std::unique_ptr<SpBpeEncoder> g_enc;

bool valid_utf8(const std::string& s) {
    for (const TextChar& c : utf8_chars(s))
        if (c.cp == kInvalidUtf8Byte) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const std::string path = std::string(LLMC_FUZZ_DIR) + "/corpus/sp_model/prepare_sp360.model";
    try {
        g_enc.reset(new SpBpeEncoder(read_sp_model(path), path));
    } catch (const InputError& e) {
        std::fprintf(stderr, "fuzz_sp_encode: %s (run test/fuzz/make_seeds.py)\n", e.what());
        std::exit(1);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text((const char*)data, size);
    const std::vector<int> ids = g_enc->encode(text);
    std::string back;
    for (int id : ids) {
        FUZZ_CHECK(id >= 0 && id < g_enc->vocab_size());
        back += g_enc->token_bytes(id);
    }
    if (valid_utf8(text) && text.find("\xE2\x96\x81") == std::string::npos) FUZZ_CHECK(back == text);
    return 0;
}
