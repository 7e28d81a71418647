// For executables only: where the library's log goes. This header brings in
// spdlog; library code includes gpubind/log.hpp alone.
#pragma once

#include <memory>

#include <spdlog/logger.h>

namespace gpubind {

// The spdlog logger behind gpubind::logger(): a logger with no sinks until
// set_logger() installs one. Executables add sinks and set levels on it.
spdlog::logger& spdlog_logger();
void set_logger(std::shared_ptr<spdlog::logger> logger);

}  // namespace gpubind
