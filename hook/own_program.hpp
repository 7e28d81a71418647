// The executables' own path: gpubind-runtime and gpubind-nvc read the
// config.toml installed beside them (a host install from a container).
#pragma once

#include <filesystem>

#include "gpubind/util/error.hpp"

namespace gpubind {

inline std::filesystem::path own_program() {
    std::error_code ec;
    std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw util::Error(ec.value(), "read link", "/proc/self/exe");
    return p;
}

}  // namespace gpubind
