// Installing gpubind into a host from a container (`gpubind setup
// --host-root DIR`, the entrypoint of the Kubernetes node installer in
// deploy/kubernetes): the host's "/" is mounted at DIR. Every path below is
// the host's view, reached under DIR by host_path().
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/setup/setup.hpp"

namespace gpubind::setup {

// Where the host gets gpubind's programs and config (--install-dir): a
// directory of gpubind's own, writable on hosts whose /usr is not.
inline constexpr std::string_view kInstallDir = "/usr/local/gpubind";
// The programs the host runs for its containers (all static but the NVML
// helper, which needs only libc), copied into the install dir. The runtime
// reads the config.toml beside it; the hooks it and the CDI spec register
// are told its path.
inline constexpr std::string_view kHostPrograms[] = {"gpubind-hook", "gpubind-runtime",
                                                     "gpubind-nvml"};
// In the install dir: what an install wrote and made, one "f PATH" (a file)
// or "d PATH" (a directory it created) a line, host paths; what --remove
// takes out again.
inline constexpr std::string_view kInstalledList = "installed";

struct HostInstall {
    std::filesystem::path host_root;                  // the host's "/" here
    std::filesystem::path install_dir{kInstallDir};   // the host's view
    std::vector<std::filesystem::path> program_dirs;  // where the programs are here, in order
    std::string config_text;  // the config to install (empty: the built-in defaults)
    std::string config_what;  // where it came from, for errors
    std::vector<Engine> engines;
    bool set_default = false;  // gpubind the engines' default runtime
    bool cdi = false;          // the engines' CDI support on, and the node's CDI specs written
    bool remove = false;
};

// `path` (absolute, the host's view) as this process reaches it under
// `root`: its longest existing directory prefix opened inside the root
// (openat2 RESOLVE_IN_ROOT: the host's /var/run -> /run resolves to
// ROOT/run, never to this process's /run), the rest appended. The last
// component is not resolved. The first name appended must be missing
// indeed: a symbolic link there whose target the host root does not have
// (/usr/local -> /opt/local) is an Error naming it, never followed later by
// path, out of the root.
std::filesystem::path host_path(const std::filesystem::path& root,
                                const std::filesystem::path& path);

// Whether this process runs in a container (podman's /run/.containerenv,
// docker's /.dockerenv, $container, a Kubernetes pod's service variable).
bool in_container();
// Throws Error naming `root` unless it is an absolute path to a directory
// (not a symlink), other than this process's own "/" in a container.
void check_host_root(const std::filesystem::path& root);

// The config text with [cdi] hook set to `hook`, edited in place (every
// other byte kept); a config whose cdi table is inline or dotted keys is an
// Error naming `what`.
std::string config_with_hook(std::string_view text, const std::string& hook,
                             const std::string& what);

// A CDI spec written from the node read under `host_root`, as the host sees
// it: the root taken off every hostPath and hook path, a device node's
// hostPath dropped where it is then its path, cdiVersion the lowest the
// result needs. Byte for byte what the host's own gpubind writes.
nlohmann::json spec_for_host(nlohmann::json spec, const std::filesystem::path& host_root);

// Installs into the host: the programs and the config (its [cdi] hook the
// installed hook) into install_dir, with cdi the node's CDI specs (the node
// read under the host root, its own config's roots), the installed list,
// and only then each engine's registration (setup.hpp, the installed runtime
// and hook). Every directory it writes in, and each above it, is checked
// first (root's, writable by no one else; else Error, ErrorKind::Refused,
// nothing written). Files written only when they change; a file that was
// there and is not gpubind's is kept as PATH.gpubind-backup. With remove:
// the engines' registrations taken out, then each file the installed list
// names that is shown to be an install's (in install_dir or a CDI spec
// directory, by device and inode; a regular file of root's, removed with
// unlinkat in that directory, its backup renamed back), then the
// directories it made, when empty; a link or another's file is left and
// named. A list naming a file or directory no install writes is an Error.
// Returns the report (a line per file or directory, then what each engine
// needs to read its new config); with dry_run nothing is written.
std::vector<std::string> install_host(const HostInstall& install, bool dry_run);

}  // namespace gpubind::setup
