// Runs a shell command (popen) and returns its exit status and standard output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace gpubind::test {

struct Output {
    int status = -1;   // the exit status; -1 when it did not exit (a signal) or did not start
    std::string text;  // standard output, byte for byte
};

inline Output run(const std::string& command) {
    Output out;
    FILE* p = ::popen(command.c_str(), "r");
    if (p == nullptr) return out;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.text.append(buf, n);
    const int st = ::pclose(p);
    out.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

}  // namespace gpubind::test
