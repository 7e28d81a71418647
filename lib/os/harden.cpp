#include "gpubind/os/harden.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::os::harden {

void clear_environment(std::initializer_list<std::string_view> keep) {
    std::vector<std::pair<std::string, std::string>> kept;
    for (std::string_view name : keep) {
        const std::string n(name);
        const char* value = ::getenv(n.c_str());
        if (!value) continue;
        std::string v(value, ::strnlen(value, kMaxKeptValue + 1));
        if (v.size() > kMaxKeptValue) continue;
        kept.emplace_back(n, std::move(v));
    }
    ::clearenv();
    for (const auto& [name, value] : kept) ::setenv(name.c_str(), value.c_str(), 1);
}

bool clear_environment_but(std::string_view keep) {
    const std::string own = std::string(keep) + "=";
    bool other = false;
    for (char** e = environ; e && *e && !other; ++e)
        other = std::string_view(*e).substr(0, own.size()) != own;
    clear_environment({keep});
    return other;
}

Deadline::Deadline(std::chrono::milliseconds budget)
    : budget_(budget), end_(std::chrono::steady_clock::now() + budget) {}

std::chrono::milliseconds Deadline::left() const {
    auto d = std::chrono::duration_cast<std::chrono::milliseconds>(
        end_ - std::chrono::steady_clock::now());
    return d.count() > 0 ? d : std::chrono::milliseconds(0);
}

void Deadline::check(const std::string& next) const {
    if (left().count() <= 0)
        throw util::Error(
            ETIMEDOUT, "deadline", next,
            "the hook's " + std::to_string(budget_.count()) + " ms were spent before it");
}

std::string read_stream(int fd, std::size_t max_size, const std::string& what,
                        const Deadline& deadline) {
    util::BoundedRead read = util::read_bounded(fd, max_size, what, deadline.end());
    if (read.end == util::ReadEnd::Deadline)
        throw util::Error(
            ETIMEDOUT, "read", what,
            "no end of input within " + std::to_string(deadline.budget().count()) + " ms");
    if (read.end == util::ReadEnd::TooLarge)
        throw util::Error(util::ErrorKind::Invalid, EFBIG, "read", what,
                          "larger than " + std::to_string(max_size) + " bytes");
    return std::move(read.data);
}

}  // namespace gpubind::os::harden
