// libFuzzer harness: the data directory's vocabulary (llmc/io/data_vocab.h data_vocab_size: meta.json's
// "vocab_size", else tokenizer.bin's header), then what the trainer does with it: a preset model
// (d6) takes it as V (resolve_model), validate_run. The input's first byte picks the file the rest
// becomes (modulo 3: 0 meta.json, 1 tokenizer.bin, 2 meta.json beside a valid tokenizer.bin of V = 300,
// the fallback when meta.json has no "vocab_size"). Expected: a valid result or llmc::InputError
// (docs/reliability.md).
#include <cstdint>
#include <string>

#include "llmc/app/model_setup.h"
#include "llmc/app/train_config.h"
#include "llmc/app/validate.h"
#include "llmc/core/error.h"
#include "llmc/core/params.h"
#include "llmc/io/data_vocab.h"
#include "llmc/text/tokenizer.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {
constexpr uint32_t kFallbackVocab = 300;  // mode 2's tokenizer.bin
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempDir dir("data_vocab");
    if (size == 0) return 0;
    const int mode = data[0] % 3;
    const std::string name = mode == 1 ? "tokenizer.bin" : "meta.json", glob = dir.path() + "/train_*.bin";
    dir.clear();
    dir.put(name, data + 1, size - 1);
    if (mode == 2) {
        uint32_t header[256] = {kTokenizerMagic, 2, kFallbackVocab, 0};
        dir.put("tokenizer.bin", header, sizeof header);
    }
    std::string source;
    int vocab = -1;
    try {
        vocab = data_vocab_size(glob, &source);
    } catch (const InputError&) {
        return 0;  // refused with its one line
    }
    FUZZ_CHECK(vocab == -1 || vocab >= 1);
    if (mode == 2) FUZZ_CHECK(vocab != -1);  // meta.json's, or the tokenizer.bin beside it
    if (vocab == -1) return 0;
    const std::string from = source.substr(source.find_last_of('/') + 1);
    FUZZ_CHECK(from == name || (mode == 2 && from == "tokenizer.bin" && vocab == (int)kFallbackVocab));
    TrainConfig cfg;
    cfg.model = "d6";
    cfg.train_data = glob;
    try {
        const ModelSetup ms = resolve_model(cfg, vocab);
        FUZZ_CHECK(ms.config.vocab_size == vocab);  // no --vocab: the data's
        FUZZ_CHECK(ms.config.padded_vocab_size >= vocab && ms.config.padded_vocab_size % 128 == 0);
        FUZZ_CHECK(param_layout(ms.config).total == fuzz::exact_param_count(ms.config));
        (void)validate_run(cfg, ms.config, vocab, source);
    } catch (const InputError&) {}
    return 0;
}
