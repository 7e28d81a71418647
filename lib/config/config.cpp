#include "gpubind/config/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "config_builtin.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"

namespace gpubind::config {

namespace {

using detail::kMaxConfigSize;

// The trusted config file at `path` (absolute); the defaults when it is
// missing and `missing_is_defaults`.
Config load_trusted(const std::filesystem::path& path, bool missing_is_defaults) {
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT && missing_is_defaults) return default_config();
        util::throw_errno("open config", path.string());
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) util::throw_errno("stat", path.string());
    if (!S_ISREG(st.st_mode))
        throw util::Error(util::ErrorKind::Invalid, EINVAL, "load config", path.string(),
                          "not a regular file; refusing");
    // An Unknown owner (a user namespace that does not map the host's root:
    // enroot's gpubind-nvc) passes: root's config shows so there, and its
    // path is no other user's choice (the installer's, beside the program or
    // /etc/gpubind; a registration's GPUBIND_CONFIG; the caller's own
    // --config). What it names is checked on its own: IPCs and family files
    // owned so are given only where root's description vouches for them.
    if (util::host_owner(st.st_uid) == util::HostOwner::Other && st.st_uid != ::geteuid())
        throw util::Error(EACCES, "load config", path.string(),
                          "owned by uid " + std::to_string(st.st_uid) + ", not root; refusing");
    if ((st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0))
        throw util::Error(EACCES, "load config", path.string(),
                          "writable by other users; refusing");
    return parse_config(util::read_sized(fd.get(), static_cast<std::size_t>(st.st_size),
                                         kMaxConfigSize, path.string()),
                        path.string());
}

}  // namespace

Config default_config() {
    // Plain initialisers made from config/config.toml at build time: no
    // parsing here, and built where asked (a start asks once).
    return detail::make_builtin_config();
}

Config parse_config(std::string_view toml, const std::string& what) {
    // The packaged file says the defaults: no parse at each container start.
    Config config = toml == detail::builtin_config_text()
                        ? default_config()
                        : detail::parse_config_over(default_config(), toml, what);
    config.source = what;
    return config;
}

Config load_config(const std::filesystem::path& path) {
    return parse_config(util::read_file(path, kMaxConfigSize), path.string());
}

Config load_effective_config(const std::filesystem::path& explicit_path) {
    if (!explicit_path.empty()) return load_config(explicit_path);
    if (const char* env = std::getenv(std::string(kConfigEnv).c_str()); env && *env)
        return load_config(env);
    std::error_code ec;
    if (std::filesystem::exists(kDefaultConfigPath, ec)) return load_config(kDefaultConfigPath);
    return default_config();
}

Config load_trusted_config() {
    const char* env = std::getenv(std::string(kConfigEnv).c_str());
    if (env && *env) {
        if (!std::filesystem::path(env).is_absolute())
            throw util::Error(util::ErrorKind::Invalid, EINVAL, "load config", env,
                              std::string(kConfigEnv) + " is not an absolute path; refusing");
        return load_trusted(env, false);
    }
    return load_trusted(kDefaultConfigPath, true);
}

Config load_trusted_config_beside(const std::filesystem::path& own_dir) {
    const char* env = std::getenv(std::string(kConfigEnv).c_str());
    const auto beside = own_dir / "config.toml";
    struct stat st {};
    if (!(env && *env) && ::lstat(beside.c_str(), &st) == 0) return load_trusted(beside, false);
    return load_trusted_config();
}

Config load_trusted_config(const std::filesystem::path& path) {
    return load_trusted(std::filesystem::absolute(path), false);
}

const Family* Config::family(std::string_view name) const {
    for (const auto& f : families)
        if (f.name == name) return &f;
    return nullptr;
}

}  // namespace gpubind::config
