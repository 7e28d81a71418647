// The binaries under test, as a suite's build names them (tests/CMakeLists.txt
// gpubind_e2e_test), each overridable from the environment.
#pragma once

#include <string>

#include "container.hpp"

namespace gpubind::test {

inline std::string runtime() {
    return env_or("GPUBIND_RUNTIME", GPUBIND_RUNTIME_PATH);
}
inline std::string hook() {
    return env_or("GPUBIND_HOOK", GPUBIND_HOOK_PATH);
}
inline std::string cli() {
    return env_or("GPUBIND_CLI", GPUBIND_CLI_PATH);
}

}  // namespace gpubind::test
