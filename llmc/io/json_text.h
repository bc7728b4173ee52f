// JSON as text: the files we write (config.json, eval.json), values quoted in error lines, and records
// written every training step without an nlohmann tree (JsonObjectText, append_json_*: building the
// tree cost more than the step's other host work, llmc/io/metrics.h logit_stats_line).
#pragma once
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

namespace llmc {

// A file's text: indented by 2, a newline at the end. Paths and names are bytes that need not be UTF-8
// (an -o directory with a Latin-1 name): each invalid byte is written as U+FFFD instead of nlohmann
// throwing type_error 316 (found by test/fuzz/fuzz_config.cpp).
inline std::string json_file_text(const nlohmann::ordered_json& j) {
    return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

// The offset of the first byte of `s` that is not part of valid UTF-8 (a Latin-1 'é' is the lone byte
// 0xE9), or std::string::npos when s is valid UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF are invalid, as nlohmann's dump finds them).
inline size_t first_invalid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = (unsigned char)s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return i;
        unsigned cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
        for (size_t k = 1; k < n; k++) {
            const unsigned char cc = (unsigned char)s[i + k];
            if ((cc >> 6) != 0x2) return i;
            cp = (cp << 6) | (cc & 0x3Fu);
        }
        const unsigned min = n == 2 ? 0x80u : n == 3 ? 0x800u : n == 4 ? 0x10000u : 0u;
        if (cp < min || cp > 0x10FFFFu || (cp >= 0xD800u && cp <= 0xDFFFu)) return i;
        i += n;
    }
    return std::string::npos;
}

// `s` for an error line: each byte outside printable ASCII as \xNN.
inline std::string escaped_bytes(const std::string& s) {
    std::string out;
    for (const char ch : s) {
        const unsigned char c = (unsigned char)ch;
        if (c >= 0x20 && c < 0x7F) {
            out += ch;
        } else {
            static const char* hex = "0123456789abcdef";
            out += std::string("\\x") + hex[c >> 4] + hex[c & 0xF];
        }
    }
    return out;
}

// A JSON value for an error line: a number, string, bool or null as written (ASCII, at most 40
// characters), else its type ("array", "object"; dumping a deeply nested one would recurse per level).
inline std::string json_value_brief(const nlohmann::ordered_json& v) {
    if (!v.is_primitive()) return v.type_name();
    return v.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace).substr(0, 40);
}

namespace detail {

// A finite double's text that reads back to the same double, into buf (>= 32 bytes); its length.
// "%.17g": 17 significant digits always suffice.
inline size_t double_text_17g(char* buf, size_t size, double x) {
    const int written = std::snprintf(buf, size, "%.17g", x);
    if (written <= 0 || (size_t)written >= size) throw std::logic_error("double_text_17g: snprintf failed");
    return (size_t)written;
}

#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
constexpr bool kShortestDoubleText = true;
// The shortest such text (std::to_chars, floating point: libstdc++ of GCC 11 or later).
inline size_t double_text(char* buf, size_t size, double x) {
    const std::to_chars_result r = std::to_chars(buf, buf + size, x);
    if (r.ec != std::errc()) throw std::logic_error("double_text: std::to_chars failed");
    return (size_t)(r.ptr - buf);
}
#else
constexpr bool kShortestDoubleText = false;
// A standard library without floating-point std::to_chars (nvcc's host compiler before GCC 11).
inline size_t double_text(char* buf, size_t size, double x) { return double_text_17g(buf, size, x); }
#endif

}  // namespace detail

// A double as JSON text at the end of `out`: text that reads back to the same double (the same value
// nlohmann's dump() writes, not always the same digits; detail::double_text), ".0" added when that text
// is an integer (a reader gets a float, as from dump()), null when not finite (JSON has no NaN or Inf;
// json_float's rule).
inline void append_json_double(std::string& out, double x) {
    if (!std::isfinite(x)) {
        out += "null";
        return;
    }
    char buf[40];  // the shortest text of a double is at most 24 characters, "%.17g"'s 24
    const size_t n = detail::double_text(buf, sizeof buf, x);
    out.append(buf, n);
    if (!std::memchr(buf, '.', n) && !std::memchr(buf, 'e', n)) out += ".0";
}

inline void append_json_int(std::string& out, long long x) {
    char buf[24];
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, x);
    out.append(buf, r.ptr);
}

inline void append_json_bool(std::string& out, bool x) { out += x ? "true" : "false"; }

// `"key":` (keys are the callers' literals: nothing to escape).
inline void append_json_key(std::string& out, const char* key) {
    out += '"';
    out += key;
    out += "\":";
}

// One JSON object's text appended to `out`: `{` when made, then its members in call order (commas
// between), `}` at close().
class JsonObjectText {
public:
    explicit JsonObjectText(std::string& out) : out_(out) { out_ += '{'; }
    JsonObjectText(const JsonObjectText&) = delete;
    JsonObjectText& operator=(const JsonObjectText&) = delete;
    // The next member's key; its value is appended next (e.g. an array the caller writes).
    void key(const char* k) {
        if (closed_) throw std::logic_error(std::string("JsonObjectText: member '") + k + "' after close()");
        if (!first_) out_ += ',';
        first_ = false;
        append_json_key(out_, k);
    }
    void integer(const char* k, long long v) {
        key(k);
        append_json_int(out_, v);
    }
    void number(const char* k, double v) {
        key(k);
        append_json_double(out_, v);
    }
    void boolean(const char* k, bool v) {
        key(k);
        append_json_bool(out_, v);
    }
    void close() {
        if (closed_) throw std::logic_error("JsonObjectText: close() twice");
        closed_ = true;
        out_ += '}';
    }

private:
    std::string& out_;
    bool first_ = true, closed_ = false;
};

}  // namespace llmc
