// gpubind ldcache: the node's ld.so.cache, printed exactly as `ldconfig -p`
// prints it.
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::cli {

namespace {

struct LdcacheOptions {
    std::filesystem::path root = "/";
    std::filesystem::path cache;  // default: root/etc/ld.so.cache
};

int run_ldcache(const LdcacheOptions& o) {
    const std::filesystem::path path = o.cache.empty() ? o.root / "etc/ld.so.cache" : o.cache;
    const std::string text = ldcache::format_like_ldconfig(ldcache::load(path), path.string());
    // Written as bytes: names and the generator text may hold anything.
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
        util::throw_errno("write", "standard output");
    return util::kExitOk;
}

}  // namespace

void register_ldcache(CLI::App& app, Action& action) {
    auto opts = std::make_shared<LdcacheOptions>();
    auto* cmd = app.add_subcommand("ldcache", "Print an ld.so.cache the way `ldconfig -p` does");
    cmd->add_option("--root", opts->root, "Driver root whose etc/ld.so.cache to read (default /)");
    cmd->add_option("--cache", opts->cache, "Cache file to read instead, as given");
    cmd->callback([&action, opts] { action = [opts] { return run_ldcache(*opts); }; });
}

}  // namespace gpubind::cli
