#include "gpubind/error.hpp"

#include <cerrno>
#include <cstring>

namespace gpubind {

namespace {

std::string compose(int err, const std::string& op, const std::string& path,
                    const std::string& detail) {
    std::string msg = op;
    if (!path.empty()) msg += " " + path;
    msg += ": ";
    msg += detail.empty() ? std::string(std::strerror(err)) : detail;
    return msg;
}

}  // namespace

Error::Error(int err, std::string op, std::string path, std::string detail)
    : std::system_error(err, std::system_category()),
      op_(std::move(op)),
      path_(std::move(path)),
      message_(compose(err, op_, path_, detail)) {}

void throw_errno(std::string op, std::string path) {
    int err = errno;
    throw Error(err, std::move(op), std::move(path));
}

void throw_invalid(std::string op, std::string path, std::string detail) {
    throw Error(EINVAL, std::move(op), std::move(path), std::move(detail));
}

int exit_code_for(const std::system_error& e) noexcept {
    switch (e.code().value()) {
        case EINVAL:
        case E2BIG:
        case EFBIG:
        case ENOEXEC:
            return kExitInvalid;
        case EACCES:
        case EPERM:
            return kExitFailure;
        case ECANCELED:
            return kExitRefused;
        default:
            return kExitFailure;
    }
}

}  // namespace gpubind
