#include "gpubind/fd.hpp"

#include <unistd.h>

namespace gpubind {

void Fd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

}  // namespace gpubind
