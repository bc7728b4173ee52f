// libFuzzer harness: the data directory's vocabulary (llmc/train_loop.h data_vocab_size: meta.json's
// "vocab_size", else tokenizer.bin's header), then what the trainer does with it: a preset model
// (d6) takes it as V (resolve_model), validate_run. The input's first byte picks the file it becomes
// (even: meta.json, odd: tokenizer.bin), the rest is the file. Expected: a valid result or
// llmc::InputError (docs/reliability.md).
#include <climits>
#include <cstdint>
#include <string>

#include "llmc/params.h"
#include "llmc/train_loop.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempDir dir("data_vocab");
    if (size == 0) return 0;
    const std::string name = data[0] % 2 == 0 ? "meta.json" : "tokenizer.bin", glob = dir.path() + "/train_*.bin";
    dir.clear();
    dir.put(name, data + 1, size - 1);
    std::string source;
    int vocab = -1;
    try {
        vocab = data_vocab_size(glob, &source);
    } catch (const InputError&) {
        return 0;  // refused with its one line
    }
    FUZZ_CHECK(vocab == -1 || (vocab >= 1 && vocab <= INT_MAX));
    if (vocab == -1) return 0;
    FUZZ_CHECK(source.size() >= name.size() && source.compare(source.size() - name.size(), name.size(), name) == 0);
    TrainConfig cfg;
    cfg.model = "d6";
    cfg.train_data = glob;
    try {
        const ModelSetup ms = resolve_model(cfg, vocab);
        FUZZ_CHECK(ms.config.vocab_size == vocab);  // no --vocab: the data's
        FUZZ_CHECK(ms.config.padded_vocab_size >= vocab && ms.config.padded_vocab_size % 128 == 0);
        FUZZ_CHECK(param_layout(ms.config).total == fuzz::exact_param_count(ms.config));
        (void)validate_run(cfg, ms.config, vocab, source);
    } catch (const InputError&) {
    }
    return 0;
}
