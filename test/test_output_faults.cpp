// Output files under faults (docs/reliability.md): the JSONL writer's rollback of a record cut by a failed
// write, truncate_jsonl_after_step (in place or atomic rewrite; partial and garbage lines), and the
// output-directory lock (llmc/io/output_lock.h). End to end: test/test_faults.py.
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "llmc/core/error.h"
#include "llmc/io/metrics.h"
#include "llmc/io/output_lock.h"
#include "test/test_util.h"

using namespace llmc;
using llmc_test::TempDir;

namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void spit(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

ino_t inode_of(const std::string& path) {
    struct stat st;
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_ino;
}

template <class F>
std::string input_error_of(F&& f) {
    try {
        f();
    } catch (const InputError& e) { return e.what(); }
    FAIL("expected an InputError");
    return "";
}

nlohmann::ordered_json rec(long step, size_t pad = 0) {
    return {{"step", step}, {"loss", 1.5 + step}, {"pad", std::string(pad, 'x')}};
}

}  // namespace

TEST_CASE("JsonlWriter: a record cut by a failed write is removed", "[faults][metrics]") {
    TempDir dir;
    const std::string path = dir.file("metrics.jsonl");
    JsonlWriter w(path, false);
    for (long s = 1; s <= 3; s++) w.write(rec(s));
    const std::string before = slurp(path);
    REQUIRE(before.size() > 0);

    struct rlimit old_lim;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old_lim;
    lim.rlim_cur = before.size() + 500;  // the next record (~2 kB) is cut after 500 bytes
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    std::string e;
    try {
        w.write(rec(4, 2000));
    } catch (const InputError& ex) { e = ex.what(); }
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_handler);

    CHECK(e.find("writing a record to " + path + " failed (File too large)") != std::string::npos);
    CHECK(e.find("partial record was removed") != std::string::npos);
    CHECK(e.find("ulimit -f") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
    CHECK(slurp(path) == before);  // no half line
    // the writer goes on at the end of the complete records
    w.write(rec(4));
    CHECK(slurp(path) == before + rec(4).dump() + "\n");
}

TEST_CASE("JsonlWriter: append keeps, a fresh open truncates", "[faults][metrics]") {
    TempDir dir;
    const std::string path = dir.file("m.jsonl");
    {
        JsonlWriter w(path, false);
        w.write(rec(1));
    }
    {
        JsonlWriter w(path, true);
        w.write(rec(2));
    }
    CHECK(slurp(path) == rec(1).dump() + "\n" + rec(2).dump() + "\n");
    {
        JsonlWriter w(path, false);
        w.write(rec(3));
    }
    CHECK(slurp(path) == rec(3).dump() + "\n");
    std::string e = input_error_of([&] { JsonlWriter w(dir.file("no_such_dir/m.jsonl"), false); });
    CHECK(e.find("cannot open") != std::string::npos);
}

TEST_CASE("truncate_jsonl_after_step", "[faults][metrics]") {
    TempDir dir;
    const std::string path = dir.file("m.jsonl");
    std::string lines[6];
    for (int s = 0; s < 6; s++) lines[s] = rec(s).dump() + "\n";

    SECTION("records in step order and a partial last line: cut in place") {
        spit(path, lines[0] + lines[1] + lines[2] + lines[3] + lines[4] + "{\"step\":5,\"lo");
        const ino_t ino = inode_of(path);
        truncate_jsonl_after_step(path, 3);
        CHECK(slurp(path) == lines[0] + lines[1] + lines[2] + lines[3]);
        CHECK(inode_of(path) == ino);  // truncate(2), no copy
    }
    SECTION("only a partial last line to drop") {
        spit(path, lines[0] + lines[1] + "{\"step\":2,");
        truncate_jsonl_after_step(path, 10);
        CHECK(slurp(path) == lines[0] + lines[1]);
    }
    SECTION("nothing to drop: the file is not touched") {
        spit(path, lines[0] + lines[1]);
        const ino_t ino = inode_of(path);
        truncate_jsonl_after_step(path, 1);
        CHECK(slurp(path) == lines[0] + lines[1]);
        CHECK(inode_of(path) == ino);
    }
    SECTION("a garbage line before kept records: rewritten atomically without it") {
        spit(path, lines[0] + "not json\n" + lines[1] + "{\"no_step\":1}\n" + lines[2] + lines[4] + "{\"ste");
        truncate_jsonl_after_step(path, 2);
        CHECK(slurp(path) == lines[0] + lines[1] + lines[2]);
        for (const auto& entry : std::filesystem::directory_iterator(dir.path))
            CHECK(entry.path().filename() == "m.jsonl");  // no temporary file left
    }
    SECTION("a missing file stays missing") {
        truncate_jsonl_after_step(path, 3);
        CHECK_FALSE(std::filesystem::exists(path));
    }
}

TEST_CASE("OutputLock: one holder per directory", "[faults][lock]") {
    TempDir dir;
    const std::string d = dir.path.string();
    const std::string pid = "pid " + std::to_string((long)::getpid()) + " host ";

    SECTION("the check creates nothing") {
        check_output_unlocked(d);
        check_output_unlocked(dir.file("missing_dir"));
        CHECK(std::filesystem::is_empty(dir.path));
    }
    SECTION("held: a second lock and the check are refused with the holder's pid") {
        OutputLock a;
        a.acquire(d);
        REQUIRE(a.held());
        CHECK(slurp(output_lock_path(d)).rfind(pid, 0) == 0);
        OutputLock b;
        std::string e = input_error_of([&] { b.acquire(d); });
        CHECK(e.find("output directory " + d + " is in use by another train_gpt2_ls (" + pid) != std::string::npos);
        CHECK(e.find("lock " + d + "/.lock") != std::string::npos);
        CHECK(e.find("choose another -o") != std::string::npos);
        CHECK_FALSE(b.held());
        std::string e2 = input_error_of([&] { check_output_unlocked(d); });
        CHECK(e2 == e);
        a.release();
        check_output_unlocked(d);  // free again; the file stays
        CHECK(std::filesystem::exists(output_lock_path(d)));
        b.acquire(d);
        CHECK(b.held());
    }
    SECTION("a stale holder's text does not block; the new holder records itself") {
        spit(output_lock_path(d), "pid 1 host elsewhere\nmore\n");
        OutputLock a;
        a.acquire(d);
        CHECK(a.held());
        CHECK(slurp(output_lock_path(d)).rfind(pid, 0) == 0);
        CHECK(slurp(output_lock_path(d)).find("elsewhere") == std::string::npos);
    }
    SECTION("a concurrent check (a brief shared lock) does not make acquire fail") {
        spit(output_lock_path(d), "");
        const int fd = ::open(output_lock_path(d).c_str(), O_RDONLY);
        REQUIRE(fd >= 0);
        REQUIRE(::flock(fd, LOCK_SH | LOCK_NB) == 0);
        std::thread t([fd] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            ::close(fd);
        });
        OutputLock a;
        a.acquire(d);  // retried while the probe holds its shared lock
        t.join();
        CHECK(a.held());
    }
}
