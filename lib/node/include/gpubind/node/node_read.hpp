// Reading the driver's files on the node (procfs, directories, links
// resolved inside a root): shared by discovery and `gpubind doctor`.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpubind::node {
struct Node;
}

namespace gpubind::node::detail {

inline constexpr std::size_t kMaxProcFile = 64u << 10;

// Joins a root and an absolute path meant to live under it.
std::filesystem::path under(const std::filesystem::path& root, const std::filesystem::path& path);
// "Key: value" lines (procfs information, params, capability files).
std::map<std::string, std::string, std::less<>> read_fields(const std::filesystem::path& path);
// What a GPU's information file (driver/nvidia/gpus/<bus id>/information)
// says of its device node: its "Device Minor" when that is a GPU's (a
// number below the modeset minor), and whether "GPU Excluded" is "Yes".
struct GpuNodeFields {
    std::optional<unsigned> minor;
    bool excluded = false;
};
GpuNodeFields gpu_node_fields(const std::map<std::string, std::string, std::less<>>& fields);
// The names in a directory, sorted; empty when it does not exist.
std::vector<std::string> list_dir(const std::filesystem::path& dir);
// The MIG capabilities' access files under a driver/nvidia/capabilities
// directory, in order: gpu<N>/mig/gi<G>/access and gi<G>/ci<C>/access, then
// mig/config and mig/monitor where they exist. Empty without MIG.
std::vector<std::filesystem::path> mig_access_files(const std::filesystem::path& caps_dir);
// Digits and dots with at least one dot ("550.54.15").
bool is_version(std::string_view s);
// The module's version from a driver/nvidia/version file ("NVRM version:" line).
std::string read_driver_version(const std::filesystem::path& path);
// The character-device majors by driver name, from a /proc/devices-style file.
std::map<std::string, unsigned, std::less<>> read_majors(const std::filesystem::path& path);
// Resolves every symlink of `path` inside `root` (absolute link targets are
// taken relative to the root, ".." stops at it). Returns the root-relative
// absolute path, or nullopt if something along the way does not exist.
std::optional<std::filesystem::path> resolve_in(const std::filesystem::path& root,
                                                const std::filesystem::path& path);
// Where the driver's programs are looked for, in order, inside the driver
// root: the usual directories, then the bin/ beside each directory of the
// node's 64-bit driver libraries (a driver installed in a prefix of its own,
// /usr/local/nvidia/{lib64,bin}). Discovery searches them once it has found
// the libraries; the description's fingerprint watches them.
std::vector<std::filesystem::path> program_dirs(const Node& node);

}  // namespace gpubind::node::detail
