// Writing and reading whole files in tests.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace gpubind::test {

inline void write(const std::filesystem::path& p, const std::string& text,
                  std::filesystem::perms perms = std::filesystem::perms(0644)) {
    {
        std::ofstream out(p, std::ios::binary);
        out << text;
        ASSERT_TRUE(out.good()) << p;
    }
    std::filesystem::permissions(p, perms);
}

// The file's bytes, or a marker saying why it could not be read.
inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return "<cannot open " + p.string() + ": " + std::strerror(errno) + ">";
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace gpubind::test
