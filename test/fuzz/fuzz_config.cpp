// libFuzzer harness: the --config file (llmc/app/cli.h TrainCli: CLI11's TOML/INI reader bound to
// TrainConfig), then what the trainer checks next: validate_train_flags, and for a preset -e the model
// (preset + flags, validate_model_config, its parameter count) and validate_run. The input is the file.
// A config the trainer accepts must also survive the round trip through config_file_text() (what the
// trainer writes to <out>/config.toml): read back, it gives the same settings and the same text.
// Expected: a valid result, a parse error (TrainCli::parse returns 1 and prints one line), or
// llmc::InputError (docs/reliability.md). CLI11 prints parse errors on stderr: run with -close_fd_mask=2.
#include <cstdint>
#include <string>

#include "llmc/app/cli.h"
#include "llmc/app/config_json.h"
#include "llmc/app/device.h"
#include "llmc/app/train_config.h"
#include "llmc/app/validate.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/core/params.h"
#include "llmc/io/json_text.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

// Every setting the file can make: TrainConfig's fields (as config.json writes them) and the model flags.
// Not was_given("val-batches"): config.toml lists every flag with its default, so -m always counts as given there.
std::string describe(const TrainConfig& c) {
    const ModelOverrides& o = c.overrides;
    auto opt = [](const auto& v) { return v ? std::to_string(*v) : std::string("-"); };
    return json_file_text(train_config_json(c)) + " " + opt(o.layers) + opt(o.channels) + opt(o.heads) +
           opt(o.global_heads) + opt(o.window) + opt(o.vocab) + opt(o.max_seq_len) + opt(o.attn_softcap) + opt(c.near) +
           std::to_string(o.qk_norm) + std::to_string(o.untie_embeddings);
}

int parse_config(TrainCli& cli, const std::string& path) {
    const char* argv[] = {"train_gpt2_ls", "--config", path.c_str()};
    return cli.parse(3, argv);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::TempFile file("config"), again("config_again");
    TrainCli cli;
    if (parse_config(cli, file.write(data, size)) >= 0) return 0;  // a parse error (or help) with its message
    const TrainConfig& cfg = cli.config();
    try {
        validate_train_flags(cfg);
        (void)resolve_device(cfg.device, 0, nullptr, false);
        if (!is_model_preset(cfg.model)) return 0;  // a checkpoint path: fuzz_checkpoint's business
        ModelConfig m = model_preset(cfg.model);
        apply_overrides(m, cfg.overrides);
        const std::string err = validate_model_config(m);
        if (!err.empty()) throw InputError(err);
        FUZZ_CHECK(param_layout(m).total == fuzz::exact_param_count(m));  // no wrap-around
        (void)validate_run(cfg, m, -1, "fuzz");
    } catch (const InputError&) {
        return 0;  // refused with its one line
    }
    // A run that starts writes config.toml; --config on it must give the same settings and text.
    const std::string text = cli.config_file_text();
    TrainCli cli2;
    FUZZ_CHECK(parse_config(cli2, again.write(text.data(), text.size())) == -1);
    FUZZ_CHECK(describe(cli2.config()) == describe(cfg));
    FUZZ_CHECK(cli2.config_file_text() == text);
    return 0;
}
