#include "gpubind/util/fd.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "gpubind/util/error.hpp"

namespace gpubind::util {

void Fd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

bool poll_until(std::span<pollfd> fds, std::chrono::steady_clock::time_point deadline,
                const std::string& what) {
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        // Rounded down, so a wait may end a little early: the loop polls again.
        const int r = ::poll(fds.data(), static_cast<nfds_t>(fds.size()),
                             static_cast<int>(std::min<long long>(left.count(), INT_MAX)));
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) throw_errno("poll", what);
    }
}

}  // namespace gpubind::util
