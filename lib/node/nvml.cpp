#include "nvml.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "gpubind/node/memory_limits.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/process.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::node {

namespace {

constexpr std::size_t kMaxReport = 256u << 10;

// The slice of NVML's C ABI used here (types and values as the library defines them).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNvmlMigEnabled = 1;
constexpr unsigned kNvmlUuidBuffer = 96;
constexpr NvmlReturn kNvmlInvalidArgument = 2;
constexpr NvmlReturn kNvmlNotSupported = 3;
constexpr NvmlReturn kNvmlFunctionNotFound = 13;
constexpr unsigned kNvlinkMaxLinks = 18;       // NVML_NVLINK_MAX_LINKS
constexpr int kP2pCapsNvlink = 2;              // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kP2pStatusOk = 0;                // NVML_P2P_STATUS_OK
constexpr unsigned char kFabricCompleted = 3;  // NVML_GPU_FABRIC_STATE_COMPLETED
constexpr unsigned kMaxGpus = 256;

// nvmlPciInfo_t, nvmlMemory_t and nvmlGpuFabricInfo_t as NVML lays them out.
struct NvmlPciInfo {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
};
struct NvmlMemory {
    unsigned long long total, free, used;
};
struct NvmlFabricInfo {
    unsigned char cluster_uuid[16];
    NvmlReturn status;
    unsigned clique_id;
    unsigned char state;
};

// nvmlSetMemoryLimits_v1_t and nvmlGetMemoryLimits_v1_t as the CUDA 13.4 NVML
// API reference lays them out: the cgroup directory's full path, bytes.
struct NvmlSetLimits {
    const char* name_space;
    unsigned long long soft, hard;
};
struct NvmlGetLimits {
    const char* name_space;
    unsigned long long soft, hard, used;
};
using SetLimitsFn = NvmlReturn (*)(NvmlDevice, NvmlSetLimits*);
using GetLimitsFn = NvmlReturn (*)(NvmlDevice, NvmlGetLimits*);
// The cgroup v2 root: where discovery asks whether the driver answers for a cgroup.
constexpr const char* kCgroupRoot = "/sys/fs/cgroup";

// Brand names by nvmlBrandType_t value, spelled as NVIDIA_REQUIRE_BRAND expects.
constexpr std::array<const char*, 17> kBrands = {
    "unknown",   "quadro",    "tesla",  "nvs",        "grid",    "geforce",
    "titan",     "vapps",     "vpc",    "vcs",        "vws",     "cloudgaming",
    "quadrortx", "nvidiartx", "nvidia", "geforcertx", "titanrtx"};

// Everything the child does; it writes its report to `out` and never throws.
class Child {
  public:
    explicit Child(int out) : out_(out) {}

    int run(const char* library) noexcept {
        void* lib = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!lib) return fail("dlopen: %s", ::dlerror());
        lib_ = lib;
        auto init = sym<NvmlReturn (*)()>("nvmlInit_v2");
        auto shutdown = sym<NvmlReturn (*)()>("nvmlShutdown");
        auto cuda = sym<NvmlReturn (*)(int*)>("nvmlSystemGetCudaDriverVersion_v2");
        auto count = sym<NvmlReturn (*)(unsigned*)>("nvmlDeviceGetCount_v2");
        auto by_index = sym<NvmlReturn (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
        auto minor_number = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetMinorNumber");
        auto brand = sym<NvmlReturn (*)(NvmlDevice, int*)>("nvmlDeviceGetBrand");
        auto cc = sym<NvmlReturn (*)(NvmlDevice, int*, int*)>("nvmlDeviceGetCudaComputeCapability");
        auto memory = sym<NvmlReturn (*)(NvmlDevice, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
        if (!init || !shutdown || !cuda || !count || !by_index || !minor_number)
            return fail("%s lacks a required NVML function", library);
        if (NvmlReturn r = init(); r != kNvmlSuccess) return fail("nvmlInit_v2 returned %d", r);
        int version = 0;
        if (cuda(&version) == kNvmlSuccess)
            say("cuda %d.%d\n", version / 1000, (version % 1000) / 10);
        unsigned n = 0;
        if (NvmlReturn r = count(&n); r != kNvmlSuccess)
            return fail("nvmlDeviceGetCount_v2 returned %d", r);
        std::array<NvmlDevice, kMaxGpus> devs{};
        std::array<unsigned, kMaxGpus> minors{};
        unsigned found = 0;
        for (unsigned i = 0; i < n; ++i) {
            NvmlDevice dev = nullptr;
            unsigned m = 0;
            if (by_index(i, &dev) != kNvmlSuccess || minor_number(dev, &m) != kNvmlSuccess)
                continue;
            if (found < kMaxGpus) {
                devs[found] = dev;
                minors[found++] = m;
            }
            int b = 0, major_cc = 0, minor_cc = 0;
            const char* brand_name = "unknown";
            if (brand && brand(dev, &b) == kNvmlSuccess && b >= 0 &&
                static_cast<std::size_t>(b) < kBrands.size())
                brand_name = kBrands[static_cast<std::size_t>(b)];
            if (!cc || cc(dev, &major_cc, &minor_cc) != kNvmlSuccess) major_cc = minor_cc = -1;
            NvmlMemory mem{};
            if (!memory || memory(dev, &mem) != kNvmlSuccess) mem.total = 0;
            say("gpu %u %s %d.%d %llu\n", m, brand_name, major_cc, minor_cc, mem.total);
            report_mig(dev, m);
            report_nvlink(dev, m);
        }
        report_p2p(devs.data(), minors.data(), found);
        if (found > 0) report_memory_limits(devs[0]);
        shutdown();
        return 0;
    }

    // Sets each "<minor>:<soft>:<hard>" of `limits` on `cgroup_dir`, reads it
    // back: "limit <minor> <soft> <hard>" lines, or "error" and 1.
    int set_limits(const char* library, const char* cgroup_dir, char** limits, int count) noexcept {
        void* lib = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!lib) return fail("dlopen: %s", ::dlerror());
        lib_ = lib;
        auto init = sym<NvmlReturn (*)()>("nvmlInit_v2");
        auto shutdown = sym<NvmlReturn (*)()>("nvmlShutdown");
        auto n_devices = sym<NvmlReturn (*)(unsigned*)>("nvmlDeviceGetCount_v2");
        auto by_index = sym<NvmlReturn (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
        auto minor_number = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetMinorNumber");
        auto set = sym<SetLimitsFn>("nvmlDeviceSetMemoryLimits_v1");
        auto get = sym<GetLimitsFn>("nvmlDeviceGetMemoryLimits_v1");
        if (!init || !shutdown || !n_devices || !by_index || !minor_number)
            return fail("%s lacks a required NVML function", library);
        if (!set || !get) return fail("%s has no nvmlDeviceSetMemoryLimits_v1", library);
        if (NvmlReturn r = init(); r != kNvmlSuccess) return fail("nvmlInit_v2 returned %d", r);
        unsigned n = 0;
        if (NvmlReturn r = n_devices(&n); r != kNvmlSuccess)
            return fail("nvmlDeviceGetCount_v2 returned %d", r);
        for (int i = 0; i < count; ++i) {
            unsigned minor = 0;
            unsigned long long soft = 0, hard = 0;
            if (std::sscanf(limits[i], "%u:%llu:%llu", &minor, &soft, &hard) != 3)
                return fail("not a limit: %s", limits[i]);
            NvmlDevice dev = device_by_minor(minor, n);
            if (!dev) return fail("NVML knows no GPU with minor %u", minor);
            NvmlSetLimits want{cgroup_dir, soft, hard};
            if (NvmlReturn r = set(dev, &want); r != kNvmlSuccess)
                return fail("nvmlDeviceSetMemoryLimits_v1(GPU minor %u, %s) returned %d", minor,
                            cgroup_dir, r);
            NvmlGetLimits got{cgroup_dir, 0, 0, 0};
            if (NvmlReturn r = get(dev, &got); r != kNvmlSuccess)
                return fail("nvmlDeviceGetMemoryLimits_v1(GPU minor %u, %s) returned %d", minor,
                            cgroup_dir, r);
            say("limit %u %llu %llu\n", minor, got.soft, got.hard);
        }
        shutdown();
        return 0;
    }

    // Sets compute mode `mode` on each GPU of `minors`, reads it back:
    // "mode <minor> <mode>" lines, or "error" and 1.
    int set_compute_mode(const char* library, unsigned mode, char** minors, int count) noexcept {
        void* lib = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!lib) return fail("dlopen: %s", ::dlerror());
        lib_ = lib;
        auto init = sym<NvmlReturn (*)()>("nvmlInit_v2");
        auto shutdown = sym<NvmlReturn (*)()>("nvmlShutdown");
        auto n_devices = sym<NvmlReturn (*)(unsigned*)>("nvmlDeviceGetCount_v2");
        auto by_index = sym<NvmlReturn (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
        auto minor_number = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetMinorNumber");
        auto set = sym<NvmlReturn (*)(NvmlDevice, unsigned)>("nvmlDeviceSetComputeMode");
        auto get = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetComputeMode");
        if (!init || !shutdown || !n_devices || !by_index || !minor_number || !set || !get)
            return fail("%s lacks a required NVML function", library);
        if (NvmlReturn r = init(); r != kNvmlSuccess) return fail("nvmlInit_v2 returned %d", r);
        unsigned n = 0;
        if (NvmlReturn r = n_devices(&n); r != kNvmlSuccess)
            return fail("nvmlDeviceGetCount_v2 returned %d", r);
        for (int i = 0; i < count; ++i) {
            unsigned minor = 0;
            if (std::sscanf(minors[i], "%u", &minor) != 1)
                return fail("not a minor: %s", minors[i]);
            NvmlDevice dev = device_by_minor(minor, n);
            if (!dev) return fail("NVML knows no GPU with minor %u", minor);
            if (NvmlReturn r = set(dev, mode); r != kNvmlSuccess)
                return fail("nvmlDeviceSetComputeMode(GPU minor %u, %u) returned %d", minor, mode,
                            r);
            unsigned got = 0;
            if (NvmlReturn r = get(dev, &got); r != kNvmlSuccess)
                return fail("nvmlDeviceGetComputeMode(GPU minor %u) returned %d", minor, r);
            say("mode %u %u\n", minor, got);
        }
        shutdown();
        return 0;
    }

  private:
    // NVML's handle of the GPU of `minor` among its `n`, or null (the
    // callers have checked both functions are there).
    NvmlDevice device_by_minor(unsigned minor, unsigned n) noexcept {
        auto by_index = sym<NvmlReturn (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
        auto minor_number = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetMinorNumber");
        for (unsigned j = 0; j < n; ++j) {
            NvmlDevice d = nullptr;
            unsigned m = 0;
            if (by_index(j, &d) == kNvmlSuccess && minor_number(d, &m) == kNvmlSuccess &&
                m == minor)
                return d;
        }
        return nullptr;
    }

    void report_mig(NvmlDevice dev, unsigned minor) noexcept {
        auto mode = sym<NvmlReturn (*)(NvmlDevice, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
        auto max = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetMaxMigDeviceCount");
        auto handle = sym<NvmlReturn (*)(NvmlDevice, unsigned, NvmlDevice*)>(
            "nvmlDeviceGetMigDeviceHandleByIndex");
        auto gi_id = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetGpuInstanceId");
        auto ci_id = sym<NvmlReturn (*)(NvmlDevice, unsigned*)>("nvmlDeviceGetComputeInstanceId");
        auto uuid = sym<NvmlReturn (*)(NvmlDevice, char*, unsigned)>("nvmlDeviceGetUUID");
        if (!mode || !max || !handle || !gi_id || !ci_id || !uuid) return;
        unsigned current = 0, pending = 0, count = 0;
        if (mode(dev, &current, &pending) != kNvmlSuccess || current != kNvmlMigEnabled) return;
        if (max(dev, &count) != kNvmlSuccess) return;
        for (unsigned j = 0; j < count; ++j) {
            NvmlDevice mig = nullptr;
            unsigned gi = 0, ci = 0;
            char id[kNvmlUuidBuffer] = {};
            if (handle(dev, j, &mig) != kNvmlSuccess) continue;
            if (gi_id(mig, &gi) != kNvmlSuccess || ci_id(mig, &ci) != kNvmlSuccess) continue;
            if (uuid(mig, id, sizeof id) != kNvmlSuccess) continue;
            id[sizeof id - 1] = '\0';
            say("mig %u %u %u %s\n", minor, gi, ci, id);
        }
    }

    // "link <minor> <link> <remote type> <remote bus id>" for each active link,
    // then "nvlink <minor> known", or "nvlink <minor> unknown <why>" alone;
    // "fabric <minor> <cluster uuid> <clique id>" once the GPU joined a fabric.
    void report_nvlink(NvmlDevice dev, unsigned minor) noexcept {
        auto state = sym<NvmlReturn (*)(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkState");
        auto remote_pci = sym<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
            "nvmlDeviceGetNvLinkRemotePciInfo_v2");
        auto remote_type =
            sym<NvmlReturn (*)(NvmlDevice, unsigned, int*)>("nvmlDeviceGetNvLinkRemoteDeviceType");
        report_fabric(dev, minor);
        if (!state || !remote_pci) {
            say("nvlink %u unknown this NVML has no %s\n", minor,
                !state ? "nvmlDeviceGetNvLinkState" : "nvmlDeviceGetNvLinkRemotePciInfo_v2");
            return;
        }
        struct Active {
            unsigned link;
            int type;
            char bus_id[32];
        };
        std::array<Active, kNvlinkMaxLinks> active{};
        unsigned count = 0;
        for (unsigned link = 0; link < kNvlinkMaxLinks; ++link) {
            int is_active = 0;
            const NvmlReturn r = state(dev, link, &is_active);
            // A GPU without NVLink says "not supported" for link 0; one with
            // fewer links than the maximum for those beyond its own.
            if ((r == kNvmlNotSupported || r == kNvmlInvalidArgument) &&
                (link > 0 || r == kNvmlNotSupported))
                break;
            if (r != kNvmlSuccess) {
                say("nvlink %u unknown nvmlDeviceGetNvLinkState(link %u) returned %d\n", minor,
                    link, r);
                return;
            }
            if (!is_active) continue;
            NvmlPciInfo pci{};
            if (NvmlReturn p = remote_pci(dev, link, &pci); p != kNvmlSuccess) {
                say("nvlink %u unknown nvmlDeviceGetNvLinkRemotePciInfo_v2(link %u) returned %d\n",
                    minor, link, p);
                return;
            }
            unsigned domain = 0, bus = 0, device = 0, function = 0;
            pci.bus_id[sizeof pci.bus_id - 1] = '\0';
            if (std::sscanf(pci.bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
                say("nvlink %u unknown link %u's remote bus id is not one\n", minor, link);
                return;
            }
            Active& a = active[count++];
            a.link = link;
            a.type = 0xff;
            if (remote_type && remote_type(dev, link, &a.type) != kNvmlSuccess) a.type = 0xff;
            std::snprintf(a.bus_id, sizeof a.bus_id, "%04x:%02x:%02x.%x", domain, bus, device,
                          function);
        }
        for (unsigned i = 0; i < count; ++i)
            say("link %u %u %d %s\n", minor, active[i].link, active[i].type & 0xff,
                active[i].bus_id);
        say("nvlink %u known\n", minor);
    }

    void report_fabric(NvmlDevice dev, unsigned minor) noexcept {
        auto info = sym<NvmlReturn (*)(NvmlDevice, NvmlFabricInfo*)>("nvmlDeviceGetGpuFabricInfo");
        NvmlFabricInfo f{};
        if (!info || info(dev, &f) != kNvmlSuccess || f.state != kFabricCompleted ||
            f.status != kNvmlSuccess)
            return;
        char uuid[33] = {};
        bool any = false;
        for (unsigned i = 0; i < 16; ++i) {
            std::snprintf(uuid + 2 * i, 3, "%02x", f.cluster_uuid[i]);
            any |= f.cluster_uuid[i] != 0;
        }
        if (any) say("fabric %u %s %u\n", minor, uuid, f.clique_id);
    }

    // "memlimit yes" where NVML has the per-cgroup memory limit and the driver
    // answers for the cgroup root; else "memlimit no <why>".
    void report_memory_limits(NvmlDevice dev) noexcept {
        auto set = sym<SetLimitsFn>("nvmlDeviceSetMemoryLimits_v1");
        auto get = sym<GetLimitsFn>("nvmlDeviceGetMemoryLimits_v1");
        if (!set || !get) {
            say("memlimit no this NVML has no %s (drivers with CUDA 13.4 or later)\n",
                !set ? "nvmlDeviceSetMemoryLimits_v1" : "nvmlDeviceGetMemoryLimits_v1");
            return;
        }
        NvmlGetLimits got{kCgroupRoot, 0, 0, 0};
        const NvmlReturn r = get(dev, &got);
        if (r == kNvmlNotSupported || r == kNvmlFunctionNotFound)
            say("memlimit no nvmlDeviceGetMemoryLimits_v1(%s) returned %d: the driver does not "
                "offer it\n",
                kCgroupRoot, r);
        else
            say("memlimit yes\n");
    }

    // "p2p <minor> <minors NVML's NVLink P2P status is OK with, or ->" for
    // each GPU NVML answered for every other GPU.
    void report_p2p(const NvmlDevice* devs, const unsigned* minors, unsigned n) noexcept {
        auto p2p = sym<NvmlReturn (*)(NvmlDevice, NvmlDevice, int, int*)>("nvmlDeviceGetP2PStatus");
        if (!p2p) return;
        for (unsigned i = 0; i < n; ++i) {
            char list[kMaxGpus * 4 + 2] = "";
            std::size_t used = 0;
            bool answered = true;
            for (unsigned j = 0; j < n && answered; ++j) {
                if (j == i) continue;
                int status = -1;
                if (p2p(devs[i], devs[j], kP2pCapsNvlink, &status) != kNvmlSuccess) {
                    answered = false;
                } else if (status == kP2pStatusOk) {
                    int w = std::snprintf(list + used, sizeof list - used, "%s%u", used ? "," : "",
                                          minors[j]);
                    if (w > 0) used += static_cast<std::size_t>(w);
                }
            }
            if (answered) say("p2p %u %s\n", minors[i], used ? list : "-");
        }
    }

    template <typename F>
    F sym(const char* name) noexcept {
        return reinterpret_cast<F>(::dlsym(lib_, name));
    }

    [[gnu::format(printf, 2, 3)]] void say(const char* fmt, ...) noexcept {
        char buf[kMaxGpus * 4 + 64];
        va_list ap;
        va_start(ap, fmt);
        int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (n <= 0) return;
        std::size_t len = std::min(static_cast<std::size_t>(n), sizeof buf - 1);
        for (std::size_t done = 0; done < len;) {
            ssize_t w = ::write(out_, buf + done, len - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return;
            done += static_cast<std::size_t>(w);
        }
    }

  public:
    [[gnu::format(printf, 2, 3)]] int fail(const char* fmt, ...) noexcept {
        char buf[400];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        say("error %s\n", buf);
        return 1;
    }

  private:
    int out_;
    void* lib_ = nullptr;
};

// A program without an interpreter (PT_INTERP) is static (-static or
// -static-pie): it cannot dlopen a driver library reliably and runs
// gpubind-nvml instead.
bool linked_statically() noexcept {
    const auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(::getauxval(AT_PHDR));
    const auto count = ::getauxval(AT_PHNUM);
    if (!phdr) return false;
    for (unsigned long i = 0; i < count; ++i)
        if (phdr[i].p_type == PT_INTERP) return false;
    return true;
}

// gpubind-nvml next to this program (a build tree) or in
// <prefix>/libexec/gpubind (installed, this program in <prefix>/bin).
std::filesystem::path find_helper() {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    const auto dir = self.parent_path();
    for (const auto& candidate :
         {dir / kNvmlHelperName, dir.parent_path() / "libexec/gpubind" / kNvmlHelperName}) {
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return {};
}

GpuNvlink& nvlink_of(NvmlFacts& facts, std::uint64_t minor) {
    auto& gpu = facts.gpus[static_cast<unsigned>(minor)];
    if (!gpu.nvlink) gpu.nvlink.emplace();
    return *gpu.nvlink;
}

}  // namespace

int write_nvml_report(const char* library, int out_fd) noexcept {
    return Child(out_fd).run(library);
}

int write_memory_limits(const char* library, const char* cgroup_dir, char** limits, int count,
                        int out_fd) noexcept {
    return Child(out_fd).set_limits(library, cgroup_dir, limits, count);
}

int write_compute_mode(const char* library, unsigned mode, char** minors, int count,
                       int out_fd) noexcept {
    return Child(out_fd).set_compute_mode(library, mode, minors, count);
}

NvmlFacts parse_nvml_report(std::string_view report, const std::string& what) {
    NvmlFacts facts;
    for (auto line : util::split(report, '\n')) {
        if (line.empty()) continue;
        auto words = util::split(line, ' ');
        if (words[0] == "error") {
            throw util::Error(EIO, "query NVML", what, std::string(util::trim(line.substr(5))));
        } else if (words[0] == "cuda" && words.size() == 2) {
            facts.cuda_version = std::string(words[1]);
        } else if (words[0] == "gpu" && (words.size() == 4 || words.size() == 5)) {
            auto minor = util::parse_unsigned(words[1]);
            if (!minor) continue;
            auto& gpu = facts.gpus[static_cast<unsigned>(*minor)];
            gpu.brand = std::string(words[2]);
            if (words[3] != "-1.-1") gpu.compute_capability = std::string(words[3]);
            if (words.size() == 5)
                if (auto total = util::parse_unsigned(words[4])) gpu.memory = *total;
        } else if (words[0] == "nvlink" && words.size() >= 3) {
            auto minor = util::parse_unsigned(words[1]);
            if (!minor) continue;
            auto& nv = nvlink_of(facts, *minor);
            if (words[2] == "unknown") {
                nv.links.clear();
                const std::size_t at = line.find("unknown") + 7;
                nv.unknown = std::string(util::trim(line.substr(at)));
                if (nv.unknown.empty()) nv.unknown = "NVML did not say";
            }
        } else if (words[0] == "link" && words.size() == 5) {
            auto minor = util::parse_unsigned(words[1]);
            auto link = util::parse_unsigned(words[2]);
            auto type = util::parse_unsigned(words[3]);
            if (!minor || !link || !type || *type > 0xff) continue;
            nvlink_of(facts, *minor)
                .links.push_back({static_cast<unsigned>(*link), static_cast<std::uint8_t>(*type),
                                  std::string(words[4])});
        } else if (words[0] == "p2p" && words.size() == 3) {
            auto minor = util::parse_unsigned(words[1]);
            if (!minor) continue;
            auto& nv = nvlink_of(facts, *minor);
            nv.p2p_known = true;
            if (words[2] != "-")
                for (auto peer : util::split(words[2], ','))
                    if (auto p = util::parse_unsigned(peer))
                        nv.p2p_ok.push_back(static_cast<unsigned>(*p));
        } else if (words[0] == "fabric" && words.size() == 4) {
            auto minor = util::parse_unsigned(words[1]);
            auto clique = util::parse_unsigned(words[3]);
            if (!minor || !clique) continue;
            auto& nv = nvlink_of(facts, *minor);
            nv.fabric_cluster = std::string(words[2]);
            nv.fabric_clique = static_cast<unsigned>(*clique);
        } else if (words[0] == "memlimit" && words.size() >= 2) {
            facts.memory_limits = words[1] == "yes";
            if (!facts.memory_limits)
                facts.memory_limits_why = std::string(util::trim(line.substr(line.find("no") + 2)));
        } else if (words[0] == "mig" && words.size() == 5) {
            auto minor = util::parse_unsigned(words[1]);
            auto gi = util::parse_unsigned(words[2]);
            auto ci = util::parse_unsigned(words[3]);
            if (!minor || !gi || !ci) continue;
            facts.gpus[static_cast<unsigned>(*minor)]
                .mig_uuids[{static_cast<unsigned>(*gi), static_cast<unsigned>(*ci)}] =
                std::string(words[4]);
        }
    }
    return facts;
}

namespace {

// Runs the child (the helper with `args` after the library, from a static
// program; `in_process` in a forked child otherwise) and returns its report.
std::string run_child(const std::filesystem::path& library, const std::vector<std::string>& args,
                      const std::function<int(Child&)>& in_process,
                      std::chrono::milliseconds timeout) {
    const std::string what = library.string();
    std::filesystem::path helper;
    if (linked_statically()) {
        helper = find_helper();
        if (helper.empty())
            throw util::Error(ENOENT, "query NVML", what,
                              std::string(kNvmlHelperName) +
                                  " not found next to this program or in ../libexec/gpubind");
    }
    std::vector<std::string> argv_s = {kNvmlHelperName, what};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};
    const util::ReportingChild child = util::fork_reporting(
        [&](int out) {
            Child c(out);
            if (helper.empty()) return in_process(c);
            // The helper, with an empty environment, its report on stdout.
            if (::dup2(out, STDOUT_FILENO) < 0) return 127;
            ::execve(helper.c_str(), argv.data(), envp);
            c.fail("execute %s: %s", helper.c_str(), std::strerror(errno));
            return 127;
        },
        what);

    const auto deadline = std::chrono::steady_clock::now() + timeout;
    util::BoundedRead report;
    try {
        report = util::read_bounded(child.report.get(), kMaxReport, what, deadline);
    } catch (...) {
        util::kill_and_reap(child.pid);
        throw;
    }
    // A runaway child (too large a report) is treated like a hung one.
    if (report.end != util::ReadEnd::Eof) {
        util::kill_and_reap(child.pid);
        throw util::Error(ETIMEDOUT, "query NVML", what,
                          "no answer within " + std::to_string(timeout.count()) + " ms");
    }
    const int status = util::reap(child.pid);
    // An "error" line says why (parse_nvml_report throws it).
    if (report.data.find("error ") != std::string::npos) parse_nvml_report(report.data, what);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw util::Error(EIO, "query NVML", what, "the NVML child failed");
    return std::move(report.data);
}

}  // namespace

NvmlFacts query_nvml(const std::filesystem::path& library, std::chrono::milliseconds timeout) {
    const std::string what = library.string();
    return parse_nvml_report(
        run_child(
            library, {}, [&](Child& c) { return c.run(what.c_str()); }, timeout),
        what);
}

std::vector<MemoryLimit> set_memory_limits(const Node& node, const std::string& cgroup_dir,
                                           const std::vector<MemoryLimit>& limits,
                                           std::chrono::milliseconds timeout) {
    auto lib = std::find_if(node.files.begin(), node.files.end(), [](const DriverFile& f) {
        return f.kind == FileKind::Library && !f.compat32 && f.name == "libnvidia-ml.so.1";
    });
    if (lib == node.files.end())
        throw util::Error(ENOENT, "set GPU memory limit", cgroup_dir,
                          "the node has no libnvidia-ml.so.1");
    std::vector<std::string> args = {kMemoryLimitsOption, cgroup_dir};
    for (const MemoryLimit& l : limits)
        args.push_back(std::to_string(l.minor) + ":" + std::to_string(l.soft) + ":" +
                       std::to_string(l.hard));
    std::vector<char*> argv;
    for (std::size_t i = 2; i < args.size(); ++i) argv.push_back(args[i].data());
    const std::string what = lib->host_path;
    std::string report;
    try {
        report = run_child(
            what, args,
            [&](Child& c) {
                return c.set_limits(what.c_str(), cgroup_dir.c_str(), argv.data(),
                                    static_cast<int>(argv.size()));
            },
            timeout);
    } catch (const util::Error& e) {
        throw util::Error(e.kind(), e.code().value(), "set GPU memory limit", cgroup_dir, e.what());
    }
    std::vector<MemoryLimit> got;
    for (auto line : util::split(report, '\n')) {
        auto words = util::split(line, ' ');
        if (words.size() != 4 || words[0] != "limit") continue;
        const auto minor = util::parse_unsigned(words[1]);
        const auto soft = util::parse_unsigned(words[2]), hard = util::parse_unsigned(words[3]);
        if (minor && soft && hard) got.push_back({static_cast<unsigned>(*minor), *soft, *hard});
    }
    return got;
}

std::vector<std::pair<unsigned, unsigned>> set_compute_mode(const Node& node,
                                                            const std::vector<unsigned>& minors,
                                                            unsigned mode,
                                                            std::chrono::milliseconds timeout) {
    auto lib = std::find_if(node.files.begin(), node.files.end(), [](const DriverFile& f) {
        return f.kind == FileKind::Library && !f.compat32 && f.name == "libnvidia-ml.so.1";
    });
    if (lib == node.files.end())
        throw util::Error(ENOENT, "set compute mode", "NVML", "the node has no libnvidia-ml.so.1");
    std::vector<std::string> args = {kComputeModeOption, std::to_string(mode)};
    for (unsigned m : minors) args.push_back(std::to_string(m));
    std::vector<char*> argv;
    for (std::size_t i = 2; i < args.size(); ++i) argv.push_back(args[i].data());
    const std::string what = lib->host_path;
    std::string report;
    try {
        report = run_child(
            what, args,
            [&](Child& c) {
                return c.set_compute_mode(what.c_str(), mode, argv.data(),
                                          static_cast<int>(argv.size()));
            },
            timeout);
    } catch (const util::Error& e) {
        throw util::Error(e.kind(), e.code().value(), "set compute mode", what, e.what());
    }
    std::vector<std::pair<unsigned, unsigned>> got;
    for (auto line : util::split(report, '\n')) {
        auto words = util::split(line, ' ');
        if (words.size() != 3 || words[0] != "mode") continue;
        const auto minor = util::parse_unsigned(words[1]), m = util::parse_unsigned(words[2]);
        if (minor && m) got.emplace_back(static_cast<unsigned>(*minor), static_cast<unsigned>(*m));
    }
    return got;
}

}  // namespace gpubind::node
