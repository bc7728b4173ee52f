// RunLog: the trainer's console output (rank 0), printed on stdout and, with -o, also kept in the
// output directory:
//   <out>/console.log   every line the run printed on stdout (header, step lines, samples,
//                       checkpoint lines, summary), in order
//   <out>/samples.txt   the samples only, each under its "--- sample at step N ---" header
// Both are opened for appending (created when missing) and never truncated: a resumed run adds its
// lines after the interrupted one's, so the file is the whole history of the directory (a resumed run
// repeats the steps after its checkpoint, and their lines appear twice). Each print is handed to
// the OS with one write(2) per file, so a killed run leaves every printed line. Errors and warnings go
// to stderr, not here. Opened after every check of the run has passed (a refused run writes nothing).
// A stdout whose pipe has no reader any more (EPIPE: SIGPIPE is ignored while run_training runs,
// llmc/train/interrupt.h) is closed for good: stdout then points at /dev/null (so that nothing buffered
// there can fail later), console.log keeps every line, and stdout_closed() tells the loop to stop.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "llmc/core/error.h"
#include "llmc/io/atomic_file.h"

namespace llmc {

class RunLog {
public:
    RunLog() = default;
    ~RunLog() { close(); }
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;

    // Opens <dir>/console.log and <dir>/samples.txt for appending.
    void open(const std::string& dir) {
        close();
        console_ = open_append(dir + "/console.log");
        samples_ = open_append(dir + "/samples.txt");
        dir_ = dir;
    }
    void close() {
        if (console_ >= 0) ::close(console_);
        if (samples_ >= 0) ::close(samples_);
        console_ = samples_ = -1;
    }

    // Prints text on stdout (flushed) and appends it to console.log.
    void print(const std::string& text) {
        if (!stdout_closed_) {  // (a text over stdio's buffer fails in fwrite, whose errno then stays)
            errno = 0;
            const bool written = std::fwrite(text.data(), 1, text.size(), stdout) == text.size();
            const int fwrite_errno = errno;
            if (!written && fwrite_errno == EPIPE) close_stdout();
            else if (std::fflush(stdout) != 0 && errno == EPIPE) close_stdout();
        }
        append(console_, text, "console.log");
    }
    // Whether stdout's reader went away (EPIPE) during a print.
    bool stdout_closed() const { return stdout_closed_; }
    // print() of a printf format.
    __attribute__((format(printf, 2, 3))) void printf(const char* format, ...) {
        va_list args, again;
        va_start(args, format);
        va_copy(again, args);
        const int n = std::vsnprintf(nullptr, 0, format, args);
        va_end(args);
        std::string text(n > 0 ? (size_t)n : 0, '\0');
        if (n > 0) std::vsnprintf(&text[0], (size_t)n + 1, format, again);
        va_end(again);
        print(text);
    }
    // A sample of step `step`: printed (and in console.log) and appended to samples.txt.
    void sample(int step, const std::string& text) {
        const std::string block = "--- sample at step " + std::to_string(step) + " ---\n" + text + "\n---\n";
        print(block);
        append(samples_, block, "samples.txt");
    }

private:
    void close_stdout() {
        stdout_closed_ = true;
        std::clearerr(stdout);
        const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0) {
            ::dup2(null, STDOUT_FILENO);
            ::close(null);
        }
    }
    static int open_append(const std::string& path) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            throw InputError("cannot open " + path + " for appending (" + std::strerror(errno) +
                             "); check that -o is a writable directory");
        return fd;
    }
    void append(int fd, const std::string& text, const char* name) {
        if (fd < 0) return;
        const char* p = text.data();
        size_t left = text.size();
        while (left > 0) {
            const ssize_t n = ::write(fd, p, left);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                const int err = n < 0 ? errno : EIO;
                throw InputError("writing to " + dir_ + "/" + name + " failed (" + std::strerror(err) + "); check " +
                                 write_error_hint(err, dir_));
            }
            p += n;
            left -= (size_t)n;
        }
    }

    int console_ = -1, samples_ = -1;
    std::string dir_;
    bool stdout_closed_ = false;
};

}  // namespace llmc
