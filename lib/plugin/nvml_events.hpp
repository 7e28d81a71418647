// NVML in the daemon itself, for what only NVML says while the plugin runs:
// critical Xid events, and the MIG devices' profiles. The node's
// libnvidia-ml.so.1 is loaded with dlopen (never linked, as lib/node does);
// every call goes through a symbol looked up by name.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "gpubind/plugin/plugin.hpp"

namespace gpubind::plugin {

// One critical Xid event: the GPU's device minor and the Xid.
struct XidEvent {
    unsigned minor = 0;
    unsigned xid = 0;
    // The MIG instance it happened in (GPU instance, compute instance), when
    // NVML could attribute it to one; none: the whole GPU.
    std::optional<std::pair<unsigned, unsigned>> instance;
};

class Nvml {
  public:
    // Loads `library` and initialises NVML. Throws Error naming the library
    // when it cannot be loaded, lacks a function needed, or NVML fails.
    explicit Nvml(const std::string& library);
    ~Nvml();
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    // Each MIG device's profile, from its NVML name ("<model> MIG <profile>").
    MigProfiles mig_profiles();
    // Registers every GPU that supports them for critical Xid events (once);
    // then waits up to `timeout` for one. Throws Error when NVML fails.
    std::optional<XidEvent> wait_xid(std::chrono::milliseconds timeout);

  private:
    struct Api;
    void* lib_ = nullptr;
    Api* api_ = nullptr;
    void* set_ = nullptr;  // nvmlEventSet_t once registered
};

}  // namespace gpubind::plugin
