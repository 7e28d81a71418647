// The static programs' entry point (hook/entry.cpp): before anything else
// runs, each maps its writable data and its start's code in one call each.
// Watched with ptrace: the first two system calls of a fresh gpubind-hook and
// gpubind-runtime are those calls, over the ranges the program's own mappings
// hold, and they succeed.
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "built.hpp"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

struct Call {
    std::uint64_t nr = 0;
    std::uint64_t args[3] = {};
    std::int64_t result = 0;
};

struct Mapping {
    std::uint64_t from = 0, to = 0;
    std::string perms, path;
};

std::vector<Mapping> mappings_of(pid_t pid) {
    std::vector<Mapping> out;
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    for (std::string line; std::getline(maps, line);) {
        std::istringstream in(line);
        Mapping m;
        std::string range, offset, device, inode;
        in >> range >> m.perms >> offset >> device >> inode >> m.path;
        m.from = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
        m.to = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
        out.push_back(m);
    }
    return out;
}

// Whether [from, from + size) lies in mappings that follow each other, each
// with `perm` (a letter of "rwx") and the first of them `path`'s.
bool covered(const std::vector<Mapping>& maps, std::uint64_t from, std::uint64_t size, char perm,
             const std::string& path) {
    std::uint64_t at = from;
    bool first = true;
    for (const auto& m : maps) {
        if (at < m.from || at >= m.to) continue;
        if (m.perms.find(perm) == std::string::npos || (first && m.path != path)) return false;
        first = false;
        at = m.to;
        if (at >= from + size) return true;
    }
    return false;
}

// The first `count` system calls of `program` (run with --version), and its
// mappings when the first was made.
std::vector<Call> first_calls(const std::string& program, int count, std::vector<Mapping>& maps) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
        char* const argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>("--version"),
                              nullptr};
        char* const envp[] = {nullptr};
        ::execve(program.c_str(), argv, envp);
        ::_exit(127);
    }
    std::vector<Call> calls;
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) return calls;
    ::ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL);
    while (static_cast<int>(calls.size()) < count) {
        if (::ptrace(PTRACE_SYSCALL, pid, nullptr, nullptr) != 0) break;
        if (::waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) break;
        if (WSTOPSIG(status) != (SIGTRAP | 0x80)) continue;
        __ptrace_syscall_info info{};
        if (::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info) <= 0) break;
        if (info.op == PTRACE_SYSCALL_INFO_ENTRY) {
            if (calls.empty()) maps = mappings_of(pid);
            Call c;
            c.nr = info.entry.nr;
            for (int i = 0; i < 3; ++i) c.args[i] = info.entry.args[i];
            calls.push_back(c);
        } else if (info.op == PTRACE_SYSCALL_INFO_EXIT && !calls.empty()) {
            calls.back().result = info.exit.rval;
        }
    }
    // The last call's result.
    if (::ptrace(PTRACE_SYSCALL, pid, nullptr, nullptr) == 0 && ::waitpid(pid, &status, 0) == pid &&
        WIFSTOPPED(status)) {
        __ptrace_syscall_info info{};
        if (::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info) > 0 &&
            info.op == PTRACE_SYSCALL_INFO_EXIT && !calls.empty())
            calls.back().result = info.exit.rval;
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return calls;
}

// `call` populated `what` (with `advice`), successfully, over mappings of
// the program (`path`) with `perm`.
void expect_populated(const Call& call, int advice, const std::vector<Mapping>& maps, char perm,
                      const std::string& path, const std::string& what) {
    EXPECT_EQ(call.nr, static_cast<std::uint64_t>(SYS_madvise)) << path << ": " << what;
    EXPECT_EQ(call.args[2], static_cast<std::uint64_t>(advice)) << path << ": " << what;
    EXPECT_EQ(call.result, 0) << path << ": populating " << what << " failed";
    EXPECT_TRUE(covered(maps, call.args[0], call.args[1], perm, path))
        << path << ": " << what << " is not in the program's mappings with '" << perm << "'";
}

void expect_start_mapped_first(const std::string& program) {
    std::vector<Mapping> maps;
    const std::vector<Call> calls = first_calls(program, 2, maps);
    ASSERT_EQ(calls.size(), 2u) << program << ": not traced";
    char real[4096] = {};
    ASSERT_NE(::realpath(program.c_str(), real), nullptr) << program;
    expect_populated(calls[0], MADV_POPULATE_WRITE, maps, 'w', real, "the data (first call)");
    expect_populated(calls[1], MADV_POPULATE_READ, maps, 'x', real,
                     "the start's code (second call)");
    EXPECT_GE(calls[1].args[1], 64u * 1024) << program << ": .text.start is nearly empty";
}

TEST(Entry, HookAndShimMapTheirDataAndStartCodeBeforeAnythingElse) {
    expect_start_mapped_first(GPUBIND_HOOK_PATH);
    expect_start_mapped_first(GPUBIND_RUNTIME_PATH);
}

}  // namespace
