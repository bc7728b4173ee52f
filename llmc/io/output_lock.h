// One training run per output directory: <out>/.lock, held with flock(2) for the whole run, so
// a second train_gpt2_ls started on the same -o refuses with one line naming the directory and
// the holder's pid instead of writing checkpoints and metrics next to the first one's.
//
//   - The kernel drops the lock when the holder's process ends in any way (exit, crash,
//     kill -9), so a crashed run never blocks `-y 1`; the file itself stays (unlinking it would
//     let two processes lock two different inodes of the same name) and holds "pid N host H" of
//     the last run that took it, only read when the lock is held.
//   - With several processes (mpirun, Slurm) every rank shares -o (docs/multigpu.md) and only
//     rank 0 takes the lock; the other ranks of a refused launch are ended by its abort.
//   - run_training (llmc/train/train_loop.h) checks it before anything else touches -o
//     (check_output_unlocked: read-only, creates nothing, so a refused run changes no file) and
//     takes it (OutputLock::acquire) right before writing its first file.
//   - On a file system without flock (some network mounts), a warning is printed and the run
//     goes on unlocked. On NFS, Linux maps flock to fcntl byte-range locks, which work across
//     nodes.
// Host-only, POSIX (open, flock), no GPU needed.
#pragma once
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "llmc/core/error.h"

namespace llmc {

inline std::string output_lock_path(const std::string& dir) {
    return !dir.empty() && dir.back() == '/' ? dir + ".lock" : dir + "/.lock";
}

namespace detail {

// "pid N host H" from an open lock file ("" when empty or unreadable).
inline std::string read_lock_owner(int fd) {
    char buf[256];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return "";
    std::string s(buf, (size_t)n);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    for (char& c : s)
        if (c < 32 || c > 126) c = '?';  // the error line stays one printable line
    return s;
}

[[noreturn]] inline void throw_locked(const std::string& dir, int fd) {
    const std::string owner = read_lock_owner(fd);
    throw InputError("output directory " + dir + " is in use by another train_gpt2_ls (" +
                     (owner.empty() ? std::string("pid unknown") : owner) + ", lock " + output_lock_path(dir) +
                     "); wait for that run to end or stop it, or choose another -o");
}

// flock with EINTR retried; returns 0 or the errno.
inline int flock_retry(int fd, int op) {
    for (;;) {
        if (::flock(fd, op) == 0) return 0;
        if (errno != EINTR) return errno;
    }
}

}  // namespace detail

// Throws InputError when another process holds the lock of dir. Read-only: creates nothing and
// changes nothing (a missing directory or lock file means nobody holds it).
inline void check_output_unlocked(const std::string& dir) {
    const int fd = ::open(output_lock_path(dir).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // no lock file (or unreadable: acquire() reports that)
    // A shared lock conflicts only with the holder's exclusive one; released at once.
    const int err = detail::flock_retry(fd, LOCK_SH | LOCK_NB);
    if (err == EWOULDBLOCK) {
        try {
            detail::throw_locked(dir, fd);
        } catch (...) {
            ::close(fd);
            throw;
        }
    }
    ::close(fd);  // closing drops our shared lock, if we got one
}

// The lock of one output directory, held until destruction or the end of the process.
class OutputLock {
public:
    OutputLock() = default;
    ~OutputLock() { release(); }
    OutputLock(const OutputLock&) = delete;
    OutputLock& operator=(const OutputLock&) = delete;

    // Takes the lock of dir (which must exist), creating <dir>/.lock when needed, and records this
    // process in it. Throws InputError naming the holder when another process has it. A process
    // that only probes (check_output_unlocked) holds it for microseconds: retried for ~200 ms.
    void acquire(const std::string& dir) {
        release();
        const std::string path = output_lock_path(dir);
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0)
            throw InputError("cannot create the lock file " + path + " (" + std::strerror(errno) +
                             "); check that -o is a writable directory");
        int err = 0;
        for (int attempt = 0; attempt < 20; attempt++) {
            err = detail::flock_retry(fd_, LOCK_EX | LOCK_NB);
            if (err != EWOULDBLOCK) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (err == EWOULDBLOCK) {
            const int fd = fd_;
            fd_ = -1;
            try {
                detail::throw_locked(dir, fd);
            } catch (...) {
                ::close(fd);
                throw;
            }
        }
        if (err != 0) {  // ENOLCK, EOPNOTSUPP, ...: this file system cannot lock
            std::fprintf(stderr,
                         "warning: cannot lock %s (%s); running without the output-directory lock, so a second "
                         "run on this -o would not be detected\n",
                         path.c_str(), std::strerror(err));
            ::close(fd_);
            fd_ = -1;
            return;
        }
        held_ = true;
        char host[128] = "?";
        if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
        host[sizeof host - 1] = '\0';
        const std::string text = "pid " + std::to_string((long)::getpid()) + " host " + host + "\n";
        // Best effort: the lock is what matters, the text only names the holder in the error line.
        if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, text.data(), text.size(), 0) != (ssize_t)text.size())
            (void)::ftruncate(fd_, 0);
    }

    bool held() const { return held_; }

    // Drops the lock (the file stays; see the top of this file).
    void release() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        held_ = false;
    }

private:
    int fd_ = -1;
    bool held_ = false;
};

}  // namespace llmc
