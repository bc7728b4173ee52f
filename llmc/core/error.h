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

// An InputError every rank of a multi-process run throws at the same point with the same message (a
// check all ranks decide together, llmc/app/rank_agreement.h): main() prints it once, on rank 0.
struct InputErrorOnEveryRank : InputError {
    using InputError::InputError;
};

// What main() prints after "error: " for the exception that ended the program: an InputError's own
// line; for host memory running out (std::bad_alloc: a model that passes validation but does not
// fit, docs/reliability.md) the problem and `oom_fix`, what to make smaller; anything else is a bug
// of ours, "internal error: <what>". The overload follows the exception's static type: a catch block
// calls current_error_message, which rethrows what it caught to find its type.
inline std::string error_message(const InputError& e, const std::string& /*oom_fix*/) { return e.what(); }
inline std::string error_message(const std::bad_alloc& e, const std::string& oom_fix) {
    return std::string("out of memory (") + e.what() +
           "): this machine's memory cannot hold the model and its buffers; " + oom_fix;
}
inline std::string error_message(const std::exception& e, const std::string& /*oom_fix*/) {
    return std::string("internal error: ") + e.what();
}

// error_message of the std::exception being handled; call only inside its catch block.
inline std::string current_error_message(const std::string& oom_fix) {
    try {
        throw;
    } catch (const InputError& e) { return error_message(e, oom_fix); } catch (const std::bad_alloc& e) {
        return error_message(e, oom_fix);
    } catch (const std::exception& e) { return error_message(e, oom_fix); }
}

}  // namespace llmc
