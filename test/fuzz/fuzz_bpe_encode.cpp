// libFuzzer harness: GPT-2 byte-level BPE of arbitrary prompt bytes (llmc/text/bpe_encoder.h
// Gpt2BpeEncoder::encode, what generate_gpt2_ls --prompt runs). The vocabulary is GPT-2's
// tokenizer.bin from $LLMC_FUZZ_GPT2_TOKENIZER, else data/shards/tinyshakespeare_gpt2/tokenizer.bin
// (make data-tinyshakespeare), else a toy byte-level vocabulary built here (printed at start).
// Checks: every id is a token other than EOT and the tokens' bytes give the input back exactly
// (the encoder keeps invalid UTF-8 as bytes).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "llmc/text/bpe_encoder.h"
#include "llmc/text/tokenizer.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

std::unique_ptr<Gpt2BpeEncoder> g_enc;
std::vector<std::string> g_tokens;
int g_eot = -1;

// 256 single bytes, then every pair of "etaoin sh" and a few words, then EOT.
void toy_vocabulary() {
    for (int b = 0; b < 256; b++) g_tokens.push_back(std::string(1, (char)b));
    const std::string common = "etaoin sh";
    for (char a : common)
        for (char b : common) g_tokens.push_back(std::string{a, b});
    for (const char* w : {" the", "the", " and", "and", "tion", "ing", "in ", "   ", "\n\n", "'s", "ll"})
        g_tokens.push_back(w);
    g_eot = (int)g_tokens.size();
    g_tokens.push_back("<|endoftext|>");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* env = std::getenv("LLMC_FUZZ_GPT2_TOKENIZER");
    const std::string path = env && *env ? env : "data/shards/tinyshakespeare_gpt2/tokenizer.bin";
    std::FILE* probe = std::fopen(path.c_str(), "rb");
    if (probe) {
        std::fclose(probe);
        const Tokenizer tok(path);
        g_enc.reset(new Gpt2BpeEncoder(tok));  // refuses anything but GPT-2's vocabulary
        for (int id = 0; id < tok.vocab_size(); id++) g_tokens.push_back(tok.decode(id));
        g_eot = tok.eot_token();
        std::fprintf(stderr, "fuzz_bpe_encode: GPT-2 vocabulary from %s\n", path.c_str());
    } else {
        toy_vocabulary();
        g_enc.reset(new Gpt2BpeEncoder(g_tokens, g_eot));
        std::fprintf(stderr, "fuzz_bpe_encode: no %s; toy vocabulary of %zu tokens\n", path.c_str(), g_tokens.size());
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text((const char*)data, size);
    std::string back;
    for (int id : g_enc->encode(text)) {
        FUZZ_CHECK(id >= 0 && id < (int)g_tokens.size() && id != g_eot);
        back += g_tokens[(size_t)id];
    }
    FUZZ_CHECK(back == text);
    return 0;
}
