// The library logs through this one accessor; only executables configure sinks.
#pragma once

#include <memory>

#include <spdlog/logger.h>

namespace gpubind {

// The logger the library writes to. Until an executable installs one, it is a
// logger with no sinks (library code never prints on its own).
spdlog::logger& logger();
void set_logger(std::shared_ptr<spdlog::logger> logger);

}  // namespace gpubind
