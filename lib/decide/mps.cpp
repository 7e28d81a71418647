// GPU shares under MPS: see decide/mps.hpp.
#include "gpubind/decide/mps.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/mount_flags.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::decide {

namespace {

constexpr unsigned kMpsFlags = util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec;
constexpr std::size_t kMaxLimits = 4096;

[[noreturn]] void refuse_path(const std::string& path, const std::string& why) {
    util::throw_refused("check MPS daemon", path, why);
}

// Opens `path` (absolute) one component at a time, no link followed; the
// last `owned` components must be directories of root's. -1: one is missing.
util::Fd open_dir(const std::string& path, std::size_t owned) {
    util::Fd dir(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) util::throw_errno("open", "/");
    const auto parts = util::split(path, '/');
    std::vector<std::string_view> names;
    for (auto p : parts)
        if (!p.empty() && p != ".") names.push_back(p);
    std::string at;
    for (std::size_t i = 0; i < names.size(); ++i) {
        at += "/" + std::string(names[i]);
        if (names[i] == "..") refuse_path(at, "a path with \"..\"");
        util::Fd next(
            ::openat(dir.get(), std::string(names[i]).c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (!next) {
            if (errno == ENOENT) return util::Fd();
            util::throw_errno("open", at);
        }
        struct stat st {};
        if (::fstat(next.get(), &st) != 0) util::throw_errno("stat", at);
        if (S_ISLNK(st.st_mode)) refuse_path(at, "a symbolic link, never followed");
        if (!S_ISDIR(st.st_mode)) refuse_path(at, "not a directory");
        if (i + owned >= names.size() && st.st_uid != 0) refuse_path(at, "not root's");
        dir = std::move(next);
    }
    return dir;
}

}  // namespace

bool node_has_mps(const node::Node& node) {
    return std::any_of(node.files.begin(), node.files.end(), [](const node::DriverFile& f) {
        return f.kind == node::FileKind::Binary && f.name == "nvidia-cuda-mps-control";
    });
}

MpsDaemon read_mps_daemon(const std::filesystem::path& root, const std::string& uuid) {
    MpsDaemon d;
    d.dir = (root / uuid).string();
    if (uuid.empty() || uuid.find('/') != std::string::npos || uuid == "..")
        refuse_path(d.dir, "not a GPU UUID");
    const util::Fd gpu = open_dir(d.dir, 2);
    if (!gpu) return d;
    struct stat st {};
    const std::string control = d.dir + "/pipe/control";
    const util::Fd pipe = open_dir(d.dir + "/pipe", 3);
    if (!pipe || ::fstatat(pipe.get(), "control", &st, AT_SYMLINK_NOFOLLOW) != 0) return d;
    if (!S_ISSOCK(st.st_mode) || st.st_uid != 0) refuse_path(control, "not a socket of root's");
    const std::string limits = d.dir + "/" + kMpsLimitsFile;
    util::Fd file(::openat(gpu.get(), kMpsLimitsFile, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!file) {
        if (errno == ENOENT) return d;  // a daemon not yet set up: not running for us
        util::throw_errno("open", limits);
    }
    if (::fstat(file.get(), &st) != 0) util::throw_errno("stat", limits);
    if (!S_ISREG(st.st_mode) || st.st_uid != 0) refuse_path(limits, "not a regular file of root's");
    const std::string text = util::read_fd(file.get(), kMaxLimits, limits);
    bool memory = false, compute = false;
    for (auto line : util::split(text, '\n')) {
        const auto words = util::split(util::trim(line), ' ');
        if (words.size() != 2) continue;
        const auto n = util::parse_unsigned(words[1]);
        if (words[0] == "memory" && n) {
            d.memory = *n;
            memory = true;
        } else if (words[0] == "compute" && n && *n >= 1 && *n <= 100) {
            d.compute = static_cast<unsigned>(*n);
            compute = true;
        }
    }
    if (!memory || !compute)
        refuse_path(limits,
                    "not the ceilings `gpubind mps` writes (\"memory <bytes>\", "
                    "\"compute <percent>\")");
    d.running = true;
    return d;
}

std::vector<std::string> mps_daemon_lines(const node::Node& node,
                                          const std::filesystem::path& root) {
    std::vector<std::string> lines;
    for (const node::Gpu& gpu : node.gpus) {
        if (gpu.uuid.empty()) continue;
        try {
            const MpsDaemon d = read_mps_daemon(root, gpu.uuid);
            lines.push_back(
                d.running
                    ? fmt::format("{}: the MPS control daemon runs (ceilings: {}, {}%)", gpu.uuid,
                                  d.memory ? size_text(d.memory) : "the whole GPU", d.compute)
                    : fmt::format("{}: no MPS control daemon runs (start `gpubind mps`)",
                                  gpu.uuid));
        } catch (const util::Error& e) {
            lines.push_back(fmt::format("{}: {}", gpu.uuid, e.what()));
        }
    }
    return lines;
}

MpsPlan plan_mps(const ShareRequest& share, const node::Selection& selection,
                 const MpsDaemon& daemon) {
    const std::string& by = share.asked_by;
    if (selection.gpus.size() != 1)
        util::throw_refused("check share", by,
                            fmt::format("an MPS share is of exactly one GPU, and the container "
                                        "is given {}",
                                        selection.gpus.size()));
    const node::Gpu& gpu = *selection.gpus.front();
    if (gpu.uuid.empty())
        util::throw_refused("check share", by,
                            fmt::format("{} has no UUID (NVML did not answer): its MPS daemon "
                                        "cannot be found",
                                        node::gpu_name(gpu)));
    if (!daemon.running)
        util::throw_refused("check share", by,
                            fmt::format("the MPS control daemon for {} is not running: start "
                                        "`gpubind mps`",
                                        gpu.uuid));
    const auto per = share.device_memory.find(0);
    const std::uint64_t memory = per != share.device_memory.end() ? per->second : share.memory;
    const std::uint64_t ceiling = daemon.memory ? daemon.memory : gpu.memory;
    if (memory && ceiling && memory > ceiling)
        util::throw_refused("check share", by,
                            fmt::format("a share of {} is above the MPS ceiling of {} on {}",
                                        size_text(memory), size_text(ceiling), gpu.uuid));
    if (share.compute > daemon.compute)
        util::throw_refused("check share", by,
                            fmt::format("a compute share of {}% is above the MPS ceiling of {}% "
                                        "on {}",
                                        share.compute, daemon.compute, gpu.uuid));
    MpsPlan p;
    p.mounts.push_back({daemon.dir + "/pipe", kMpsPipeTarget, true, kMpsFlags,
                        "MPS pipe directory of " + gpu.uuid});
    p.mounts.push_back(
        {daemon.dir + "/shm", kMpsShmTarget, true, kMpsFlags, "MPS shared memory of " + gpu.uuid});
    p.env.push_back(std::string("CUDA_MPS_PIPE_DIRECTORY=") + kMpsPipeTarget);
    // In MiB, rounded down: a client's variable can only lower the ceiling.
    if (memory)
        p.env.push_back(fmt::format("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={}M", memory >> 20));
    if (share.compute)
        p.env.push_back(fmt::format("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={}", share.compute));
    return p;
}

void add_mps(Plan& plan, MpsPlan mps) {
    for (auto& m : mps.mounts) {
        std::erase_if(plan.mounts, [&](const PlannedMount& old) { return old.target == m.target; });
        plan.mounts.push_back(std::move(m));
    }
    for (auto& e : mps.env) plan.env.push_back(std::move(e));
}

}  // namespace gpubind::decide
