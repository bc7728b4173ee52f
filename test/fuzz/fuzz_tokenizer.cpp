// libFuzzer harness: tokenizer.bin (llmc/text/tokenizer.h), and what the generator does with a loaded
// one: decode every id, make the text printable, recognize GPT-2's / the byte vocabulary, encode a
// prompt, and byte-level BPE over the file's vocabulary (rank = id) when it has every single byte.
// The input is the file. Expected: a valid result or llmc::InputError (docs/reliability.md).
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/text/bpe_encoder.h"
#include "llmc/text/tokenizer.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

bool valid_utf8(const std::string& s) {
    for (const TextChar& c : utf8_chars(s))
        if (c.cp == kInvalidUtf8Byte) return false;
    return true;
}

const char kText[] = "First Citizen:\nWe're  all resolved; 3.14 \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 \xFF\xC3 end\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("tokenizer");
    const std::string& path = file.write(data, size);
    try {
        const Tokenizer tok(path);
        FUZZ_CHECK(tok.present() && tok.vocab_size() >= 1);
        FUZZ_CHECK(tok.eot_token() >= 0 && tok.eot_token() < tok.vocab_size());
        FUZZ_CHECK((int64_t)size >= 1024 + tok.vocab_size());  // a length byte per token
        std::string all;
        std::vector<std::string> tokens((size_t)tok.vocab_size());
        for (int id = 0; id < tok.vocab_size(); id++) {
            tokens[(size_t)id] = tok.decode(id);
            FUZZ_CHECK(tokens[(size_t)id].size() <= 255);
            all += tokens[(size_t)id];
        }
        FUZZ_CHECK(valid_utf8(safe_printable(all)));
        try {
            (void)tok.decode(tok.vocab_size());
            FUZZ_CHECK(false);  // outside the vocabulary: must throw
        } catch (const InputError&) {}
        (void)Gpt2BpeEncoder::is_gpt2_vocabulary(tok, nullptr);
        (void)is_byte_vocabulary(tok);
        try {
            const std::vector<int> ids = encode_prompt(tok, kText);
            FUZZ_CHECK(!ids.empty() && ids[0] == tok.eot_token());
            for (int id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
        } catch (const InputError&) {}
        try {  // any vocabulary holding every byte is a BPE vocabulary (rank = id): decoding gives the text back
            const Gpt2BpeEncoder enc(tokens, tok.eot_token());
            std::string back;
            for (int id : enc.encode(kText)) {
                FUZZ_CHECK(id >= 0 && id < tok.vocab_size() && id != tok.eot_token());
                back += tokens[(size_t)id];
            }
            FUZZ_CHECK(back == kText);
        } catch (const InputError&) {}
    } catch (const InputError&) {}
    return 0;
}
