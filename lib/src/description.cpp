// The node description (description.hpp): fingerprint, file format, trust
// checks, recomputation.
#include "gpubind/description.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "gpubind/error.hpp"
#include "gpubind/fd.hpp"
#include "gpubind/file.hpp"
#include "gpubind/log.hpp"

namespace gpubind {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSchema = "gpubind.node/1";
constexpr std::size_t kMaxProcFile = 64u << 10;
// A listing deeper than this (capabilities/gpu<N>/mig/gi<G>/ci<C>) is not the driver's.
constexpr int kMaxDepth = 5;

// 64-bit FNV-1a: a digest of content, not an authentication (the file's owner
// and mode are that).
std::uint64_t fnv1a(std::string_view data, std::uint64_t h = 14695981039346656037ull) {
    for (unsigned char c : data) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

std::string hex(std::uint64_t v) {
    return fmt::format("{:016x}", v);
}

fs::path under(const fs::path& root, const fs::path& path) {
    return root / path.relative_path();
}

std::int64_t now_seconds() {
    return static_cast<std::int64_t>(std::time(nullptr));
}

// ---- the fingerprint -------------------------------------------------------------------------

// A small file's content, or what kept it from being read.
std::string content_of(const fs::path& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) return fmt::format("unreadable: {}", std::strerror(errno));
    try {
        return read_stream(fd.get(), kMaxProcFile, path.string());
    } catch (const Error& e) {
        return std::string("unreadable: ") + e.what();
    }
}

// lstat identity: what changes when the entry is replaced, written, renamed
// into or out of (a directory), or its owner or mode change (ctime).
std::string identity(const fs::path& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "missing" : "error";
    return fmt::format("{}:{}:{:o}:{}:{}:{}.{}:{}.{}:{}:{}", major(st.st_dev), minor(st.st_dev),
                       st.st_mode, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                       st.st_ctim.tv_sec, st.st_ctim.tv_nsec, st.st_uid, st.st_rdev);
}

// Appends "<rel>/<name>:<inode>;" for each entry of `dir` (sorted), into its
// subdirectories down to kMaxDepth.
void listing(std::string& out, const fs::path& dir, const std::string& rel, int depth) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
        out += rel + (errno == ENOENT ? ":missing;" : ":error;");
        return;
    }
    std::vector<std::pair<std::string, std::pair<ino_t, unsigned char>>> entries;
    while (const dirent* e = ::readdir(d)) {
        std::string_view name = e->d_name;
        if (name == "." || name == "..") continue;
        entries.push_back({std::string(name), {e->d_ino, e->d_type}});
    }
    ::closedir(d);
    std::sort(entries.begin(), entries.end());
    for (const auto& [name, info] : entries) {
        out += fmt::format("{}/{}:{};", rel, name, info.first);
        if (info.second == DT_DIR && depth < kMaxDepth)
            listing(out, dir / name, rel + "/" + name, depth + 1);
    }
}

// The dev root's NVIDIA entries (nvidia*): names and inodes, and for the
// nodes their identity (type, numbers, mode, owner: what discovery reads with
// stat).
std::string dev_nodes(const fs::path& dev) {
    DIR* d = ::opendir(dev.c_str());
    if (!d) return errno == ENOENT ? "missing" : "error";
    std::vector<std::pair<std::string, std::pair<ino_t, unsigned char>>> entries;
    while (const dirent* e = ::readdir(d))
        if (std::string_view(e->d_name).rfind("nvidia", 0) == 0)
            entries.push_back({e->d_name, {e->d_ino, e->d_type}});
    ::closedir(d);
    std::sort(entries.begin(), entries.end());
    std::string out;
    for (const auto& [name, info] : entries) {
        out += fmt::format("{}:{}", name, info.first);
        if (info.second != DT_DIR) out += "=" + identity(dev / name);
        out += ";";
    }
    return out;
}

// lstat identity that a new entry in a directory leaves alone: the entry
// itself replaced, its type, owner or mode changed.
std::string owner_identity(const fs::path& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "missing" : "error";
    return fmt::format("{}:{}:{}:{:o}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino,
                       st.st_mode, st.st_uid);
}

// Paths whose identity counts beside the fixed parts, by the prefix of their
// fingerprint key: "watch:" where discovery found the driver's files (the
// binaries' directories, the firmware's, the libraries' and their links'),
// "owner:" each IPC and every directory above it, whose owners and modes
// decide whether it is given (discover's unsafe_ipc).
constexpr std::string_view kWatch = "watch:";
constexpr std::string_view kOwner = "owner:";

std::set<std::string> watched_keys(const Config& config, const Node& node) {
    std::set<std::string> keys;
    auto watch = [&](const fs::path& p) { keys.insert(std::string(kWatch) + p.string()); };
    for (const char* dir : {"/usr/bin", "/usr/sbin", "/bin", "/sbin"})
        watch(under(config.roots.driver, dir));
    for (const auto& entry : config.catalog.ipcs)
        for (fs::path p = under(config.roots.driver, entry.name);; p = p.parent_path()) {
            keys.insert(std::string(kOwner) + p.string());
            if (p == p.parent_path()) break;
        }
    for (const auto& entry : config.catalog.firmware) {
        std::string pattern = entry.name;
        if (auto v = pattern.find("{version}"); v != std::string::npos)
            pattern.replace(v, 9, node.driver_version);
        watch(under(config.roots.driver, fs::path(pattern).parent_path()));
    }
    for (const auto& f : node.files) {
        if (f.kind != FileKind::Library) continue;
        watch(f.host_path.parent_path());
        watch(f.real_path.parent_path());
    }
    return keys;
}

// Adds the identity of each watched key's path.
void add_watched(Fingerprint& fp, const std::set<std::string>& keys) {
    for (const auto& key : keys) {
        if (key.rfind(kWatch, 0) == 0)
            fp[key] = identity(key.substr(kWatch.size()));
        else if (key.rfind(kOwner, 0) == 0)
            fp[key] = owner_identity(key.substr(kOwner.size()));
    }
}

// The first part where two fingerprints differ, "" when they are equal.
std::string difference(const Fingerprint& stored, const Fingerprint& now) {
    for (const auto& [key, value] : now) {
        auto it = stored.find(key);
        if (it == stored.end()) return key + " is new";
        if (it->second != value) return key + " changed";
    }
    for (const auto& [key, value] : stored)
        if (!now.count(key)) return key + " is gone";
    return {};
}

// ---- the node as JSON ------------------------------------------------------------------------

json to_json(const DeviceNode& n) {
    return {{"path", n.path.string()},
            {"host_path", n.host_path.string()},
            {"major", n.major},
            {"minor", n.minor},
            {"mode", static_cast<unsigned>(n.mode)}};
}

DeviceNode node_from(const json& j) {
    DeviceNode n;
    n.path = j.at("path").get<std::string>();
    n.host_path = j.at("host_path").get<std::string>();
    n.major = j.at("major").get<unsigned>();
    n.minor = j.at("minor").get<unsigned>();
    n.mode = static_cast<mode_t>(j.at("mode").get<unsigned>());
    return n;
}

json nodes_json(const std::vector<DeviceNode>& nodes) {
    json out = json::array();
    for (const auto& n : nodes) out.push_back(to_json(n));
    return out;
}

std::vector<DeviceNode> nodes_from(const json& j) {
    std::vector<DeviceNode> out;
    for (const auto& n : j) out.push_back(node_from(n));
    return out;
}

constexpr std::pair<FileKind, const char*> kKinds[] = {{FileKind::Library, "library"},
                                                       {FileKind::Binary, "binary"},
                                                       {FileKind::Ipc, "ipc"},
                                                       {FileKind::Firmware, "firmware"}};

json node_json(const Node& node) {
    json gpus = json::array();
    for (const auto& g : node.gpus) {
        json migs = json::array();
        for (const auto& m : g.mig)
            migs.push_back({{"gpu_index", m.gpu_index},
                            {"index", m.index},
                            {"gi", m.gi},
                            {"ci", m.ci},
                            {"uuid", m.uuid},
                            {"gi_access", m.gi_access.string()},
                            {"ci_access", m.ci_access.string()},
                            {"gi_cap", to_json(m.gi_cap)},
                            {"ci_cap", to_json(m.ci_cap)}});
        gpus.push_back({{"index", g.index},
                        {"minor", g.minor},
                        {"model", g.model},
                        {"uuid", g.uuid},
                        {"pci_bus_id", g.pci_bus_id},
                        {"vbios", g.vbios},
                        {"bus_type", g.bus_type},
                        {"excluded", g.excluded},
                        {"proc_dir", g.proc_dir.string()},
                        {"node", to_json(g.node)},
                        {"mig", migs},
                        {"brand", g.brand},
                        {"compute_capability", g.compute_capability}});
    }
    json files = json::array();
    for (const auto& f : node.files) {
        const char* kind = "library";
        for (const auto& [k, name] : kKinds)
            if (k == f.kind) kind = name;
        files.push_back({{"kind", kind},
                         {"name", f.name},
                         {"host_path", f.host_path.string()},
                         {"real_path", f.real_path.string()},
                         {"caps", f.caps},
                         {"compat32", f.compat32}});
    }
    return {{"roots",
             {{"driver", node.roots.driver.string()},
              {"dev", node.roots.dev.string()},
              {"proc", node.roots.proc.string()}}},
            {"driver_version", node.driver_version},
            {"cuda_version", node.cuda_version},
            {"gpus", gpus},
            {"control", nodes_json(node.control)},
            {"mig_control", nodes_json(node.mig_control)},
            {"imex_channels", nodes_json(node.imex_channels)},
            {"files", files},
            {"warnings", node.warnings}};
}

Node node_from_json(const json& j) {
    Node node;
    node.roots.driver = j.at("roots").at("driver").get<std::string>();
    node.roots.dev = j.at("roots").at("dev").get<std::string>();
    node.roots.proc = j.at("roots").at("proc").get<std::string>();
    node.driver_version = j.at("driver_version").get<std::string>();
    node.cuda_version = j.at("cuda_version").get<std::string>();
    for (const auto& g : j.at("gpus")) {
        Gpu gpu;
        gpu.index = g.at("index").get<unsigned>();
        gpu.minor = g.at("minor").get<unsigned>();
        gpu.model = g.at("model").get<std::string>();
        gpu.uuid = g.at("uuid").get<std::string>();
        gpu.pci_bus_id = g.at("pci_bus_id").get<std::string>();
        gpu.vbios = g.at("vbios").get<std::string>();
        gpu.bus_type = g.at("bus_type").get<std::string>();
        gpu.excluded = g.at("excluded").get<bool>();
        gpu.proc_dir = g.at("proc_dir").get<std::string>();
        gpu.node = node_from(g.at("node"));
        gpu.brand = g.at("brand").get<std::string>();
        gpu.compute_capability = g.at("compute_capability").get<std::string>();
        for (const auto& m : g.at("mig")) {
            MigDevice mig;
            mig.gpu_index = m.at("gpu_index").get<unsigned>();
            mig.index = m.at("index").get<unsigned>();
            mig.gi = m.at("gi").get<unsigned>();
            mig.ci = m.at("ci").get<unsigned>();
            mig.uuid = m.at("uuid").get<std::string>();
            mig.gi_access = m.at("gi_access").get<std::string>();
            mig.ci_access = m.at("ci_access").get<std::string>();
            mig.gi_cap = node_from(m.at("gi_cap"));
            mig.ci_cap = node_from(m.at("ci_cap"));
            gpu.mig.push_back(std::move(mig));
        }
        node.gpus.push_back(std::move(gpu));
    }
    node.control = nodes_from(j.at("control"));
    node.mig_control = nodes_from(j.at("mig_control"));
    node.imex_channels = nodes_from(j.at("imex_channels"));
    for (const auto& f : j.at("files")) {
        DriverFile file;
        const std::string kind = f.at("kind").get<std::string>();
        bool known = false;
        for (const auto& [k, name] : kKinds)
            if (kind == name) {
                file.kind = k;
                known = true;
            }
        if (!known) throw json::other_error::create(501, "unknown file kind " + kind, nullptr);
        file.name = f.at("name").get<std::string>();
        file.host_path = f.at("host_path").get<std::string>();
        file.real_path = f.at("real_path").get<std::string>();
        file.caps = f.at("caps").get<Capabilities>();
        file.compat32 = f.at("compat32").get<bool>();
        node.files.push_back(std::move(file));
    }
    node.warnings = j.at("warnings").get<std::vector<std::string>>();
    return node;
}

constexpr std::pair<NvmlStatus, const char*> kNvmlStatuses[] = {{NvmlStatus::NotAsked, "not-asked"},
                                                                {NvmlStatus::Answered, "answered"},
                                                                {NvmlStatus::Failed, "failed"}};

// ---- the file --------------------------------------------------------------------------------

// {"digest":"<16 hex digits>","body":<body>}: the digest is FNV-1a of the
// body's bytes, so it is checked before the body is parsed.
constexpr std::string_view kHead = "{\"digest\":\"";
constexpr std::string_view kMiddle = "\",\"body\":";
constexpr std::string_view kTail = "}\n";

std::string serialize(const NodeKnowledge& k) {
    json nvml = {{"status", "not-asked"},
                 {"asked_at", k.nvml.asked_at},
                 {"took_ms", k.nvml.took_ms},
                 {"error", k.nvml.error}};
    for (const auto& [s, name] : kNvmlStatuses)
        if (s == k.nvml.status) nvml["status"] = name;
    json body = {{"schema", kSchema},
                 {"computed_at", k.computed_at},
                 {"fingerprint", k.fingerprint},
                 {"nvml", nvml},
                 {"node", node_json(k.node)},
                 {"proc",
                  {{"version", k.proc.version},
                   {"params", k.proc.params},
                   {"information", k.proc.information}}}};
    const std::string text = body.dump();
    return std::string(kHead) + hex(fnv1a(text)) + std::string(kMiddle) + text + std::string(kTail);
}

// Why the directory may not hold a trusted description ("" when it may).
std::string untrusted_dir(int dirfd) {
    struct stat st {};
    if (::fstat(dirfd, &st) != 0) return "cannot be checked";
    if (!S_ISDIR(st.st_mode)) return "is not a directory";
    if (st.st_uid != 0) return "is not owned by root";
    if (st.st_mode & (S_IWGRP | S_IWOTH)) return "is writable by others than root";
    return {};
}

// The stored description, or nullopt with `why` saying what was wrong with it.
std::optional<NodeKnowledge> read_description(const Config& config, std::string& why) {
    const fs::path dir = config.state_dir;
    const fs::path path = description_path(config);
    Fd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dirfd) {
        why = errno == ENOENT ? "no description yet" : dir.string() + ": " + std::strerror(errno);
        return std::nullopt;
    }
    if (std::string bad = untrusted_dir(dirfd.get()); !bad.empty()) {
        why = dir.string() + " " + bad;
        return std::nullopt;
    }
    Fd fd(::openat(dirfd.get(), kNodeDescriptionName,
                   O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        why = errno == ENOENT  ? "no description yet"
              : errno == ELOOP ? path.string() + " is a symbolic link"
                               : path.string() + ": " + std::strerror(errno);
        return std::nullopt;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        why = path.string() + " is not a regular file";
        return std::nullopt;
    }
    if (st.st_uid != 0) {
        why = path.string() + " is not owned by root";
        return std::nullopt;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        why = path.string() + " is writable by others than root";
        return std::nullopt;
    }
    if (static_cast<std::size_t>(st.st_size) > kMaxDescriptionSize) {
        why = path.string() + " is larger than " + std::to_string(kMaxDescriptionSize) + " bytes";
        return std::nullopt;
    }
    std::string text;
    try {
        text = read_fd(fd.get(), kMaxDescriptionSize, path.string());
    } catch (const Error& e) {
        why = e.what();
        return std::nullopt;
    }
    const std::size_t digest_at = kHead.size(), body_at = digest_at + 16 + kMiddle.size();
    if (text.size() < body_at + kTail.size() || text.compare(0, kHead.size(), kHead) != 0 ||
        text.compare(digest_at + 16, kMiddle.size(), kMiddle) != 0 ||
        text.compare(text.size() - kTail.size(), kTail.size(), kTail) != 0) {
        why = path.string() + " is not a description (truncated or corrupt)";
        return std::nullopt;
    }
    const std::string_view body =
        std::string_view(text).substr(body_at, text.size() - body_at - kTail.size());
    if (text.compare(digest_at, 16, hex(fnv1a(body))) != 0) {
        why = path.string() + " does not match its digest (changed since written)";
        return std::nullopt;
    }
    try {
        const json j = json::parse(body);
        if (j.at("schema").get<std::string>() != kSchema) {
            why = path.string() + " has another schema";
            return std::nullopt;
        }
        NodeKnowledge k;
        k.path = path;
        k.computed_at = j.at("computed_at").get<std::int64_t>();
        k.fingerprint = j.at("fingerprint").get<Fingerprint>();
        const json& nvml = j.at("nvml");
        const std::string status = nvml.at("status").get<std::string>();
        bool known = false;
        for (const auto& [s, name] : kNvmlStatuses)
            if (status == name) {
                k.nvml.status = s;
                known = true;
            }
        if (!known) throw json::other_error::create(501, "unknown NVML status", nullptr);
        k.nvml.asked_at = nvml.at("asked_at").get<std::int64_t>();
        k.nvml.took_ms = nvml.at("took_ms").get<std::int64_t>();
        k.nvml.error = nvml.at("error").get<std::string>();
        k.node = node_from_json(j.at("node"));
        const json& proc = j.at("proc");
        k.proc.version = proc.at("version").get<std::string>();
        k.proc.params = proc.at("params").get<std::string>();
        k.proc.information = proc.at("information").get<std::map<std::string, std::string>>();
        k.stored = true;
        return k;
    } catch (const json::exception& e) {
        why = path.string() + " is corrupt: " + e.what();
        return std::nullopt;
    }
}

// Writes the description atomically: a new file (O_EXCL, never through a
// link) in the state directory, 0644, renamed over node.json. Root only.
void write_description(const Config& config, const NodeKnowledge& k) {
    const fs::path dir = config.state_dir;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw_errno("create directory", dir);
    Fd dirfd = open_or_throw(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (std::string bad = untrusted_dir(dirfd.get()); !bad.empty())
        throw Error(EACCES, "write node description", dir.string(), bad);
    const std::string tmp =
        std::string(kNodeDescriptionName) + ".tmp-" + std::to_string(::getpid());
    const std::string what = (dir / tmp).string();
    ::unlinkat(dirfd.get(), tmp.c_str(), 0);
    Fd fd = openat_or_throw(dirfd.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW,
                            what, 0644);
    auto fail = [&](const char* op) {
        const int err = errno;
        ::unlinkat(dirfd.get(), tmp.c_str(), 0);
        throw Error(err, op, what);
    };
    if (::fchmod(fd.get(), 0644) != 0) fail("chmod");
    const std::string data = serialize(k);
    for (std::size_t done = 0; done < data.size();) {
        ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += static_cast<std::size_t>(n);
    }
    if (::renameat(dirfd.get(), tmp.c_str(), dirfd.get(), kNodeDescriptionName) != 0)
        fail("rename");
}

void ask_nvml(NodeKnowledge& k, std::chrono::milliseconds timeout) {
    const auto start = std::chrono::steady_clock::now();
    k.nvml.asked_at = now_seconds();
    k.nvml.error = k.node.gpus.empty() ? std::string() : apply_nvml(k.node, timeout);
    k.nvml.status = k.nvml.error.empty() ? NvmlStatus::Answered : NvmlStatus::Failed;
    k.nvml.took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    k.nvml_asked = true;
    logger().debug("node description: NVML {} in {} ms{}{}",
                   k.nvml.error.empty() ? "answered" : "failed", k.nvml.took_ms,
                   k.nvml.error.empty() ? "" : ": ", k.nvml.error);
}

}  // namespace

std::filesystem::path description_path(const Config& config) {
    return config.state_dir / kNodeDescriptionName;
}

std::string config_digest(const Config& c) {
    // Every field, in order; a field added to Config belongs here too.
    std::string t =
        fmt::format("roots={}|{}|{}\nldcache={}\nldconfig={}\nstate={}\nruntimes={}\nlog={}|{}\n",
                    c.roots.driver.string(), c.roots.dev.string(), c.roots.proc.string(),
                    c.ldcache_path().string(), c.ldconfig.string(), c.state_dir.string(),
                    fmt::join(c.runtimes, "|"), c.log.file, c.log.level);
    const Policy& p = c.policy;
    t += fmt::format("policy={},{},{},{},{},{},{},{},{}\n", p.accept_envvar_unprivileged,
                     p.accept_volume_mounts, p.disable_require, p.supported, p.cgroups,
                     static_cast<int>(p.on_refused), p.cuda_compat, static_cast<int>(p.ldcache),
                     fmt::join(p.ipc_owners, "|"));
    for (const auto* list :
         {&c.catalog.libraries, &c.catalog.binaries, &c.catalog.ipcs, &c.catalog.firmware}) {
        t += "catalog:";
        for (const auto& e : *list) t += fmt::format("{}={};", e.name, e.caps);
        t += "\n";
    }
    return hex(fnv1a(t));
}

Fingerprint node_fingerprint(const Config& config) {
    const fs::path nv = config.roots.proc / "driver/nvidia";
    const fs::path dev = under(config.roots.dev, "/dev");
    Fingerprint fp;
    fp["schema"] = kSchema;
    fp["config"] = config_digest(config);
    fp["version"] = content_of(nv / "version");
    fp["params"] = hex(fnv1a(content_of(nv / "params")));
    fp["devices"] = hex(fnv1a(content_of(config.roots.proc / "devices")));
    std::string proc;
    listing(proc, nv / "gpus", "gpus", 1);
    listing(proc, nv / "capabilities", "capabilities", 1);
    fp["proc"] = hex(fnv1a(proc));
    std::string nodes = dev_nodes(dev);
    listing(nodes, dev / "nvidia-caps", "nvidia-caps", kMaxDepth);
    listing(nodes, dev / "nvidia-caps-imex-channels", "imex", kMaxDepth);
    fp["dev"] = hex(fnv1a(nodes));
    fp["ldcache"] = identity(config.ldcache_path());
    return fp;
}

NodeKnowledge load_node(const Config& config, const LoadOptions& options) {
    const auto started = std::chrono::steady_clock::now();
    Fingerprint now = node_fingerprint(config);
    const auto fingerprinted = std::chrono::steady_clock::now();
    std::string why = "refresh asked";
    std::optional<NodeKnowledge> stored;
    if (!options.refresh) stored = read_description(config, why);
    const auto read = std::chrono::steady_clock::now();
    if (stored) {
        std::set<std::string> watched;
        for (const auto& [key, value] : stored->fingerprint)
            if (key.rfind(kWatch, 0) == 0 || key.rfind(kOwner, 0) == 0) watched.insert(key);
        add_watched(now, watched);
        why = difference(stored->fingerprint, now);
        if (!why.empty()) why = "the driver state changed (" + why + ")";
    }
    NodeKnowledge k;
    bool dirty = false;
    if (stored && why.empty()) {
        k = std::move(*stored);
        auto us = [](auto d) {
            return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
        };
        logger().debug(
            "node description {}: computed {} s ago, checked and read in {} us (fingerprint "
            "{} us, reading and parsing {} us)",
            k.path.string(), now_seconds() - k.computed_at,
            us(std::chrono::steady_clock::now() - started), us(fingerprinted - started),
            us(read - fingerprinted));
    } else {
        logger().debug("node description: discovering the node: {}", why);
        k.path = description_path(config);
        k.why = why;
        k.recomputed = true;
        k.computed_at = now_seconds();
        DiscoverOptions discover_options;
        discover_options.nvml = false;
        k.node = discover(config, discover_options);
        k.proc = read_proc_files(k.node);
        // Taken before discovery: a change meanwhile makes the next check recompute.
        k.fingerprint = std::move(now);
        add_watched(k.fingerprint, watched_keys(config, k.node));
        dirty = true;
    }
    if (options.need_nvml && k.nvml.status == NvmlStatus::NotAsked) {
        ask_nvml(k, options.nvml_timeout);
        dirty = true;
    }
    if (dirty) {
        k.stored = false;
        if (options.write && ::geteuid() == 0) {
            try {
                write_description(config, k);
                k.stored = true;
            } catch (const Error& e) {
                logger().debug("node description not stored: {}", e.what());
            }
        }
    }
    return k;
}

}  // namespace gpubind
