// Checks every numeric flag of our two programs gets (train_gpt2_ls: llmc/cli.h, generate_gpt2_ls:
// llmc/generate_cli.h), kept in one place so both refuse the same values the same way.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace llmc {

// CLI11 2.1 turns an empty value ("-l ''", "learning-rate=" in a config file) into 0 for a number;
// this refuses it (found by test/fuzz/fuzz_config.cpp; docs/reliability.md).
inline CLI::Validator number_given_check() {
    return CLI::Validator(
        [](std::string& v) { return v.empty() ? std::string("an empty value is not a number; give one") : std::string(); },
        "");
}

// Adds number_given_check() to every option of `app` that takes a number: its type name is not
// "TEXT" (nor "TEXT:{cpu,cuda}", a text option with a set of values) and not empty (--config's).
inline void refuse_empty_numbers(CLI::App& app) {
    const CLI::Validator number_given = number_given_check();
    for (CLI::Option* opt : app.get_options()) {
        const std::string type = opt->get_type_name();
        if (opt->get_type_size() > 0 && !type.empty() && type.rfind("TEXT", 0) != 0) opt->check(number_given);
    }
}

}  // namespace llmc
