// The flag/config/resume rules: "did you mean" (llmc/app/flag_suggest.h), --config reading a TOML file
// strictly or a run's config.json (llmc/app/cli.h, config_file.h), the run record that -y 1 and
// --fork-from continue (llmc/app/run_record.h): its settings as the base, the changes as "history"
// (llmc/app/run_history.h), which holds only what trained; the tokens trained follow the history's -d;
// a record never sets the machine (--device, --threads), by -y 1, --fork-from or --config alike; which
// flags were given is one notion (TrainConfig::given) for the record and for --eval-only; paths are
// recorded absolute; and the command-line mistakes CLI11 would misreport get their own line
// (llmc/app/argv_mistakes.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/checkpoint_run.h"
#include "llmc/app/cli.h"
#include "llmc/app/config_json.h"
#include "llmc/app/flag_suggest.h"
#include "llmc/app/model_setup.h"
#include "llmc/app/run_history.h"
#include "llmc/app/run_record.h"
#include "llmc/app/validate.h"
#include "llmc/train/step_report.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

namespace {

int parse_args(llmc::TrainCli& cli, std::vector<std::string> args) {
    args.insert(args.begin(), "train_gpt2_ls");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return cli.parse((int)argv.size(), argv.data());
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A run's config.json as open_outputs writes its "train" and "model" objects: the settings of `args`,
// the model L 2, C 32, NH 4, G 1, P 8, maxT 64, V 256.
nlohmann::ordered_json record_of(std::vector<std::string> args) {
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, args) == -1);
    llmc::ModelConfig m;
    m.num_layers = 2;
    m.channels = 32;
    m.num_heads = 4;
    m.global_heads = 1;
    m.window = 8;
    m.max_seq_len = 64;
    m.vocab_size = 256;
    m.padded_vocab_size = 256;
    return {{"train", llmc::train_config_json(cli.config())},
            {"model", llmc::model_config_json(m)},
            {"derived", {{"max_steps", 10}}}};
}

llmc::TrainConfig parsed(std::vector<std::string> args) {
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, args) == -1);
    return cli.config();
}

nlohmann::ordered_json entry(int step, const char* flag, nlohmann::ordered_json old_value,
                             nlohmann::ordered_json new_value) {
    return {{"step", step}, {"flag", flag}, {"old", old_value}, {"new", new_value}};
}

}  // namespace

TEST_CASE("edit distance and the nearest flag name", "[flag_suggest]") {
    REQUIRE(llmc::edit_distance("", "abc") == 3);
    REQUIRE(llmc::edit_distance("kitten", "sitting") == 3);
    REQUIRE(llmc::edit_distance("qknorm", "qk-norm") == 1);
    const std::vector<std::string> names = llmc::table_flag_names();
    REQUIRE(llmc::nearest_flag_name("qknorm", names) == "qk-norm");
    REQUIRE(llmc::nearest_flag_name("--qk_norm", names) == "qk-norm");
    REQUIRE(llmc::nearest_flag_name("learning_rate", names) == "learning-rate");
    REQUIRE(llmc::nearest_flag_name("Z-LOS", names) == "z-loss");
    REQUIRE(llmc::nearest_flag_name("bogus-flag", names).empty());  // nothing within a third of the name
    REQUIRE(llmc::nearest_flag_name("x", names).empty());
    REQUIRE(llmc::did_you_mean("qkclip", names) == "; did you mean --qk-clip?");
    REQUIRE(llmc::did_you_mean("zzzzzz", names).empty());
    // nanoGPT's names: their flag, said to be nanoGPT's (block_size once got --batch-size, n_layer nothing)
    REQUIRE(llmc::did_you_mean("block_size", names) ==
            "; did you mean --seq-len? (nanoGPT's block_size: the trained length; the model's longest is "
            "--max-seq-len)");
    REQUIRE(llmc::did_you_mean("--n_layer", names) == "; did you mean --layers? (nanoGPT's n_layer)");
    REQUIRE(llmc::did_you_mean("n_embd", names) == "; did you mean --channels? (nanoGPT's n_embd)");
    REQUIRE(llmc::did_you_mean("gradient_accumulation_steps", names).find("--total-batch-size") != std::string::npos);
    REQUIRE(llmc::did_you_mean("max_iters", names) == "; did you mean --max-steps?");  // near enough already
    REQUIRE(llmc::did_you_mean("n_layer", {"qk-norm"}).empty());                       // only a flag that exists
    // trial 5 finding 12: nanoGPT's settings with no flag here say what does their job (they got no hint);
    // they need no flag among the candidates
    REQUIRE(llmc::did_you_mean("dropout", {}) ==
            "; nanoGPT's dropout: this trainer has no dropout (nanoGPT's pretraining default is 0.0); drop it");
    REQUIRE_THAT(llmc::did_you_mean("--decay_lr", names), StartsWith("; nanoGPT's decay_lr: False is a constant lr"));
    REQUIRE_THAT(llmc::did_you_mean("init_from", names), Contains("resume is -y 1"));
    REQUIRE_THAT(llmc::did_you_mean("lr_decay_iters", names), Contains("set -x to the decay span"));
    // a new-user trial: other trainers' spellings too far for the edit distance got no suggestion
    REQUIRE(llmc::did_you_mean("--lr", names) == "; did you mean --learning-rate?");
    REQUIRE(llmc::did_you_mean("--softcap", names) == "; did you mean --attn-softcap?");
    REQUIRE(llmc::did_you_mean("attn_logit_softcapping", names) == "; did you mean --attn-softcap?");
    REQUIRE(llmc::did_you_mean("--final_logit_softcapping", names) ==
            "; did you mean --attn-softcap? (it caps the attention logits; the output logits have no soft-cap here "
            "(--z-loss keeps them small))");
    REQUIRE(llmc::did_you_mean("--warmup", names) == "; did you mean --warmup-steps?");
    REQUIRE(llmc::did_you_mean("--max_grad_norm", names) == "; did you mean --grad-clip?");
    REQUIRE(llmc::did_you_mean("--wd", names) == "; did you mean --weight-decay?");
    REQUIRE(llmc::did_you_mean("--qk-layernorm", names) == "; did you mean --qk-norm?");
    REQUIRE(llmc::did_you_mean("--micro-batch-size", names) ==
            "; did you mean --batch-size? (-b is the micro-batch; -d the tokens of a step)");
    REQUIRE(llmc::did_you_mean("--lr", {"qk-norm"}).empty());   // only a flag that exists (generate_gpt2_ls')
    for (const llmc::NanoGptName& other : llmc::kOtherNames) {  // each names a flag of the trainer
        INFO(other.theirs);
        REQUIRE(std::find(names.begin(), names.end(), std::string(other.ours)) != names.end());
    }
}

TEST_CASE("--config TOML: an unknown key or any [section] is refused, naming the key and the nearest flag",
          "[config]") {
    llmc_test::TempDir dir;
    llmc::CheckedConfigFile reader;
    reader.file = "x.toml";
    reader.known_names = {"qk-norm", "learning-rate", "l"};
    reader.suggestions = {"qk-norm", "learning-rate"};
    auto read = [&](const std::string& text) {
        std::istringstream in(text);
        return reader.from_config(in);
    };
    REQUIRE(read("qk-norm=true\nlearning-rate=0.001\nl=0.002\n").size() == 3);
    REQUIRE_THROWS_WITH(read("qknorm=true\n"), "config file x.toml: unknown key 'qknorm'; did you mean --qk-norm?");
    REQUIRE_THROWS_WITH(read("qk-norm=true\nwhatever=1\n"), "config file x.toml: unknown key 'whatever'");
    REQUIRE_THROWS_WITH(read("always_save_checkpoint=true\n"),
                        StartsWith("config file x.toml: unknown key 'always_save_checkpoint'; nanoGPT's "
                                   "always_save_checkpoint: checkpoints do not wait for a better validation loss"));
    REQUIRE_THROWS_WITH(read("[train]\nlearning-rate=0.001\n"), Contains("unknown section [train]"));
    REQUIRE_THROWS_WITH(read("train.learning-rate=0.001\n"), Contains("unknown section [train]"));
    REQUIRE_THROWS_WITH(read(std::string("qk-norm=true\n\0\1\2", 16)), Contains("x.toml: not a text file"));
    // a key with several values: CLI11 would keep the last one without a word
    for (const char* text : {"learning-rate=1e-3,5e-4\n", "learning-rate=[1e-3, 5e-4]\n", "l=2 4\n", "l=2\nl=3\n"}) {
        INFO(text);
        REQUIRE_THROWS_WITH(read(text),
                            Contains("x.toml: 'l") && Contains("has 2 values (a list, or the key given twice)"));
    }
    REQUIRE(read("learning-rate=\"a,b c\"\n").at(0).inputs.size() == 1);  // one quoted value with ',' and ' '

    // through the parser: the real flag names, exit code 1
    // (seq-len and t: one flag under both its names, refused as a key given twice)
    for (const char* text : {"qknorm=true\n", "[train]\nlearning-rate=0.001\n", "seq_len=32\n", "seq-len=32\nt=16\n"}) {
        INFO(text);
        write(dir.file("c.toml"), text);
        llmc::TrainCli cli;
        REQUIRE(parse_args(cli, {"--config", dir.file("c.toml")}) == 1);
    }
    write(dir.file("ok.toml"), "qk-norm=true\nt=16\n");  // a short name alone is the flag
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, {"--config=" + dir.file("ok.toml")}) == -1);
    REQUIRE(cli.config().overrides.qk_norm);
    REQUIRE(cli.config().seq_len == 16);
}

TEST_CASE("a whole number with leading zeros is decimal, not octal (-t 064 is 64)", "[config]") {
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, {"-i", "d/train_*.bin", "-t", "064", "-b", "+08", "-x", "-0001", "-u", "000"}) == -1);
    REQUIRE(cli.config().seq_len == 64);
    REQUIRE(cli.config().batch_size == 8);
    REQUIRE(cli.config().max_steps == -1);
    REQUIRE(cli.config().warmup_steps == 0);
    REQUIRE(cli.config_file_text().find("seq-len=64\n") != std::string::npos);  // and config.toml says so
    llmc::TrainCli floats;
    REQUIRE(parse_args(floats, {"-i", "d/train_*.bin", "-l", "0.0005", "--z-loss", "01e-4"}) == -1);
    REQUIRE(floats.config().learning_rate == 5e-4f);
    REQUIRE(floats.config().z_loss == 1e-4f);
}

TEST_CASE("a run record's model bias and gelu come back as --bias and --gelu; older records have neither", "[config]") {
    llmc_test::TempDir dir;
    nlohmann::ordered_json rec = record_of({"-i", "d/train_*.bin"});
    rec["model"]["bias"] = false;
    rec["model"]["gelu"] = "erf";
    write(dir.file("config.json"), llmc::json_file_text(rec));
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, {"--config", dir.file("config.json")}) == -1);
    REQUIRE(cli.config().overrides.bias == 0);
    REQUIRE(cli.config().overrides.gelu == std::string("erf"));
    llmc::ModelConfig m;
    llmc::apply_overrides(m, cli.config().overrides);
    REQUIRE_FALSE(m.bias);
    REQUIRE(m.gelu == llmc::Gelu::Erf);

    rec["model"].erase("bias");  // a record written before the fields existed: the preset's values
    rec["model"].erase("gelu");
    write(dir.file("old.json"), llmc::json_file_text(rec));
    llmc::TrainCli old;
    REQUIRE(parse_args(old, {"--config", dir.file("old.json")}) == -1);
    REQUIRE_FALSE(old.config().overrides.bias.has_value());
    REQUIRE_FALSE(old.config().overrides.gelu.has_value());

    rec["model"]["bias"] = 0;  // not true/false
    write(dir.file("bad.json"), llmc::json_file_text(rec));
    llmc::TrainCli bad;
    REQUIRE(parse_args(bad, {"--config", dir.file("bad.json")}) == 1);
    REQUIRE_THAT(bad.error(), Contains("'model.bias' is not true/false"));

    // bad values on the command line: one line naming the choices
    llmc::ModelConfig c;
    llmc::ModelOverrides o;
    o.bias = 2;
    REQUIRE_THROWS_WITH(llmc::apply_overrides(c, o),
                        Contains("--bias must be 0 (no biases, the paper's bias=False) or 1 (GPT-2's biases) (got 2)"));
    o.bias.reset();
    o.gelu = "relu";
    REQUIRE_THROWS_WITH(llmc::apply_overrides(c, o), Contains("--gelu 'relu' is not an activation; use tanh"));
}

TEST_CASE("--config reads a run's config.json: train (a changed setting given) and the model as flags", "[config]") {
    llmc_test::TempDir dir;
    nlohmann::ordered_json rec = record_of(
        {"-i", "d/train_*.bin", "-l", "3e-3", "-b", "8", "--z-loss", "1e-4", "-o", "out/run", "--qk-clip", "50"});
    rec["history"] = {{{"step", 4}, {"flag", "--learning-rate"}, {"old", 0.003}, {"new", 0.001}}};
    write(dir.file("config.json"), llmc::json_file_text(rec));

    // the history changed -l while the run trained: a new run must be given one value
    llmc::TrainCli refused;
    REQUIRE(parse_args(refused, {"--config", dir.file("config.json"), "-b", "2"}) == 1);
    REQUIRE_THAT(refused.error(), Contains("the run changed settings while it trained: --learning-rate (0.003 at "
                                           "the start, 0.001 at the end)"));
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, {"--config", dir.file("config.json"), "-b", "2", "-l", "2e-3"}) == -1);
    const llmc::TrainConfig& c = cli.config();
    // -i as recorded: an absolute path
    REQUIRE(c.train_data == (std::filesystem::current_path() / "d/train_*.bin").string());
    REQUIRE(c.learning_rate == 2e-3f);  // the value given
    REQUIRE(c.batch_size == 2);         // the command line wins
    REQUIRE(c.z_loss == 1e-4f);
    REQUIRE(c.qk_clip == 50.0f);
    REQUIRE(c.output_dir.empty());  // what -y 1 takes: never -o, -y, --device, --threads
    REQUIRE(c.overrides.layers == 2);
    REQUIRE(c.overrides.channels == 32);
    REQUIRE(c.overrides.heads == 4);
    REQUIRE(c.overrides.global_heads == 1);
    REQUIRE(c.overrides.window == 8);
    REQUIRE(c.overrides.max_seq_len == 64);
    REQUIRE(c.overrides.vocab == 256);
    REQUIRE_FALSE(c.overrides.qk_norm);
    REQUIRE_FALSE(c.overrides.untie_embeddings);

    // the same file under another name is recognised by its content
    write(dir.file("settings.cfg"), llmc::json_file_text(rec));
    llmc::TrainCli by_content;
    REQUIRE(parse_args(by_content, {"--config", dir.file("settings.cfg"), "-l", "1e-3"}) == -1);
    REQUIRE(by_content.config().learning_rate == 1e-3f);
    REQUIRE(by_content.config().z_loss == 1e-4f);  // from the file

    // what it cannot read: one line naming the file
    llmc::CheckedConfigFile reader;
    reader.file = "bad.json";
    auto read = [&](const std::string& text) {
        std::istringstream in(text);
        return reader.from_config(in);
    };
    REQUIRE_THROWS_WITH(read("{\"train\": {\"seq_len\": 3"), Contains("config file bad.json: not valid JSON"));
    REQUIRE_THROWS_WITH(read("learning-rate=0.1\n"), Contains("config file bad.json: not valid JSON"));
    REQUIRE_THROWS_WITH(read("{\"model\": {}}"), Contains("bad.json: has no \"train\" object"));
    REQUIRE_THROWS_WITH(read("{\"train\": {\"qknorm\": true}}"),
                        "config file bad.json: unknown key 'train.qknorm'; did you mean --qk-norm?");
    REQUIRE_THROWS_WITH(read("{\"train\": {}, \"model\": {\"layerz\": 2}}"), Contains("unknown key 'model.layerz'"));
    REQUIRE_THROWS_WITH(read("{\"train\": {\"rank\": 1}}"), Contains("unknown key 'train.rank'"));
    write(dir.file("bad.json"), "{\"train\": [");
    llmc::TrainCli bad;
    REQUIRE(parse_args(bad, {"--config", dir.file("bad.json")}) == 1);
}

TEST_CASE("-y 1 takes the run's recorded settings as the base; a changed training flag is a change", "[run_record]") {
    llmc_test::TempDir dir;
    const std::string out = dir.file("run");
    std::filesystem::create_directories(out);
    nlohmann::ordered_json rec =
        record_of({"-i", "d/train_*.bin", "-j", "d/val_*.bin", "-l", "3e-4",      "-b", "8",        "-t", "32", "-x",
                   "10", "--qk-clip",     "50", "-o",          out,  "--threads", "3",  "--device", "cpu"});
    write(out + "/config.json", llmc::json_file_text(rec));

    llmc::TrainCli plain;  // nothing retyped
    REQUIRE(parse_args(plain, {"-o", out, "-y", "1"}) == -1);
    const llmc::TrainConfig& c = plain.config();
    REQUIRE(c.train_data == (std::filesystem::current_path() / "d/train_*.bin").string());
    REQUIRE(c.val_data == (std::filesystem::current_path() / "d/val_*.bin").string());
    REQUIRE(c.learning_rate == 3e-4f);
    REQUIRE(c.batch_size == 8);
    REQUIRE(c.seq_len == 32);
    REQUIRE(c.max_steps == 10);
    REQUIRE(c.qk_clip == 50.0f);
    REQUIRE(c.overrides.layers == 2);
    REQUIRE(c.overrides.vocab == 256);
    REQUIRE(c.threads == 0);  // the machine's settings: never from the record
    REQUIRE(c.device == "auto");
    REQUIRE(rec["train"]["threads"] == 3);  // though it records them
    REQUIRE(c.record_changes.empty());

    llmc::TrainCli changed;
    REQUIRE(parse_args(changed, {"-o", out, "-y", "1", "-l", "1e-4", "-x", "20", "--threads", "1"}) == -1);
    const std::vector<llmc::SettingChange>& ch = changed.config().record_changes;
    REQUIRE(ch.size() == 2);  // table order; --threads is not a change
    REQUIRE(ch[0].flag == "--max-steps");
    REQUIRE(ch[0].old_value == 10);
    REQUIRE(ch[0].new_value == 20);
    REQUIRE(ch[1].flag == "--learning-rate");
    REQUIRE(ch[1].old_value.dump() == "0.0003");  // floats as their shortest decimal
    REQUIRE(ch[1].new_value.dump() == "0.0001");
    REQUIRE(llmc::describe_change(ch[1]) == "--learning-rate 0.0001 (was 0.0003)");
    REQUIRE(llmc::describe_change({"--qk-clip", 0.0, 50.0}) == "--qk-clip 50 (was 0)");
    REQUIRE(llmc::describe_change({"--z-loss", 0.0, 1e-5}) == "--z-loss 1e-05 (was 0)");

    // the history: appended, the original "train" untouched; a later plain -y 1 continues with it
    nlohmann::ordered_json after = rec;
    after["history"] = llmc::resumed_history(rec, 10, changed.config(), "r").entries;
    REQUIRE(after["history"].dump() ==
            "[{\"step\":10,\"flag\":\"--max-steps\",\"old\":10,\"new\":20},"
            "{\"step\":10,\"flag\":\"--learning-rate\",\"old\":0.0003,\"new\":0.0001}]");
    write(out + "/config.json", llmc::json_file_text(after));
    llmc::TrainCli again;
    REQUIRE(parse_args(again, {"-o", out, "-y", "1"}) == -1);
    REQUIRE(again.config().learning_rate == 1e-4f);
    REQUIRE(again.config().max_steps == 20);
    REQUIRE(again.config().record_changes.empty());
    llmc::TrainCli zloss;
    REQUIRE(parse_args(zloss, {"-o", out, "-y", "1", "--z-loss", "0.001"}) == -1);
    const llmc::ResumedHistory twice = llmc::resumed_history(after, 20, zloss.config(), "r");
    REQUIRE(twice.entries.size() == 3);
    REQUIRE(twice.entries[2]["step"] == 20);
    REQUIRE(twice.entries[2]["flag"] == "--z-loss");

    // --config on top of the record: config file over record, command line over both
    write(dir.file("c.toml"), "learning-rate=0.002\nz-loss=0.5\n");
    llmc::TrainCli layered;
    REQUIRE(parse_args(layered, {"-o", out, "-y", "1", "--config", dir.file("c.toml"), "--z-loss", "0.25"}) == -1);
    REQUIRE(layered.config().learning_rate == 2e-3f);
    REQUIRE(layered.config().z_loss == 0.25f);
    REQUIRE(layered.config().batch_size == 8);

    // without -y 1 the record is not read; a damaged record is refused with one line
    llmc::TrainCli fresh;
    REQUIRE(parse_args(fresh, {"-o", out}) == -1);
    REQUIRE(fresh.config().batch_size == 4);
    write(out + "/config.json", "{\"train\": {\"learning_rate\": [1]}}");
    llmc::TrainCli damaged;
    REQUIRE(parse_args(damaged, {"-o", out, "-y", "1"}) == 1);
}

TEST_CASE("--fork-from: a complete checkpoint of a run directory with its config.json", "[run_record]") {
    llmc_test::TempDir dir;
    const std::string run = dir.file("run");
    std::filesystem::create_directories(run);
    REQUIRE_THROWS_WITH(llmc::fork_source(run + "/model_00000004.bin"), Contains("no such file"));
    REQUIRE_THROWS_WITH(llmc::fork_source(run + "/state_00000004_00000.bin"),
                        Contains("not a checkpoint's model file"));
    write(run + "/model_00000004.bin", "x");
    REQUIRE_THROWS_WITH(llmc::fork_source(run + "/model_00000004.bin"), Contains("is not a complete checkpoint"));
    write(run + "/DONE_00000004", "step 4 world_size 1\n");
    REQUIRE_THROWS_WITH(llmc::fork_source(run + "/model_00000004.bin"), Contains("no config.json beside it"));
    write(run + "/config.json", llmc::json_file_text(record_of({"-i", "d/train_*.bin", "-l", "3e-4", "-o", run})));
    const llmc::ForkSource src = llmc::fork_source(run + "/model_00000004.bin");
    REQUIRE(src.dir == run);
    REQUIRE(src.step == 4);

    llmc::TrainCli fork;  // the source's settings, -o the new one, the change listed
    REQUIRE(parse_args(fork, {"--fork-from", run + "/model_00000004.bin", "-o", dir.file("branch"), "--qk-clip",
                              "100"}) == -1);
    REQUIRE(fork.config().train_data == (std::filesystem::current_path() / "d/train_*.bin").string());
    REQUIRE(fork.config().output_dir == dir.file("branch"));
    REQUIRE(fork.config().overrides.layers == 2);
    REQUIRE(fork.config().record_changes.size() == 1);
    REQUIRE(fork.config().record_changes[0].flag == "--qk-clip");

    llmc::TrainConfig both = fork.config();
    both.resume = 1;
    REQUIRE_THROWS_WITH(llmc::validate_train_flags(both), Contains("drop one of them"));
}

TEST_CASE("a rule between flags names the --config file that set them", "[run_record]") {
    llmc_test::TempDir dir;
    const std::string toml = dir.file("c.toml");
    auto refusal = [&](const std::string& text, const std::vector<std::string>& typed) {
        write(toml, text);
        llmc::TrainCli cli;
        std::vector<std::string> args = {"--config", toml};
        args.insert(args.end(), typed.begin(), typed.end());
        REQUIRE(parse_args(cli, args) == -1);
        try {
            llmc::validate_train_flags(cli.config());
        } catch (const llmc::InputError& e) { return std::string(e.what()); }
        return std::string("(accepted)");
    };
    const std::string data = "train-data = \"d/train_*.bin\"\n";
    // two from the file: one group; only the flags that break the rule, not those at their defaults
    REQUIRE(refusal(data + "zero-stage = 1\nqk-clip = 100\n", {"--cuda-graph", "1"}) ==
            "--cuda-graph 1 replays the queued step, which needs one process, -z 0, and no --skip-spikes or "
            "--qk-clip (each decides on the host inside the step); drop --cuda-graph 1 or those flags (-z, "
            "--qk-clip: from --config " +
                toml + ")");
    // one typed, one from the file: only the file's is named
    REQUIRE(refusal(data + "resume = 1\n", {"--fork-from", "r/model_00000004.bin", "-o", "o"}) ==
            "--fork-from starts a new run in -o and -y 1 continues -o's own; drop one of them (-y: from --config " +
                toml + ")");
    REQUIRE(refusal(data + "eval-only = true\nval-data = \"d/val_*.bin\"\n", {"--profile-steps", "2"}) ==
            "--profile-steps profiles training steps; drop it with --eval-only (--eval-only: from --config " + toml +
                ")");
    // all typed: no origin
    REQUIRE(refusal(data, {"-y", "1"}) == "-y 1 resumes from the checkpoints in -o; give -o DIR");
}

TEST_CASE("the history says only what trained: one entry per flag and step, none for a change back", "[run_history]") {
    llmc_test::TempDir dir;
    const std::string out = dir.file("run");
    std::filesystem::create_directories(out);
    nlohmann::ordered_json rec = record_of({"-i", "/d/train_*.bin", "-l", "2e-3", "-x", "4", "-o", out});
    write(out + "/config.json", llmc::json_file_text(rec));

    // resumed at step 4 with -l 1e-3, then stopped before its first step
    llmc::TrainConfig first = parsed({"-o", out, "-y", "1", "-l", "1e-3"});
    rec["history"] = llmc::resumed_history(rec, 4, first, "r").entries;
    REQUIRE(rec["history"] == nlohmann::ordered_json::array({entry(4, "--learning-rate", 0.002, 0.001)}));
    write(out + "/config.json", llmc::json_file_text(rec));

    // resumed at step 4 again, with another -l: one entry for -l, old = what trained before step 4
    const llmc::ResumedHistory again =
        llmc::resumed_history(rec, 4, parsed({"-o", out, "-y", "1", "-l", "3e-3", "-x", "6"}), "r");
    REQUIRE(again.entries ==
            nlohmann::ordered_json::array({entry(4, "--max-steps", 4, 6), entry(4, "--learning-rate", 0.002, 0.003)}));
    REQUIRE(again.dropped.empty());
    REQUIRE(again.changes.size() == 2);

    // resumed at step 4 with the -l that trained: no entry, and a note on the one dropped
    const llmc::ResumedHistory back = llmc::resumed_history(rec, 4, parsed({"-o", out, "-y", "1", "-l", "2e-3"}), "r");
    REQUIRE(back.entries == nlohmann::ordered_json::array());
    REQUIRE(back.changes.empty());
    REQUIRE(back.dropped.size() == 1);
    REQUIRE_THAT(back.dropped[0], Contains("--learning-rate 0.001 (was 0.002) of step 4"));

    // entries before the step stay as they are; entries after it (steps rolled back to an older
    // checkpoint) go, their setting recorded at the resume step when it is still in effect
    rec["history"] = {entry(2, "--learning-rate", 0.002, 0.001), entry(8, "--learning-rate", 0.001, 0.0005),
                      entry(8, "--z-loss", 0, 0.0001)};
    write(out + "/config.json", llmc::json_file_text(rec));
    const llmc::TrainConfig latest = parsed({"-o", out, "-y", "1", "--z-loss", "0"});  // -l 0.0005 from the record
    REQUIRE(latest.learning_rate == 0.0005f);
    const llmc::ResumedHistory rolled = llmc::resumed_history(rec, 6, latest, "r");
    REQUIRE(rolled.entries == nlohmann::ordered_json::array({entry(2, "--learning-rate", 0.002, 0.001),
                                                             entry(6, "--learning-rate", 0.001, 0.0005)}));
    REQUIRE(rolled.dropped.size() == 1);
    REQUIRE_THAT(rolled.dropped[0], Contains("--z-loss"));
}

TEST_CASE("a fork takes its source's settings up to the checkpoint's step", "[run_history]") {
    llmc_test::TempDir dir;
    const std::string run = dir.file("run");
    std::filesystem::create_directories(run);
    nlohmann::ordered_json rec = record_of({"-i", "/d/train_*.bin", "-l", "2e-3", "-x", "10", "-o", run});
    rec["history"] = {entry(4, "--learning-rate", 0.002, 0.001), entry(8, "--learning-rate", 0.001, 0.0005)};
    write(run + "/config.json", llmc::json_file_text(rec));
    for (int step : {4, 6, 8}) {
        write(run + "/model_0000000" + std::to_string(step) + ".bin", "x");
        write(run + "/DONE_0000000" + std::to_string(step), "x");
    }
    // step 5 on trained at 0.001: a fork at 4 or 6 repeats that; at 8, the 0.0005 of steps 9 on
    REQUIRE(parsed({"--fork-from", run + "/model_00000004.bin", "-o", dir.file("a")}).learning_rate == 0.001f);
    REQUIRE(parsed({"--fork-from", run + "/model_00000006.bin", "-o", dir.file("b")}).learning_rate == 0.001f);
    REQUIRE(parsed({"--fork-from", run + "/model_00000008.bin", "-o", dir.file("c")}).learning_rate == 0.0005f);
    const llmc::TrainConfig fork =
        parsed({"--fork-from", run + "/model_00000006.bin", "-o", dir.file("b"), "-l", "3e-3"});
    REQUIRE(fork.record_changes.size() == 1);
    REQUIRE(llmc::describe_change(fork.record_changes[0]) == "--learning-rate 0.003 (was 0.001)");
}

TEST_CASE("the tokens trained follow the history's -d", "[run_history]") {
    // B 4 x T 32 = 128 tokens a step with -d -1; -d 256 from step 3, -d 512 from step 6
    nlohmann::ordered_json rec = record_of({"-i", "/d/x", "-b", "4", "-t", "32"});
    rec["history"] = {entry(2, "--total-batch-size", -1, 256), entry(5, "--total-batch-size", 256, 512)};
    for (int step = 0; step <= 9; step++) {
        int64_t expected = 0;  // step by step, each at its own -d
        for (int k = 1; k <= step; k++) expected += k <= 2 ? 128 : k <= 5 ? 256 : 512;
        INFO(step);
        REQUIRE(llmc::tokens_trained(rec, step, "r") == expected);
    }
    // a fork: the tokens its source trained up to the fork, then its own steps
    nlohmann::ordered_json fork = record_of({"-i", "/d/x", "-b", "4", "-t", "32", "-d", "256"});
    fork["forked_from"] = {{"checkpoint", "run/model_00000005.bin"}, {"step", 5}, {"tokens", 1024}};
    fork["history"] = {entry(7, "--total-batch-size", 256, 128)};
    REQUIRE(llmc::tokens_trained(fork, 5, "f") == 1024);
    REQUIRE(llmc::tokens_trained(fork, 9, "f") == 1024 + 2 * 256 + 2 * 128);

    // the summary line: the earlier processes' tokens, then this one's steps at its -d
    llmc::RunSummary s;
    s.start_step = 5;
    s.last_step = 9;
    s.tokens_before = llmc::tokens_trained(rec, 5, "r");
    s.tokens_per_step = 512;
    // 256 + 768 + 4 * 512, where all steps at the last -d would be 9 * 512 = 4608
    REQUIRE_THAT(llmc::summary_line(s), Contains("done: step 9 (4 in this run) | 3072 tokens |"));
}

TEST_CASE("a record never sets --device or --threads: -y 1, --config FILE.json and --config FILE.toml alike",
          "[run_history][config]") {
    llmc_test::TempDir dir;
    const std::string out = dir.file("run");
    std::filesystem::create_directories(out);
    llmc::TrainCli first;
    REQUIRE(parse_args(first, {"-i", "/d/x", "-o", out, "--threads", "3", "--device", "cpu", "-t", "16"}) == -1);
    const std::string toml = first.config_file_text();
    REQUIRE(toml.find("threads") == std::string::npos);  // config.toml: not written
    REQUIRE(toml.find("device") == std::string::npos);
    const nlohmann::ordered_json rec = {{"train", llmc::train_config_json(first.config())}};
    REQUIRE(rec["train"]["threads"] == 3);  // config.json: recorded, as what the run ran on
    write(out + "/config.json", llmc::json_file_text(rec));
    write(dir.file("old.toml"), toml + "device=\"cpu\"\nthreads=3\n");  // as older versions wrote it

    for (const std::vector<std::string>& args : {std::vector<std::string>{"-o", out, "-y", "1"},
                                                 {"--config", out + "/config.json"},
                                                 {"--config", dir.file("old.toml")}}) {
        INFO(args[1]);
        const llmc::TrainConfig c = parsed(args);
        REQUIRE(c.seq_len == 16);  // the experiment's settings are taken
        REQUIRE(c.threads == 0);   // the machine's are not
        REQUIRE(c.device == "auto");
        REQUIRE_FALSE(c.was_given("threads"));
    }
    const llmc::TrainConfig typed = parsed({"--config", dir.file("old.toml"), "--threads", "2"});
    REQUIRE(typed.threads == 2);
}

TEST_CASE("the flags given are one notion: typed or by --config, for the record and for --eval-only",
          "[run_history][checkpoint_run]") {
    llmc_test::TempDir dir;
    write(dir.file("c.toml"), "seq-len=16\n");
    const llmc::TrainConfig c = parsed({"--config", dir.file("c.toml"), "-b", "2", "-i", "x"});
    REQUIRE(c.was_given("seq-len"));
    REQUIRE(c.was_given("batch-size"));
    REQUIRE(c.was_given("train-data"));
    REQUIRE_FALSE(c.was_given("learning-rate"));

    // --eval-only of a checkpoint: -t from --config wins, -b (not given) comes from the run
    const std::string run = dir.file("run");
    std::filesystem::create_directories(run);
    nlohmann::ordered_json rec = record_of({"-i", "/d/train_*.bin", "-j", "/d/val_*.bin", "-t", "32", "-b", "8"});
    rec["history"] = {entry(4, "--val-data", "/d/val_*.bin", "/e/val_*.bin")};
    write(run + "/config.json", llmc::json_file_text(rec));
    llmc::TrainConfig ev = parsed({"--eval-only", "-e", run + "/model_00000004.bin", "--config", dir.file("c.toml")});
    llmc::eval_settings_from_run(ev, false);
    REQUIRE(ev.seq_len == 16);
    REQUIRE(ev.batch_size == 8);
    REQUIRE(ev.val_data == "/d/val_*.bin");  // step 4 trained before the entry of step 4
    const std::optional<llmc::CheckpointRun> later = llmc::read_checkpoint_run(run + "/model_00000005.bin");
    REQUIRE(later);
    REQUIRE(later->val_data == "/e/val_*.bin");
    // the one reader's errors name the file
    write(run + "/config.json", "{\"model\": {}}");
    REQUIRE_THROWS_WITH(
        llmc::read_checkpoint_run(run + "/model_00000004.bin"),
        Contains(run + "/config.json: has no \"train\" object") && Contains("give the settings as flags"));
}

TEST_CASE("recorded_settings: a train object as typed settings, each value checked by its flag", "[run_record]") {
    const nlohmann::ordered_json rec =
        record_of({"-i", "/d/train_*.bin", "-t", "32", "-l", "2e-3", "--z-loss", "1e-4"});
    const llmc::TrainConfig t = llmc::recorded_settings(rec["train"], "r/config.json");
    REQUIRE(t.train_data == "/d/train_*.bin");
    REQUIRE(t.seq_len == 32);
    REQUIRE(t.learning_rate == 2e-3f);
    REQUIRE(t.z_loss == 1e-4f);
    REQUIRE(t.was_given("seq-len"));  // the record holds every row it writes
    // a key absent: the flag's default, and not given
    nlohmann::ordered_json partial = rec["train"];
    partial.erase("seq_len");
    const llmc::TrainConfig p = llmc::recorded_settings(partial, "r/config.json");
    REQUIRE(p.seq_len == llmc::TrainConfig().seq_len);
    REQUIRE_FALSE(p.was_given("seq-len"));
    // a value of another type, or one its flag's rule refuses: one error naming the file and the key
    nlohmann::ordered_json bad = rec["train"];
    bad["warmup_steps"] = -5;
    REQUIRE_THROWS_WITH(llmc::recorded_settings(bad, "r/config.json"),
                        Contains("config file r/config.json: 'train.warmup_steps': -u/--warmup-steps must be >= 0"));
    bad = rec["train"];
    bad["batch_size"] = "four";
    REQUIRE_THROWS_WITH(llmc::recorded_settings(bad, "r/config.json"),
                        Contains("'train.batch_size' is \"four\", not a value of that setting"));
    // a record written before --cuda-graph took auto holds it as the integer 0 or 1; 2 never was a value
    REQUIRE(rec["train"]["cuda_graph"] == "auto");
    nlohmann::ordered_json old = rec["train"];
    for (int g : {0, 1}) {
        old["cuda_graph"] = g;
        REQUIRE(llmc::recorded_settings(old, "r/config.json").cuda_graph == std::to_string(g));
    }
    old["cuda_graph"] = 2;
    REQUIRE_THROWS_WITH(llmc::recorded_settings(old, "r/config.json"),
                        Contains("'train.cuda_graph': --cuda-graph must be auto, 0 or 1 (got 2)"));
    // the same record's parts through the one reader: "forked_from" and "data"
    nlohmann::ordered_json fork = rec;
    REQUIRE_FALSE(llmc::recorded_fork(fork));
    fork["forked_from"] = {{"checkpoint", "a/model_00000004.bin"}, {"step", 4}, {"tokens", 512}};
    REQUIRE(llmc::recorded_fork(fork)->step == 4);
    REQUIRE(*llmc::recorded_fork(fork)->tokens == 512);
    fork["data"] = {{"train", {{"glob", "/d/train_*.bin"}, {"shards", 2}, {"tokens", 1000}}}};
    const llmc::RecordedData data = llmc::recorded_data(fork, "r/config.json");
    REQUIRE(data.known());
    REQUIRE(data.glob() == "/d/train_*.bin");
    REQUIRE(data.train_count("tokens") == 1000);
    REQUIRE(data.train_count("shards") == 2);
    REQUIRE_FALSE(llmc::recorded_data(rec, "r/config.json").known());
}

TEST_CASE("paths are recorded absolute, so a run resumes from any directory", "[run_history]") {
    const std::string cwd = std::filesystem::current_path().string();
    REQUIRE(llmc::recorded_form("train_data", std::string("d/train_*.bin")) == cwd + "/d/train_*.bin");
    REQUIRE(llmc::recorded_form("val_data", std::string("./d/val_*.bin")) == cwd + "/d/val_*.bin");
    REQUIRE(llmc::recorded_form("train_data", std::string("/abs/x")) == "/abs/x");
    REQUIRE(llmc::recorded_form("model", std::string("ls-small")) == "ls-small");
    REQUIRE(llmc::recorded_form("model", std::string("run/model_00000004.bin")) == cwd + "/run/model_00000004.bin");
    REQUIRE(llmc::recorded_form("output_dir", std::string("out")) == "out");
    REQUIRE(llmc::recorded_form("val_data", std::string()).empty());
    // the same files typed relative are no change against the absolute record
    const nlohmann::ordered_json rec = record_of({"-i", "d/train_*.bin"});
    REQUIRE(rec["train"]["train_data"] == cwd + "/d/train_*.bin");
    REQUIRE(llmc::setting_changes(rec["train"], parsed({"-i", "d/train_*.bin"}), "r").empty());
    REQUIRE(llmc::setting_changes(rec["train"], parsed({"-i", "e/train_*.bin"}), "r").size() == 1);
}

TEST_CASE("the validation set changes within a run by -j and -m only", "[run_history]") {
    // it is the first -m x B x T x processes tokens of -j; -b, -t and the process count are refused on a resume
    // (the data loader's state) and in a fork, and a restart from step 0 writes a new record, so no history
    // entry of theirs is a change of the set, nor any other flag's (-d, -l)
    nlohmann::ordered_json rec = record_of({"-i", "/d/x", "-j", "/d/v", "-b", "4", "-t", "32"});
    rec["history"] = {entry(4, "--val-batches", 20, 10), entry(6, "--total-batch-size", -1, 256),
                      entry(8, "--batch-size", 4, 2), entry(8, "--seq-len", 32, 64)};
    llmc::ValSetChange c = llmc::last_val_set_change(rec, "r");
    REQUIRE(c.step == 4);
    REQUIRE(c.flags == "--val-batches");
    rec["history"].push_back(entry(9, "--val-data", "/d/v", "/d/w"));
    rec["history"].push_back(entry(9, "--val-batches", 10, 5));
    c = llmc::last_val_set_change(rec, "r");
    REQUIRE(c.step == 9);
    REQUIRE(c.flags == "--val-data and --val-batches");
}

TEST_CASE("command-line mistakes CLI11 would misreport get one line naming the fix", "[run_history][cli]") {
    llmc_test::TempDir dir;
    const auto error_of = [](std::vector<std::string> args) {
        llmc::TrainCli cli;
        REQUIRE(parse_args(cli, args) == 1);
        return cli.error();
    };
    REQUIRE_THAT(error_of({"-lr", "1e-3"}), Contains("-lr: this trainer spells it -l/--learning-rate"));
    REQUIRE_THAT(error_of({"-nk", "4"}), Contains("-nk: this trainer spells it --keep-checkpoints"));
    REQUIRE_THAT(error_of({"-sl", "5"}), Contains("--skip-spikes"));
    REQUIRE_THAT(error_of({"-pn", "2"}), Contains("--world-size"));
    REQUIRE_THAT(error_of({"-nm", "1"}), Contains("-nm is llm.c's flag") && Contains("no counterpart"));
    REQUIRE_THAT(error_of({"-xs"}), Contains("-xs is not a flag") && Contains("-x VALUE"));
    REQUIRE_THAT(error_of({"-h", "1"}),
                 Contains("-h is --help here") && Contains("HellaSwag") && Contains("drop -h 1"));
    REQUIRE(parsed({"-ofoo", "-x5", "-i", "x"}).output_dir == "foo");  // values attached to one-letter flags
    REQUIRE(parsed({"-ofoo", "-x5", "-i", "x"}).max_steps == 5);

    // a glob the shell expanded: the paths after the first are named
    std::vector<std::string> shards;
    for (int i = 0; i < 3; i++) {
        shards.push_back(dir.file("train_00000" + std::to_string(i) + ".bin"));
        write(shards.back(), "x");
    }
    const std::string glob = error_of({"-x", "3", "-i", shards[0], shards[1], shards[2], "-o", "out"});
    REQUIRE_THAT(glob, Contains("-i takes one value, but 2 more path(s) follow " + shards[0]) && Contains(shards[1]) &&
                           Contains("the shell expanded a glob; quote it"));
    REQUIRE_THAT(error_of({"-i", shards[0], "not-a-file"}), !Contains("glob") && Contains("not-a-file"));

    // --config DIR, --config with no file
    REQUIRE(error_of({"--config", dir.path.string()}) ==
            "--config " + dir.path.string() + " is a directory; give a file: " + dir.path.string() +
                "/config.json (a run's record) or " + dir.path.string() + "/config.toml");
    REQUIRE_THAT(error_of({"--config", dir.file("none.toml")}), Contains("none.toml: no such file"));

    // -y 2: its own range first, not "no training data"
    REQUIRE_THROWS_WITH(llmc::validate_train_flags(parsed({"-y", "2", "-o", "x"})),
                        "-y/--resume must be 0 or 1 (got 2); -y 1 resumes the run in -o");
}

TEST_CASE("-t past the model's positions: --max-seq-len only where a flag can change them", "[run_history][cli]") {
    llmc::ModelConfig m = llmc::model_preset("ls-small");
    m.max_seq_len = 64;
    llmc::TrainConfig preset = parsed({"-i", "x", "-t", "128", "--max-seq-len", "64"});
    REQUIRE_THROWS_WITH(llmc::validate_run(preset, m, -1, ""), Contains("or a larger --max-seq-len"));
    llmc::TrainConfig ck = parsed({"--eval-only", "-j", "x", "-t", "128", "-e", "run/model_00000004.bin"});
    REQUIRE_THROWS_WITH(llmc::validate_run(ck, m, -1, ""),
                        "-t 128 exceeds the model's --max-seq-len 64, which the checkpoint -e "
                        "run/model_00000004.bin fixes; use -t <= 64");
}

TEST_CASE("data past the model's vocabulary: the fix names what fixes it", "[run_history][cli]") {
    llmc::ModelConfig m = llmc::model_preset("ls-small");
    m.vocab_size = 400;
    // a checkpoint's vocabulary (a new-user trial met "use --vocab >= 50257 or drop --vocab" with no --vocab)
    llmc::TrainConfig ck = parsed({"--eval-only", "-j", "x", "-t", "32", "-e", "sp.bin"});
    REQUIRE_THROWS_WITH(llmc::validate_run(ck, m, 50257, "d/meta.json"),
                        "the model's vocabulary 400 is smaller than the data's 50257 (from d/meta.json), and the "
                        "checkpoint -e sp.bin fixes it; give data of that model's tokenizer (ids < 400)");
    llmc::TrainConfig typed = parsed({"-i", "x", "-t", "32", "--vocab", "400"});
    REQUIRE_THROWS_WITH(llmc::validate_run(typed, m, 50257, "d/meta.json"),
                        Contains("; use --vocab >= 50257 or drop --vocab"));
    llmc::TrainConfig preset = parsed({"-i", "x", "-t", "32"});
    REQUIRE_THROWS_WITH(llmc::validate_run(preset, m, 50257, "d/meta.json"), EndsWith("; use --vocab >= 50257"));
}

TEST_CASE("notes show values whole; the run header names every stabilizer that is on", "[run_history][console]") {
    const std::string long_path = "/" + std::string(70, 'p') + "/train_*.bin";
    REQUIRE(llmc::describe_change({"--train-data", "/x", long_path}) ==
            "--train-data \"" + long_path + "\" (was \"/x\")");
    llmc::ModelConfig m = llmc::model_preset("ls-small");
    REQUIRE(llmc::describe_stabilizers(m, parsed({})).empty());
    m.attn_softcap = 30;
    REQUIRE(llmc::describe_stabilizers(m, parsed({"--z-loss", "1e-4", "--qk-clip", "100", "--skip-spikes", "6"})) ==
            "attn-softcap 30, z-loss 0.0001, qk-clip 100, skip-spikes 6");
    m.qk_norm = true;
    REQUIRE(llmc::describe_stabilizers(m, parsed({})) == "qk-norm, attn-softcap 30");
}

TEST_CASE("a run record holding a key twice in one object is refused, naming the key's path", "[run_record]") {
    // a JSON parser keeps the last value: a hand-edited record would set another value without a word
    REQUIRE_THROWS_WITH(
        llmc::parse_run_record(R"({"train": {"seed": 1, "learning_rate": 0.1, "seed": 2}})", "r/config.json"),
        Contains("config file r/config.json: the key 'train.seed' is given twice"));
    REQUIRE_THROWS_WITH(llmc::parse_run_record(R"({"train": {}, "train": {"seed": 2}})", "r/config.json"),
                        Contains("the key 'train' is given twice"));
    REQUIRE_THROWS_WITH(
        llmc::parse_run_record(R"({"train": {}, "history": [{"step": 1, "flag": "-x", "old": 1, "new": 2, "new": 3}]})",
                               "r/config.json"),
        Contains("the key 'history.new' is given twice"));
    // one key in two objects, or in two entries of a list, is no repeat
    const nlohmann::ordered_json ok = llmc::parse_run_record(
        R"({"train": {"seed": 1}, "model": {"seed": 1}, "history": [{"step": 1}, {"step": 2}]})", "r/config.json");
    REQUIRE(ok["model"]["seed"] == 1);
    REQUIRE(ok["history"][1]["step"] == 2);
}
