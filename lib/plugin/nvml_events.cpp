// NVML in the daemon: see nvml_events.hpp.
#include "nvml_events.hpp"

#include <dlfcn.h>

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::plugin {

namespace {

// The slice of NVML's C ABI used here (values and layouts as the library
// defines them).
using NvmlReturn = int;
using NvmlDevice = void*;
using NvmlEventSet = void*;
constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kNotSupported = 3;
constexpr NvmlReturn kTimeout = 10;
constexpr unsigned long long kXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError
constexpr unsigned kMigEnabled = 1;
constexpr unsigned kNameBuffer = 96;
constexpr unsigned kMaxGpus = 256;
struct EventData {  // nvmlEventData_t, as nvmlEventSetWait_v2 fills it
    NvmlDevice device;
    unsigned long long type;
    unsigned long long data;
    unsigned gi;
    unsigned ci;
};

constexpr const char* kOp = "read NVML";

}  // namespace

struct Nvml::Api {
    NvmlReturn (*init)();
    NvmlReturn (*shutdown)();
    NvmlReturn (*count)(unsigned*);
    NvmlReturn (*by_index)(unsigned, NvmlDevice*);
    NvmlReturn (*minor)(NvmlDevice, unsigned*);
    NvmlReturn (*uuid)(NvmlDevice, char*, unsigned);
    NvmlReturn (*name)(NvmlDevice, char*, unsigned);
    NvmlReturn (*mig_mode)(NvmlDevice, unsigned*, unsigned*);
    NvmlReturn (*max_mig)(NvmlDevice, unsigned*);
    NvmlReturn (*mig_by_index)(NvmlDevice, unsigned, NvmlDevice*);
    NvmlReturn (*supported)(NvmlDevice, unsigned long long*);
    NvmlReturn (*set_create)(NvmlEventSet*);
    NvmlReturn (*set_free)(NvmlEventSet);
    NvmlReturn (*register_events)(NvmlDevice, unsigned long long, NvmlEventSet);
    NvmlReturn (*wait)(NvmlEventSet, EventData*, unsigned);
};

Nvml::Nvml(const std::string& library) {
    lib_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_)
        throw util::Error(ENOENT, kOp, library, fmt::format("cannot load it: {}", ::dlerror()));
    auto api = std::make_unique<Api>();
    bool missing = false;
    auto look = [&](auto& f, const char* name) {
        f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(::dlsym(lib_, name));
        if (!f) missing = true;
    };
    look(api->init, "nvmlInit_v2");
    look(api->shutdown, "nvmlShutdown");
    look(api->count, "nvmlDeviceGetCount_v2");
    look(api->by_index, "nvmlDeviceGetHandleByIndex_v2");
    look(api->minor, "nvmlDeviceGetMinorNumber");
    look(api->uuid, "nvmlDeviceGetUUID");
    look(api->name, "nvmlDeviceGetName");
    look(api->mig_mode, "nvmlDeviceGetMigMode");
    look(api->max_mig, "nvmlDeviceGetMaxMigDeviceCount");
    look(api->mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
    look(api->supported, "nvmlDeviceGetSupportedEventTypes");
    look(api->set_create, "nvmlEventSetCreate");
    look(api->set_free, "nvmlEventSetFree");
    look(api->register_events, "nvmlDeviceRegisterEvents");
    look(api->wait, "nvmlEventSetWait_v2");
    if (missing) {
        ::dlclose(lib_);
        throw util::Error(ENOSYS, kOp, library,
                          "it lacks an NVML function the device plugin needs");
    }
    if (NvmlReturn r = api->init(); r != kSuccess) {
        ::dlclose(lib_);
        throw util::Error(EIO, kOp, library, fmt::format("nvmlInit_v2 returned {}", r));
    }
    api_ = api.release();
}

Nvml::~Nvml() {
    if (set_) api_->set_free(set_);
    api_->shutdown();
    delete api_;
    ::dlclose(lib_);
}

MigProfiles Nvml::mig_profiles() {
    MigProfiles out;
    unsigned n = 0;
    if (api_->count(&n) != kSuccess) return out;
    for (unsigned i = 0; i < n && i < kMaxGpus; ++i) {
        NvmlDevice gpu = nullptr;
        unsigned current = 0, pending = 0, max = 0;
        if (api_->by_index(i, &gpu) != kSuccess) continue;
        if (api_->mig_mode(gpu, &current, &pending) != kSuccess || current != kMigEnabled) continue;
        if (api_->max_mig(gpu, &max) != kSuccess) continue;
        for (unsigned m = 0; m < max; ++m) {
            NvmlDevice mig = nullptr;
            char uuid[kNameBuffer] = {}, name[kNameBuffer] = {};
            if (api_->mig_by_index(gpu, m, &mig) != kSuccess) continue;
            if (api_->uuid(mig, uuid, sizeof uuid) != kSuccess ||
                api_->name(mig, name, sizeof name) != kSuccess)
                continue;
            uuid[sizeof uuid - 1] = name[sizeof name - 1] = '\0';
            const char* profile = std::strstr(name, " MIG ");
            if (profile) out[uuid] = profile + 5;
        }
    }
    return out;
}

std::optional<XidEvent> Nvml::wait_xid(std::chrono::milliseconds timeout) {
    if (!set_) {
        NvmlEventSet set = nullptr;
        if (NvmlReturn r = api_->set_create(&set); r != kSuccess)
            throw util::Error(EIO, kOp, "", fmt::format("nvmlEventSetCreate returned {}", r));
        set_ = set;
        unsigned n = 0, registered = 0;
        if (api_->count(&n) != kSuccess) n = 0;
        for (unsigned i = 0; i < n && i < kMaxGpus; ++i) {
            NvmlDevice gpu = nullptr;
            unsigned long long types = 0;
            if (api_->by_index(i, &gpu) != kSuccess) continue;
            if (api_->supported(gpu, &types) != kSuccess || !(types & kXidCriticalError)) {
                util::logger().warn(
                    "device plugin: GPU {} has no Xid events; its health is its "
                    "device node's",
                    i);
                continue;
            }
            if (NvmlReturn r = api_->register_events(gpu, kXidCriticalError, set_);
                r != kSuccess && r != kNotSupported)
                throw util::Error(
                    EIO, kOp, "",
                    fmt::format("nvmlDeviceRegisterEvents(GPU {}) returned {}", i, r));
            ++registered;
        }
        util::logger().debug("device plugin: waiting for Xid events of {} GPUs", registered);
    }
    EventData e{};
    const NvmlReturn r = api_->wait(set_, &e, static_cast<unsigned>(timeout.count()));
    if (r == kTimeout) return {};
    if (r != kSuccess)
        throw util::Error(EIO, kOp, "", fmt::format("nvmlEventSetWait_v2 returned {}", r));
    if (!(e.type & kXidCriticalError)) return {};
    unsigned minor = 0;
    if (api_->minor(e.device, &minor) != kSuccess) return {};
    // NVML's "all instances": an error not attributable to one MIG instance.
    constexpr unsigned kAllInstances = 0xFFFFFFFFu;
    XidEvent event{minor, static_cast<unsigned>(e.data), std::nullopt};
    if (e.gi != kAllInstances && e.ci != kAllInstances) event.instance = std::pair(e.gi, e.ci);
    return event;
}

}  // namespace gpubind::plugin
