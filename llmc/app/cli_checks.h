// Checks on the values of our two programs' flags (train_gpt2_ls: llmc/app/cli.h, generate_gpt2_ls:
// llmc/app/generate_cli.h), kept in one place so both read the same values the same way and say the
// same line for a value CLI11 cannot convert (conversion_error).
// Each check is a CLI11 transform: it runs before the other checks and the conversion, and the text it
// leaves is what config_to_str writes to config.toml, so that text must read back as itself.
#pragma once
#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "llmc/app/on_off_text.h"

namespace llmc {

// `v` without the white space at either end (the set CLI11's config reader trims).
inline std::string trim_space(const std::string& v) {
    auto space = [](char ch) { return std::isspace((unsigned char)ch) != 0; };
    size_t first = 0, end = v.size();
    while (first < end && space(v[first])) first++;
    while (end > first && space(v[end - 1])) end--;
    return v.substr(first, end - first);
}

// The text of a number as CLI11 2.1 reads it, made canonical (both found by test/fuzz/fuzz_config.cpp;
// docs/reliability.md):
//   - white space around it is removed: CLI11 converts " 64" to 64 (strtoll skips it) but keeps the
//     text " 64", which config.toml then held unquoted, read back as "64" (a different config.toml);
//   - an empty value ("-l ''", "learning-rate=" in a config file) is refused: CLI11 converts it to 0;
//   - leading zeros of a whole number are dropped ("-t 064" -> "64"): CLI11 converts integers with
//     strtoll's base 0, which reads a leading 0 as octal (064 = 52); everyone writing 064 means 64.
inline CLI::Validator number_text_check() {
    return CLI::Validator(
        [](std::string& v) {
            v = trim_space(v);
            if (v.empty()) return std::string("an empty value is not a number; give one");
            const size_t sign = v[0] == '+' || v[0] == '-' ? 1 : 0;
            if (v.size() > sign + 1 && v[sign] == '0' && v.find_first_not_of("0123456789", sign) == std::string::npos) {
                const size_t first = v.find_first_not_of('0', sign);
                v = v.substr(0, sign) + (first == std::string::npos ? "0" : v.substr(first));
            }
            return std::string();
        },
        "");
}

// The text of an unsigned integer (--seed, a uint64_t): digits only, at most 2^64-1. CLI11 2.1 reads
// it with strtoull, which wraps "-1" to 2^64-1 and clamps 99999999999999999999 to it (several seeds
// one run); both are refused, as a signed flag refuses a value out of its range. Runs after
// number_text_check (trimmed, leading zeros dropped).
inline CLI::Validator unsigned_text_check() {
    return CLI::Validator(
        [](std::string& v) {
            static const std::string kMax = "18446744073709551615";  // 2^64-1
            const std::string digits = !v.empty() && (v[0] == '+' || v[0] == '-') ? v.substr(1) : v;
            const bool whole = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
            if (!whole) return std::string();  // not an integer (e.g. 1e3): CLI11's conversion refuses it
            const std::string abs =
                digits.find_first_not_of('0') == std::string::npos ? "0" : digits.substr(digits.find_first_not_of('0'));
            const bool fits = abs.size() < kMax.size() || (abs.size() == kMax.size() && abs <= kMax);
            if (fits && (v[0] != '-' || abs == "0")) return std::string();
            return v + " is outside 0.." + kMax + "; give an integer in that range";
        },
        "");
}

// The text of a 64-bit signed integer flag (-d, a long; llmc/app/cli.h adds it to those): digits beyond its
// range are refused. CLI11 2.1 reads a long with strtoll, which clamps 99999999999999999999 to 2^63-1
// without a word; a narrower flag's overflow is CLI11's conversion error ("is too large", cli.h). Runs
// after number_text_check.
inline CLI::Validator signed_text_check() {
    return CLI::Validator(
        [](std::string& v) {
            static const std::string kMax = "9223372036854775807", kMinAbs = "9223372036854775808";
            const bool negative = !v.empty() && v[0] == '-';
            const std::string digits = !v.empty() && (v[0] == '+' || v[0] == '-') ? v.substr(1) : v;
            if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::string();
            const size_t first = digits.find_first_not_of('0');
            const std::string abs = first == std::string::npos ? "0" : digits.substr(first);
            const std::string& limit = negative ? kMinAbs : kMax;
            if (abs.size() < limit.size() || (abs.size() == limit.size() && abs <= limit)) return std::string();
            return v + " is outside -" + kMinAbs + ".." + kMax + "; give an integer in that range";
        },
        "");
}

// Throws CLI11's conversion error for `name` when v spells a hexadecimal number ("0x10", "-0X1p-10"):
// strtoll's base 0 and strtold read them, a spelling no flag documents (float_text_check,
// integer_text_check).
inline void refuse_hexadecimal(const std::string& name, const std::string& v) {
    const size_t sign = !v.empty() && (v[0] == '+' || v[0] == '-') ? 1 : 0;
    if (v.size() > sign + 1 && v[sign] == '0' && (v[sign + 1] == 'x' || v[sign + 1] == 'X'))
        throw CLI::ConversionError(name, std::vector<std::string>{v});
}

// The text of a float flag (`name`, as CLI11's get_name gives it: "--learning-rate"; every float flag
// of ours is a C++ float): a finite number in decimal that a float holds, 0 or a magnitude in [FLT_MIN,
// FLT_MAX] (the refusal names the range, and 0 when `takes_zero`: whether the flag takes 0 is its own
// rule, e.g. --temperature > 0, which the caller evaluates). CLI11 2.1 reads "inf", "nan" and 1e400 (inf as a float; the weights then go non-finite),
// and turns 1e-50 into 0 and 1e-40 into a denormal without a word: all refused. It also reads a
// hexadecimal float ("0x1p-10" = 2^-10, strtold), a spelling no flag documents: refused as CLI11's
// conversion error, as integer_text_check refuses "0x10". Runs after number_text_check; text that is not
// a number is left to CLI11's conversion.
inline CLI::Validator float_text_check(const std::string& name, bool takes_zero) {
    return CLI::Validator(
        [name, takes_zero](std::string& v) {
            refuse_hexadecimal(name, v);
            const char* s = v.c_str();
            char* end = nullptr;
            const long double d = std::strtold(s, &end);
            if (end == s || *end != '\0') return std::string();  // not a number: CLI11 refuses it
            // the range a float holds, and 0 where the flag takes it
            char range[96];
            std::snprintf(range, sizeof range, "%sa magnitude in [%.9g, %.9g]", takes_zero ? "0 or " : "",
                          (double)FLT_MIN, (double)FLT_MAX);
            if (!std::isfinite(d)) return "'" + v + "' is not a finite number; give a finite value (" + range + ")";
            const float f = static_cast<float>(d);  // what the flag holds: the bounds as printed round to it
            if (std::isinf(f)) return "'" + v + "' is not a finite number as a float (it would be inf); give " + range;
            if (d != 0 && std::fpclassify(f) != FP_NORMAL)
                return "'" + v +
                       "' is below the smallest normal float (it would be read as 0 or lose precision); give " + range;
            return std::string();
        },
        "");
}

// The text of an integer flag (`name`, as CLI11's get_name gives it: "--max-steps") is decimal digits
// with an optional sign: CLI11 2.1 converts integers with strtoll's base 0, which reads "0x10" as 16
// (and "-y 0x1" as -y 1), a spelling no flag documents. Refused as CLI11's conversion error, so that
// conversion_error says it as it says "1e3". Other text that is not an integer is left to CLI11's
// conversion, which refuses it (all of a repeated flag's values at once). Runs after number_text_check.
inline CLI::Validator integer_text_check(const std::string& name) {
    return CLI::Validator(
        [name](std::string& v) {
            refuse_hexadecimal(name, v);
            return std::string();
        },
        "");
}

// A bound for an integer option, in one line: "must be >= 1 (got 0)", "must be <= 1 (got 2)" (CLI11's
// PositiveNumber says "Value 0 not in range 0.000000 to 1.797...e308" with every digit of DBL_MAX).
// Text that is not an integer is left to CLI11's conversion.
inline CLI::Validator integer_bound(long long bound, bool upper) {
    return CLI::Validator(
        [bound, upper](std::string& v) {
            const char* s = v.c_str();
            char* end = nullptr;
            const long long x = std::strtoll(s, &end, 10);
            if (end == s || *end != '\0' || (upper ? x <= bound : x >= bound)) return std::string();
            return std::string(upper ? "must be <= " : "must be >= ") + std::to_string(bound) + " (got " + v + ")";
        },
        "");
}
inline CLI::Validator at_least(long long min) { return integer_bound(min, false); }
inline CLI::Validator at_most(long long max) { return integer_bound(max, true); }

// The value of an on/off flag ("qk-norm=..." in a config file, "--eval-only=..." on the command line)
// as "true" or "false". CLI11 2.1 reads a flag's value with std::stoll, which stops at the first
// character that is not a digit, so "eval-only=9'x" meant on, and config.toml kept the text
// (found by fuzz_config). Accepted after trimming: what on_off_text reads as on or off (CLI11 2.1's words
// and a whole integer); the rest is refused.
// An empty value ("--qk-norm=", "qk-norm=" in a file) never gets here: CLI11 reads it as the flag
// given without a value, on.
inline CLI::Validator flag_text_check() {
    return CLI::Validator(
        [](std::string& v) {
            const int on = on_off_text(trim_space(v));
            if (on >= 0) {
                v = on ? "true" : "false";
                return std::string();
            }
            return std::string("is not a value for an on/off flag; give true or false");
        },
        "");
}

// An integer flag and the range of its field's C++ type, which conversion_error names.
struct IntRange {
    std::string flag;          // "--max-steps"
    std::string lo, hi;        // std::numeric_limits<T>::min() and max()
    bool zero_or_one = false;  // its own rule takes 0 and 1 only (--shuffle, -y): named instead of the range
    // a 0/1 flag's refusal as its range check words it, "{}" for the value: "-y/--resume must be 0 or 1
    // (got {}); -y 1 resumes the run in -o" ("" for "<flag> takes 0 or 1, not '<value>'")
    std::string zero_or_one_error;
};
template <class T>
IntRange int_range(const std::string& flag) {
    IntRange r;
    r.flag = flag;
    r.lo = std::to_string(std::numeric_limits<T>::min());
    r.hi = std::to_string(std::numeric_limits<T>::max());
    return r;
}

// The error line for CLI11's ConversionError `what` of a flag of `app` (`ranges`: its integer flags'):
// "Could not convert: --max-steps = 1e3" as what the flag takes, "--max-steps takes an integer in
// digits (e.g. 1000, not 1e3), not '1e3'"; an integer beyond the flag's type is "too large" with its
// range; a 0/1 flag (IntRange::zero_or_one) is refused whatever the value ("--shuffle false") in the
// words of its range check (IntRange::zero_or_one_error), else "takes 0 or 1". A comma typed inside a
// value is named as the separator it was likely meant as, which no
// flag reads: a thousands separator for an integer flag, a decimal point for any other (a float flag);
// a comma only between values is CLI11's, which joins them when a flag is given more than once.
inline std::string conversion_error(const CLI::App& app, const std::vector<IntRange>& ranges, const std::string& what) {
    const size_t name = what.find("--"), eq = what.find(" = ");
    if (name == std::string::npos || eq == std::string::npos || eq < name)
        return what + "; run with --help for the flags";
    const std::string flag = what.substr(name, eq - name);
    const CLI::Option* opt = app.get_option_no_throw(flag);
    // a flag given more than once: CLI11 converts the last value (what joins them all with commas)
    const bool repeated = opt != nullptr && opt->count() > 1 && !opt->results().empty();
    const std::string value = repeated ? opt->results().back() : what.substr(eq + 3);
    const std::string type = opt == nullptr ? "" : opt->get_type_name();
    const bool integer = type == "INT" || type == "UINT";
    const size_t sign = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
    const bool digits = value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
    const IntRange* range = nullptr;
    for (const IntRange& r : ranges)
        if (integer && r.flag == flag) range = &r;
    const bool zero_or_one = range != nullptr && range->zero_or_one;
    if (zero_or_one && !range->zero_or_one_error.empty()) {
        std::string line = range->zero_or_one_error;
        for (size_t at = line.find("{}"); at != std::string::npos; at = line.find("{}", at + value.size()))
            line.replace(at, 2, value);
        return line;
    }
    if (range != nullptr && !zero_or_one && digits)
        return flag + " " + value + " is too " + (value[0] == '-' ? "small" : "large") + ": it takes an integer in " +
               range->lo + ".." + range->hi + "; fix its value";
    const std::string takes = zero_or_one       ? "0 or 1"
                              : integer         ? "an integer in digits (e.g. 1000, not 1e3)"
                              : type == "FLOAT" ? "a number (e.g. 6e-4)"
                                                : "a " + type + " value";
    const bool typed_comma = value.find(',') != std::string::npos;  // in the value converted, as typed
    const std::string comma = typed_comma && !zero_or_one
                                  ? (integer ? " (a comma is not read as a thousands separator: write 1000, not 1,000)"
                                             : " (a comma is not read as a decimal point: write 1.5, not 1,5)")
                                  : "";
    if (repeated && comma.empty()) {  // name each value given, and the one converted
        std::string all;
        for (const std::string& r : opt->results()) all += (all.empty() ? "'" : ", '") + r + "'";
        return flag + " takes " + takes + ", not '" + opt->results().back() + "' (given " +
               std::to_string(opt->results().size()) + " times: " + all + "; the last one given is taken)" +
               "; fix its value";
    }
    return flag + " takes " + takes + ", not '" + value + "'" + comma + "; fix its value";
}

// Adds number_text_check() to every option that takes a number (its type name is not "TEXT", nor
// "TEXT:{cpu,cuda}", a text option with a set of values, and not empty: --config's and the flags')
// integer_text_check() to the integer ones, unsigned_text_check() to the unsigned ones,
// float_text_check() to the float ones (`zero_floats`: the float flags, "--z-loss", whose rule takes 0),
// and flag_text_check() to every flag (no value needed): ours are all on/off (--help too, which
// exits before any check). A counting flag (add_flag bound to an int, "-v -v") would need its own.
inline void check_flag_values(CLI::App& app, const std::vector<std::string>& zero_floats = {}) {
    const CLI::Validator number_text = number_text_check(), flag_text = flag_text_check();
    const CLI::Validator unsigned_text = unsigned_text_check();
    for (CLI::Option* opt : app.get_options()) {
        const std::string type = opt->get_type_name();
        if (opt->get_expected_min() == 0) opt->transform(flag_text);
        else if (opt->get_type_size() > 0 && !type.empty() && type.rfind("TEXT", 0) != 0) opt->transform(number_text);
        if ((type == "INT" || type == "UINT") && opt->get_expected_min() != 0)
            opt->check(integer_text_check(opt->get_name()));
        if (type == "UINT" && opt->get_expected_min() != 0) opt->check(unsigned_text);
        if (type == "FLOAT" && opt->get_expected_min() != 0)
            opt->check(float_text_check(opt->get_name(), std::find(zero_floats.begin(), zero_floats.end(),
                                                                   opt->get_name()) != zero_floats.end()));
    }
}

}  // namespace llmc
