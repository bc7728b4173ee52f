// Errors caused by the user's input (files, flags, checkpoints). The message is one line that
// names the problem and the fix; main() prints "error: <message>" and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace llmc {

struct InputError : std::runtime_error {
    explicit InputError(const std::string& msg) : std::runtime_error(msg) {}
};

}  // namespace llmc
