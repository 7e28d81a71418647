// Reading the driver's files on the node: see node_read.hpp.
#include "gpubind/node/node_read.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "gpubind/node/node.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::node::detail {

namespace fs = std::filesystem;

// Joins a root and an absolute path meant to live under it.
fs::path under(const fs::path& root, const fs::path& path) {
    return root / path.relative_path();
}

// "Key: value" lines (procfs information, params, capability files).
std::map<std::string, std::string, std::less<>> read_fields(const fs::path& path) {
    std::map<std::string, std::string, std::less<>> fields;
    const std::string text = util::read_file(path, kMaxProcFile);
    for (auto line : util::split(text, '\n')) {
        auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        fields.emplace(util::trim(line.substr(0, colon)), util::trim(line.substr(colon + 1)));
    }
    return fields;
}

std::vector<fs::path> mig_access_files(const fs::path& caps) {
    std::vector<fs::path> files;
    for (const auto& gpu : list_dir(caps)) {
        if (!gpu.starts_with("gpu")) continue;
        for (const auto& gi : list_dir(caps / gpu / "mig")) {
            if (!gi.starts_with("gi")) continue;
            files.push_back(caps / gpu / "mig" / gi / "access");
            for (const auto& ci : list_dir(caps / gpu / "mig" / gi))
                if (ci.starts_with("ci")) files.push_back(caps / gpu / "mig" / gi / ci / "access");
        }
    }
    for (const char* which : {"config", "monitor"}) {
        struct stat st {};
        if (::lstat((caps / "mig" / which).c_str(), &st) == 0)
            files.push_back(caps / "mig" / which);
    }
    return files;
}

GpuNodeFields gpu_node_fields(const std::map<std::string, std::string, std::less<>>& fields) {
    GpuNodeFields out;
    if (const auto it = fields.find("GPU Excluded"); it != fields.end())
        out.excluded = it->second == "Yes";
    if (const auto it = fields.find("Device Minor"); it != fields.end())
        if (const auto n = util::parse_unsigned(it->second); n && *n < kModesetMinor)
            out.minor = static_cast<unsigned>(*n);
    return out;
}

std::vector<std::string> list_dir(const fs::path& dir) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (!d) {
        if (errno == ENOENT) return names;
        util::throw_errno("open directory", dir.string());
    }
    // readdir's end and its failure both return null: errno tells them apart
    // (a listing cut short would read as a node with fewer GPUs).
    for (;;) {
        errno = 0;
        const dirent* e = ::readdir(d);
        if (!e) break;
        std::string_view name = e->d_name;
        if (name != "." && name != "..") names.emplace_back(name);
    }
    const int error = errno;
    ::closedir(d);
    if (error != 0) throw util::Error(error, "read directory", dir.string());
    std::sort(names.begin(), names.end());
    return names;
}

bool is_version(std::string_view s) {
    return !s.empty() && s.find('.') != std::string_view::npos &&
           s.find_first_not_of("0123456789.") == std::string_view::npos;
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..." (also the
// open kernel module's "... Open Kernel Module for x86_64  550.54.15  Release Build ...").
std::string read_driver_version(const fs::path& path) {
    const std::string text = util::read_file(path, kMaxProcFile);
    for (auto line : util::split(text, '\n')) {
        if (line.rfind("NVRM version:", 0) != 0) continue;
        for (auto word : util::split(line, ' '))
            if (is_version(util::trim(word))) return std::string(util::trim(word));
    }
    util::throw_invalid("read driver version", path.string(),
                        "no \"NVRM version:\" line with a version");
}

// The character-device majors by driver name, from a /proc/devices-style file.
std::map<std::string, unsigned, std::less<>> read_majors(const fs::path& path) {
    std::map<std::string, unsigned, std::less<>> majors;
    bool chars = false;
    const std::string text = util::read_file(path, kMaxProcFile);
    for (auto line : util::split(text, '\n')) {
        line = util::trim(line);
        if (line == "Character devices:")
            chars = true;
        else if (line == "Block devices:")
            chars = false;
        else if (chars) {
            auto space = line.find(' ');
            if (space == std::string_view::npos) continue;
            if (auto major = util::parse_unsigned(line.substr(0, space)))
                majors.emplace(util::trim(line.substr(space + 1)), static_cast<unsigned>(*major));
        }
    }
    return majors;
}

// Resolves every symlink of `path` inside `root` (absolute link targets are
// taken relative to the root, ".." stops at it). Returns the root-relative
// absolute path, or nullopt if something along the way does not exist.
std::optional<fs::path> resolve_in(const fs::path& root, const fs::path& path) {
    std::vector<std::string> todo;  // components still to walk; back() is the next one
    auto push = [&todo](const fs::path& p) {
        std::vector<std::string> parts;
        for (const auto& c : p.relative_path()) parts.push_back(c.string());
        todo.insert(todo.end(), parts.rbegin(), parts.rend());
    };
    push(path);
    fs::path clean = "/";
    int links = 0;
    while (!todo.empty()) {
        std::string part = std::move(todo.back());
        todo.pop_back();
        if (part.empty() || part == ".") continue;
        if (part == "..") {
            clean = clean.parent_path();
            continue;
        }
        fs::path next = clean / part;
        struct stat st {};
        if (::lstat(under(root, next).c_str(), &st) != 0) return std::nullopt;
        if (!S_ISLNK(st.st_mode)) {
            clean = std::move(next);
            continue;
        }
        if (++links > 40) return std::nullopt;
        char buf[4096];
        ssize_t n = ::readlink(under(root, next).c_str(), buf, sizeof buf);
        if (n <= 0 || static_cast<std::size_t>(n) == sizeof buf) return std::nullopt;
        fs::path target(std::string(buf, static_cast<std::size_t>(n)));
        if (target.is_absolute()) clean = "/";
        push(target);
    }
    return clean;
}

}  // namespace gpubind::node::detail

namespace gpubind::node {

namespace {

std::string read_optional(const std::filesystem::path& path) {
    try {
        return util::read_file(path, detail::kMaxProcFile);
    } catch (const util::Error& e) {
        if (e.code().value() == ENOENT) return {};
        throw;
    }
}

}  // namespace

std::string proc_dir_name(const Gpu& gpu) {
    std::string name(util::base_name(gpu.proc_dir));
    return name.empty() ? gpu.pci_bus_id : name;
}

ProcFiles read_proc_files(const Node& node) {
    const std::filesystem::path dir = node.roots.proc / "driver/nvidia";
    ProcFiles files;
    files.version = util::read_file(dir / "version", detail::kMaxProcFile);
    files.params = read_optional(dir / "params");
    for (const auto& gpu : node.gpus) {
        const std::filesystem::path gpu_dir = gpu.proc_dir.empty()
                                                  ? dir / "gpus" / gpu.pci_bus_id
                                                  : std::filesystem::path(gpu.proc_dir);
        files.information[proc_dir_name(gpu)] = read_optional(gpu_dir / "information");
    }
    return files;
}

}  // namespace gpubind::node
