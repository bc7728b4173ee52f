// The flag/config/resume rules: "did you mean" (llmc/app/flag_suggest.h), --config reading a TOML file
// strictly or a run's config.json (llmc/app/cli.h), and the run record that -y 1 and --fork-from
// continue (llmc/app/run_record.h): its settings as the base, the changes as "history".
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/app/cli.h"
#include "llmc/app/config_json.h"
#include "llmc/app/flag_suggest.h"
#include "llmc/app/run_record.h"
#include "llmc/app/validate.h"
#include "test/test_util.h"

using Catch::Matchers::Contains;

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
    for (const char* text : {"qknorm=true\n", "[train]\nlearning-rate=0.001\n", "seq_len=32\n"}) {
        INFO(text);
        write(dir.file("c.toml"), text);
        llmc::TrainCli cli;
        REQUIRE(parse_args(cli, {"--config", dir.file("c.toml")}) == 1);
    }
    write(dir.file("ok.toml"), "qk-norm=true\nseq-len=32\nt=16\n");
    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, {"--config=" + dir.file("ok.toml")}) == -1);
    REQUIRE(cli.config().overrides.qk_norm);
}

TEST_CASE("--config reads a run's config.json: train (with its history) and the model as flags", "[config]") {
    llmc_test::TempDir dir;
    nlohmann::ordered_json rec = record_of(
        {"-i", "d/train_*.bin", "-l", "3e-3", "-b", "8", "--z-loss", "1e-4", "-o", "out/run", "--qk-clip", "50"});
    rec["history"] = {{{"step", 4}, {"flag", "--learning-rate"}, {"old", 0.003}, {"new", 0.001}}};
    write(dir.file("config.json"), llmc::json_file_text(rec));

    llmc::TrainCli cli;
    REQUIRE(parse_args(cli, {"--config", dir.file("config.json"), "-b", "2"}) == -1);
    const llmc::TrainConfig& c = cli.config();
    REQUIRE(c.train_data == "d/train_*.bin");
    REQUIRE(c.learning_rate == 1e-3f);  // the history's value
    REQUIRE(c.batch_size == 2);         // the command line wins
    REQUIRE(c.z_loss == 1e-4f);
    REQUIRE(c.qk_clip == 50.0f);
    REQUIRE(c.output_dir == "out/run");
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
    REQUIRE(parse_args(by_content, {"--config", dir.file("settings.cfg")}) == -1);
    REQUIRE(by_content.config().learning_rate == 1e-3f);

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
    REQUIRE(c.train_data == "d/train_*.bin");
    REQUIRE(c.val_data == "d/val_*.bin");
    REQUIRE(c.learning_rate == 3e-4f);
    REQUIRE(c.batch_size == 8);
    REQUIRE(c.seq_len == 32);
    REQUIRE(c.max_steps == 10);
    REQUIRE(c.qk_clip == 50.0f);
    REQUIRE(c.overrides.layers == 2);
    REQUIRE(c.overrides.vocab == 256);
    REQUIRE(c.threads == 0);  // launch settings: never from the record
    REQUIRE(c.device == "auto");
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
    const nlohmann::ordered_json after = llmc::record_with_history(rec, ch, 10);
    REQUIRE(after["train"] == rec["train"]);
    REQUIRE(after["history"].dump() ==
            "[{\"step\":10,\"flag\":\"--max-steps\",\"old\":10,\"new\":20},"
            "{\"step\":10,\"flag\":\"--learning-rate\",\"old\":0.0003,\"new\":0.0001}]");
    write(out + "/config.json", llmc::json_file_text(after));
    llmc::TrainCli again;
    REQUIRE(parse_args(again, {"-o", out, "-y", "1"}) == -1);
    REQUIRE(again.config().learning_rate == 1e-4f);
    REQUIRE(again.config().max_steps == 20);
    REQUIRE(again.config().record_changes.empty());
    const nlohmann::ordered_json twice = llmc::record_with_history(after, {{"--z-loss", 0.0, 0.001}}, 20);
    REQUIRE(twice["history"].size() == 3);
    REQUIRE(twice["history"][2]["step"] == 20);

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
    REQUIRE(fork.config().train_data == "d/train_*.bin");
    REQUIRE(fork.config().output_dir == dir.file("branch"));
    REQUIRE(fork.config().overrides.layers == 2);
    REQUIRE(fork.config().record_changes.size() == 1);
    REQUIRE(fork.config().record_changes[0].flag == "--qk-clip");

    llmc::TrainConfig both = fork.config();
    both.resume = 1;
    REQUIRE_THROWS_WITH(llmc::validate_train_flags(both), Contains("drop one of them"));
}
