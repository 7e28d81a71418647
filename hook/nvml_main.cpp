// gpubind-nvml LIBRARY: loads the node's NVML library and writes what it says
// (the report query_nvml parses) to stdout. The statically linked hook runs it
// with an empty environment instead of loading NVML itself.
#include <unistd.h>

#include <cstdio>

#include "nvml.hpp"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: gpubind-nvml LIBRARY\n");
        return 2;
    }
    return gpubind::node::write_nvml_report(argv[1], STDOUT_FILENO);
}
