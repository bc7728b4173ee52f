// libFuzzer harness: the data directory's vocabulary (llmc/train_loop.h data_vocab_size: meta.json's
// "vocab_size", else tokenizer.bin's header), then what the trainer does with it: a preset model
// (d6) takes it as V (resolve_model), validate_run. The input's first byte picks the file it becomes
// (even: meta.json, odd: tokenizer.bin), the rest is the file. Expected: a valid result or
// llmc::InputError (docs/reliability.md).
#include <dirent.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llmc/params.h"
#include "llmc/train_loop.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

// A per-process directory (in /dev/shm when writable, like fuzz::TempFile) that holds one file at a
// time, removed with it at exit.
class DataDir {
public:
    DataDir() {
        const std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        std::string templ = base + "/llmc_fuzz_data_vocab_XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) == nullptr) {
            std::perror("fuzz: mkdtemp");
            std::abort();
        }
        dir_ = buf.data();
    }
    ~DataDir() {
        clear();
        ::rmdir(dir_.c_str());
    }
    // Leaves only `name` in the directory, holding `size` bytes of `data`.
    void put(const std::string& name, const uint8_t* data, size_t size) {
        clear();
        std::FILE* f = std::fopen((dir_ + "/" + name).c_str(), "wb");
        if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
            std::perror("fuzz: writing the data file");
            std::abort();
        }
    }
    std::string glob() const { return dir_ + "/train_*.bin"; }

private:
    void clear() {
        for (const char* n : {"meta.json", "tokenizer.bin"}) ::unlink((dir_ + "/" + n).c_str());
    }
    std::string dir_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static DataDir dir;
    if (size == 0) return 0;
    const std::string name = data[0] % 2 == 0 ? "meta.json" : "tokenizer.bin";
    dir.put(name, data + 1, size - 1);
    std::string source;
    int vocab = -1;
    try {
        vocab = data_vocab_size(dir.glob(), &source);
    } catch (const InputError&) {
        return 0;  // refused with its one line
    }
    FUZZ_CHECK(vocab == -1 || (vocab >= 1 && vocab <= INT_MAX));
    if (vocab == -1) return 0;
    FUZZ_CHECK(source.size() >= name.size() && source.compare(source.size() - name.size(), name.size(), name) == 0);
    TrainConfig cfg;
    cfg.model = "d6";
    cfg.train_data = dir.glob();
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
