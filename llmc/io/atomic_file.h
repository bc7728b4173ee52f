// Crash-safe file writing: data goes to a temporary file in the target's own directory, which is
// fsynced, renamed over the target and followed by an fsync of the directory. A reader therefore
// sees either the old file or the complete new one, never a torn write, and a failed write
// (disk full, unwritable directory, crash) leaves any existing file at the target untouched.
// POSIX only (open/write/fsync/rename). Host-only, no GPU needed.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/core/error.h"

namespace llmc {

// Directory part of a path ("." when it has none).
inline std::string parent_dir(const std::string& path) {
    size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

// fsync a directory so that a rename or unlink inside it is durable.
inline void fsync_dir(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        throw InputError("cannot open directory " + dir + " to fsync it: " + std::strerror(errno) +
                         "; check that it exists and is readable");
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    // Some filesystems do not support fsync on directories (EINVAL); the rename itself is done.
    if (rc != 0 && err != EINVAL)
        throw InputError("fsync of directory " + dir + " failed: " + std::strerror(err) + "; check the filesystem");
}

// What to check after a failed write with errno err into directory dir (the end of an error line).
inline std::string write_error_hint(int err, const std::string& dir) {
    if (err == EFBIG) return "the file-size limit of this process (ulimit -f)";
    if (err == ENOSPC || err == EDQUOT) return "free disk space (and quota) of " + dir;
    return "free disk space and permissions of " + dir;
}

// Makes a write past the file-size limit (RLIMIT_FSIZE, `ulimit -f`) fail with EFBIG instead of
// killing the process with SIGXFSZ (whose default action is to terminate and dump core), so the
// error path runs: an AtomicFile leaves the target unchanged and removes its temporary file, a
// JSONL writer (llmc/io/metrics.h) rolls back its partial line, and the binary prints one error line.
// Call once at the start of main() of a binary that writes output files.
inline void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

// Usage: AtomicFile f(path); f.write(p, n); ...; f.commit();
// If commit() is never reached (an exception, an early return) the destructor removes the
// temporary file and the target is left as it was.
class AtomicFile {
public:
    explicit AtomicFile(const std::string& path) : path_(path) {
        // "<dir>/<name>.tmp.XXXXXX": same directory as the target so rename() is atomic.
        std::string templ = path + ".tmp.XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        fd_ = ::mkstemp(buf.data());
        if (fd_ < 0)
            throw InputError("cannot create a temporary file next to " + path + ": " + std::strerror(errno) +
                             "; check that " + parent_dir(path) + " exists and is writable");
        tmp_path_ = buf.data();
        ::fchmod(fd_, 0644);  // mkstemp makes 0600; checkpoints are ordinary files
    }
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    ~AtomicFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_ && !tmp_path_.empty()) ::unlink(tmp_path_.c_str());
    }

    void write(const void* data, size_t bytes) {
        const char* p = static_cast<const char*>(data);
        while (bytes > 0) {
            ssize_t n = ::write(fd_, p, bytes);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                const int err = n < 0 ? errno : EIO;
                fail("writing " + tmp_path_ + " failed: " + std::strerror(err), err);
            }
            p += n;
            bytes -= (size_t)n;
        }
    }

    // fsync the data, rename over the target, fsync the directory.
    void commit() {
        if (::fsync(fd_) != 0) {
            const int err = errno;
            fail("fsync of " + tmp_path_ + " failed: " + std::strerror(err), err);
        }
        int rc = ::close(fd_);
        const int close_err = errno;
        fd_ = -1;
        if (rc != 0) fail("closing " + tmp_path_ + " failed: " + std::strerror(close_err), close_err);
        if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
            const int err = errno;
            fail("renaming " + tmp_path_ + " to " + path_ + " failed: " + std::strerror(err), err);
        }
        committed_ = true;
        fsync_dir(parent_dir(path_));
    }

private:
    [[noreturn]] void fail(const std::string& what, int err) {
        throw InputError(what + "; " + path_ + " was left unchanged; check " +
                         write_error_hint(err, parent_dir(path_)));
    }

    std::string path_, tmp_path_;
    int fd_ = -1;
    bool committed_ = false;
};

// Writes a whole buffer to path atomically.
inline void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
    AtomicFile f(path);
    f.write(data, bytes);
    f.commit();
}

// Writes a text file through a temporary + rename (so a crash never leaves half a config).
inline void write_text_file(const std::string& path, const std::string& text) {
    write_file_atomic(path, text.data(), text.size());
}

}  // namespace llmc
