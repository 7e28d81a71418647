// Errors: one exception type carrying the kind of failure, the operation, the
// path and errno.
#pragma once

#include <exception>
#include <string>
#include <system_error>

namespace gpubind::util {

// What went wrong, as the exit codes below mean it. The kind is set where the
// failure is found, never derived from errno: a system call that fails is a
// system failure whatever its errno (a mount's EINVAL is not bad input).
enum class ErrorKind {
    System,   // a system operation failed (I/O, mount, permission, the kernel refused)
    Invalid,  // bad input: config, spec, state, device id, corrupt or oversized file
    Refused,  // the request is well-formed but refused (policy, unmet requirement)
};

// Every failure gpubind reports. what() reads "<op> <path>: <detail>", detail
// defaulting to strerror(errno). A bad input (corrupt cache, unknown device id,
// malformed spec) is ErrorKind::Invalid (throw_invalid: EINVAL and a detail
// saying what is wrong), a refusal ErrorKind::Refused (throw_refused: ECANCELED).
class Error : public std::system_error {
  public:
    // A system failure.
    Error(int err, std::string op, std::string path = {}, std::string detail = {});
    Error(ErrorKind kind, int err, std::string op, std::string path = {}, std::string detail = {});

    ErrorKind kind() const noexcept { return kind_; }
    const std::string& op() const noexcept { return op_; }
    const std::string& path() const noexcept { return path_; }
    const char* what() const noexcept override { return message_.c_str(); }

  private:
    ErrorKind kind_;
    std::string op_;
    std::string path_;
    std::string message_;
};

// Throws a system failure with the current errno.
[[noreturn]] void throw_errno(std::string op, std::string path = {});
// Throws ErrorKind::Invalid (EINVAL) for bad input: `detail` says what is wrong with it.
[[noreturn]] void throw_invalid(std::string op, std::string path, std::string detail);
// Throws ErrorKind::Refused (ECANCELED): `detail` says why.
[[noreturn]] void throw_refused(std::string op, std::string path, std::string detail);

// Documented process exit codes (docs/ARCHITECTURE.md, README).
enum ExitCode : int {
    kExitOk = 0,
    kExitFailure = 1,  // a system call failed (I/O, mount, permission, ...)
    kExitUsage = 2,    // bad command line
    kExitInvalid = 3,  // bad input: config, spec, state, device id, cache
    kExitRefused = 4,  // the request is well-formed but refused (policy, requirement)
};

// Maps an error kind to the exit code above.
int exit_code_for(ErrorKind kind) noexcept;
// An Error's kind's code; any other exception is a failure (kExitFailure).
int exit_code_for(const std::exception& e) noexcept;

}  // namespace gpubind::util
