#include "gpubind/util/error.hpp"

#include <cerrno>
#include <cstring>

namespace gpubind::util {

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
    : Error(ErrorKind::System, err, std::move(op), std::move(path), std::move(detail)) {}

Error::Error(ErrorKind kind, int err, std::string op, std::string path, std::string detail)
    : std::system_error(err, std::system_category()),
      kind_(kind),
      op_(std::move(op)),
      path_(std::move(path)),
      message_(compose(err, op_, path_, detail)) {}

void throw_errno(std::string op, std::string path) {
    int err = errno;
    throw Error(err, std::move(op), std::move(path));
}

void throw_invalid(std::string op, std::string path, std::string detail) {
    throw Error(ErrorKind::Invalid, EINVAL, std::move(op), std::move(path), std::move(detail));
}

void throw_refused(std::string op, std::string path, std::string detail) {
    throw Error(ErrorKind::Refused, ECANCELED, std::move(op), std::move(path), std::move(detail));
}

int exit_code_for(ErrorKind kind) noexcept {
    switch (kind) {
        case ErrorKind::Invalid:
            return kExitInvalid;
        case ErrorKind::Refused:
            return kExitRefused;
        case ErrorKind::System:
            break;
    }
    return kExitFailure;
}

int exit_code_for(const std::exception& e) noexcept {
    const auto* error = dynamic_cast<const Error*>(&e);
    return error ? exit_code_for(error->kind()) : kExitFailure;
}

}  // namespace gpubind::util
