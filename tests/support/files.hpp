// Writing and reading whole files in tests.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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

// `text` split at newlines (a last line without one counted too).
inline std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

// What tests read of a file at most: one that resolution should have kept
// them from (the host's /dev/zero) is then a failure at once, not minutes of
// reading until memory runs out.
inline constexpr std::size_t kMaxTestRead = 64u << 20;

// The marker a capped read ends with where the file held more.
inline std::string more_than(std::size_t max) {
    return "<more than " + std::to_string(max) + " bytes>";
}

// The file's bytes (at most `max`, then more_than(max)), or a marker saying
// why it could not be read.
inline std::string slurp(const std::filesystem::path& p, std::size_t max = kMaxTestRead) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return "<cannot open " + p.string() + ": " + std::strerror(errno) + ">";
    std::string out;
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        out.append(buf, static_cast<std::size_t>(in.gcount()));
        if (out.size() > max) return out.substr(0, max) + more_than(max);
    }
    return out;
}

// The bytes of the file open at `fd` from its start (pread): at most `max`,
// then more_than(max).
inline std::string read_capped(int fd, std::size_t max = kMaxTestRead) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()))) > 0) {
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > max) return out.substr(0, max) + more_than(max);
    }
    return out;
}

// What a pipe (a child's output) gives until its end: at most `max`, then
// more_than(max).
inline std::string drain(int fd, std::size_t max = kMaxTestRead) {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > max) return out.substr(0, max) + more_than(max);
    }
    return out;
}

// Every entry under `dir` by relative path: a file's mode and bytes, a
// link's target, another entry's mode (inodes and times left out: a tree
// put back as it was compares equal).
inline std::map<std::string, std::string> tree(const std::filesystem::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
        struct stat st {};
        ::lstat(e.path().c_str(), &st);
        const std::string mode = std::to_string(st.st_mode);
        const std::string rel = e.path().lexically_relative(dir).string();
        if (S_ISLNK(st.st_mode))
            out[rel] = "link " + std::filesystem::read_symlink(e.path()).string();
        else if (S_ISREG(st.st_mode))
            out[rel] = mode + " " + slurp(e.path());
        else
            out[rel] = mode;
    }
    return out;
}

}  // namespace gpubind::test
