// JSON as text: the files we write (config.json, eval.json) and values quoted in error lines.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace llmc {

// A file's text: indented by 2, a newline at the end. Paths and names are bytes that need not be UTF-8
// (an -o directory with a Latin-1 name): each invalid byte is written as U+FFFD instead of nlohmann
// throwing type_error 316 (found by test/fuzz/fuzz_config.cpp).
inline std::string json_file_text(const nlohmann::ordered_json& j) {
    return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

// A JSON value for an error line: a number, string, bool or null as written (ASCII, at most 40
// characters), else its type ("array", "object"; dumping a deeply nested one would recurse per level).
inline std::string json_value_brief(const nlohmann::ordered_json& v) {
    if (!v.is_primitive()) return v.type_name();
    return v.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace).substr(0, 40);
}

}  // namespace llmc
