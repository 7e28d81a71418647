// The OCI runtime this suite drives: GPUBIND_E2E_RUNTIME, set per suite by
// gpubind_e2e_test() in tests/CMakeLists.txt, so the fixture is compiled once.
#include "container.hpp"

namespace gpubind::test {

const char* suite_runtime() noexcept {
    return GPUBIND_E2E_RUNTIME;
}

}  // namespace gpubind::test
