// gpubind-nvml LIBRARY: loads the node's NVML library and writes what it says
// (the report query_nvml parses) to stdout. The statically linked hook runs it
// with an empty environment instead of loading NVML itself.
// gpubind-nvml LIBRARY --memory-limits CGROUP_DIR MINOR:SOFT:HARD...: sets the
// driver's per-cgroup memory limits and writes them as NVML reads them back.
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "nvml.hpp"

int main(int argc, char** argv) {
    if (argc >= 5 && std::strcmp(argv[2], gpubind::node::kMemoryLimitsOption) == 0)
        return gpubind::node::write_memory_limits(argv[1], argv[3], argv + 4, argc - 4,
                                                  STDOUT_FILENO);
    if (argc != 2) {
        std::fprintf(stderr,
                     "usage: gpubind-nvml LIBRARY [--memory-limits CGROUP MINOR:SOFT:HARD...]\n");
        return 2;
    }
    return gpubind::node::write_nvml_report(argv[1], STDOUT_FILENO);
}
