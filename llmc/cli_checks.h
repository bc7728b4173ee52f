// Checks every numeric flag of our two programs gets (train_gpt2_ls: llmc/cli.h, generate_gpt2_ls:
// llmc/generate_cli.h), kept in one place so both read the same values the same way.
#pragma once
#include <cctype>
#include <string>

#include <CLI/CLI.hpp>

namespace llmc {

// The text of a number as CLI11 2.1 reads it, made canonical (both found by test/fuzz/fuzz_config.cpp;
// docs/reliability.md):
//   - white space around it is removed: CLI11 converts " 64" to 64 (strtoll skips it) but keeps the
//     text " 64", which config.toml then held unquoted, read back as "64" (a different config.toml);
//   - an empty value ("-l ''", "learning-rate=" in a config file) is refused: CLI11 converts it to 0.
inline CLI::Validator number_text_check() {
    return CLI::Validator(
        [](std::string& v) {
            auto space = [](char ch) { return std::isspace((unsigned char)ch) != 0; };
            while (!v.empty() && space(v.back())) v.pop_back();
            size_t first = 0;
            while (first < v.size() && space(v[first])) first++;
            v.erase(0, first);
            return v.empty() ? std::string("an empty value is not a number; give one") : std::string();
        },
        "");
}

// Adds number_text_check() as the first check (a transform: it edits the text the others and the
// conversion see) of every option of `app` that takes a number: its type name is not "TEXT" (nor
// "TEXT:{cpu,cuda}", a text option with a set of values) and not empty (--config's).
inline void check_number_flags(CLI::App& app) {
    const CLI::Validator number_text = number_text_check();
    for (CLI::Option* opt : app.get_options()) {
        const std::string type = opt->get_type_name();
        if (opt->get_type_size() > 0 && !type.empty() && type.rfind("TEXT", 0) != 0) opt->transform(number_text);
    }
}

}  // namespace llmc
