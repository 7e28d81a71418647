// Errors: one exception type carrying the operation, the path and errno.
#pragma once

#include <string>
#include <system_error>

namespace gpubind {

// Every failure gpubind reports. what() reads "<op> <path>: <detail>", detail
// defaulting to strerror(errno). A bad input (corrupt cache, unknown device id,
// malformed spec) is an Error with EINVAL and a detail saying what is wrong.
class Error : public std::system_error {
public:
    Error(int err, std::string op, std::string path = {}, std::string detail = {});

    const std::string& op() const noexcept { return op_; }
    const std::string& path() const noexcept { return path_; }
    const char* what() const noexcept override { return message_.c_str(); }

private:
    std::string op_;
    std::string path_;
    std::string message_;
};

// Throws Error with the current errno.
[[noreturn]] void throw_errno(std::string op, std::string path = {});
// Throws Error(EINVAL) for bad input: `detail` says what is wrong with it.
[[noreturn]] void throw_invalid(std::string op, std::string path, std::string detail);

// Documented process exit codes (docs/ARCHITECTURE.md, README).
enum ExitCode : int {
    kExitOk = 0,
    kExitFailure = 1,   // a system call failed (I/O, mount, permission, ...)
    kExitUsage = 2,     // bad command line
    kExitInvalid = 3,   // bad input: config, spec, state, device id, cache
    kExitRefused = 4,   // the request is well-formed but refused (policy, requirement)
};

// Maps an error to the exit code above.
int exit_code_for(const std::system_error& e) noexcept;

}  // namespace gpubind
