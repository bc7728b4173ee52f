// What the text of an on/off flag's value says, for the two places that read one: the check of a
// flag's value (cli_checks.h flag_text_check) and the mistake of a value after a space
// (argv_mistakes.h on_off_value_error).
#pragma once

#include <cctype>
#include <string>

namespace llmc {

// 1 for on, 0 for off, -1 for text that is no value of an on/off flag. Accepted, any case: the words
// CLI11 2.1's to_flag_value knows, true/false, on/off, yes/no, enable/disable, t/f, y/n, +/-, and a
// whole integer with an optional sign (> 0 is on). No space is trimmed.
inline int on_off_text(std::string word) {
    for (char& ch : word) ch = (char)std::tolower((unsigned char)ch);
    for (const char* on : {"true", "on", "yes", "enable", "t", "y", "+"})
        if (word == on) return 1;
    for (const char* off : {"false", "off", "no", "disable", "f", "n", "-"})
        if (word == off) return 0;
    const size_t digits = !word.empty() && (word[0] == '+' || word[0] == '-') ? 1 : 0;  // after a sign
    if (digits == word.size() || word.find_first_not_of("0123456789", digits) != std::string::npos) return -1;
    return word[0] != '-' && word.find_first_not_of('0', digits) != std::string::npos ? 1 : 0;
}

}  // namespace llmc
