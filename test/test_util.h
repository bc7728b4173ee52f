// Helpers shared by the Catch2 tests.
#pragma once
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace llmc_test {

// A fresh directory under the system temp dir, removed (with its contents) at the end of the test.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& prefix = "llmc_test_") {
        std::random_device rd;
        path = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()) + std::to_string(rd()));
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace llmc_test
