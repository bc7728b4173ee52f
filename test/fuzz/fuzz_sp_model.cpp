// libFuzzer harness: SentencePiece's tokenizer.model through our protobuf reader and the encoder's
// model checks (llmc/text/sp_encoder.h read_sp_model, SpBpeEncoder), then encoding with the model.
// The input is the file. Expected: a valid result or llmc::InputError (docs/reliability.md).
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/text/sp_encoder.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

const char kText[] =
    "First Citizen:\nWe're  all resolved;\n\n3.14 \xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80 \xFF\xC3 end \xE2\x96\x81";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("sp_model");
    const std::string& path = file.write(data, size);
    try {
        SpModel model = read_sp_model(path);
        FUZZ_CHECK(!model.pieces.empty());
        FUZZ_CHECK(model.pieces.size() <= size);  // each piece takes at least 2 bytes of the file
        const SpBpeEncoder enc(std::move(model), "fuzz");
        const int V = enc.vocab_size();
        for (int id = 0; id < V; id++) (void)enc.token_bytes(id);
        for (int id : enc.encode(kText)) FUZZ_CHECK(id >= 0 && id < V);
        for (int id : enc.encode(std::string((const char*)data, size < 256 ? size : 256)))
            FUZZ_CHECK(id >= 0 && id < V);
    } catch (const InputError&) {}
    return 0;
}
