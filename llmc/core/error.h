// Errors caused by the user's input (files, flags, checkpoints). The message is one line that
// names the problem and the fix; main() prints "error: <message>" and exits non-zero.
#pragma once
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace llmc {

struct InputError : std::runtime_error {
    explicit InputError(const std::string& msg) : std::runtime_error(msg) {}
};

// What main() prints after "error: " for the exception that ended the program: an InputError's own
// line; for host memory running out (std::bad_alloc: a model that passes validation but does not
// fit, docs/reliability.md) the problem and `oom_fix`, what to make smaller; anything else is a bug
// of ours, "internal error: <what>".
inline std::string error_message(const std::exception& e, const std::string& oom_fix) {
    if (dynamic_cast<const InputError*>(&e) != nullptr) return e.what();
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
        return std::string("out of memory (") + e.what() + "): this machine's memory cannot hold the model and its buffers; " +
               oom_fix;
    return std::string("internal error: ") + e.what();
}

}  // namespace llmc
