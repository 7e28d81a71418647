// gpubind-nvml LIBRARY: loads the node's NVML library and writes what it says
// (the report query_nvml parses) to stdout. The statically linked hook runs it
// with an empty environment instead of loading NVML itself.
// gpubind-nvml LIBRARY --memory-limits CGROUP_DIR MINOR:SOFT:HARD...: sets the
// driver's per-cgroup memory limits and writes them as NVML reads them back.
// gpubind-nvml LIBRARY --compute-mode MODE MINOR...: sets NVML's compute mode
// (gpubind mps: exclusive-process) and writes it as NVML reads it back.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "nvml.hpp"

int main(int argc, char** argv) {
    if (argc >= 5 && std::strcmp(argv[2], gpubind::node::kComputeModeOption) == 0)
        return gpubind::node::write_compute_mode(
            argv[1], static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)), argv + 4, argc - 4,
            STDOUT_FILENO);
    if (argc >= 5 && std::strcmp(argv[2], gpubind::node::kMemoryLimitsOption) == 0)
        return gpubind::node::write_memory_limits(argv[1], argv[3], argv + 4, argc - 4,
                                                  STDOUT_FILENO);
    if (argc != 2) {
        std::fprintf(stderr,
                     "usage: gpubind-nvml LIBRARY [--memory-limits CGROUP MINOR:SOFT:HARD... | "
                     "--compute-mode MODE MINOR...]\n");
        return 2;
    }
    return gpubind::node::write_nvml_report(argv[1], STDOUT_FILENO);
}
