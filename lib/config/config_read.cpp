// Reading TOML into a Config: shared by the library and gpubind_config_gen,
// which turns config/config.toml into the built-in defaults at build time.
#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config_builtin.hpp"
#include "gpubind/config/device_plugin.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/toml.hpp"

namespace gpubind::config::detail {

namespace {

// Reads one TOML document into a Config, key by key. Every key must be known.
class Reader {
  public:
    Reader(Config& config, std::string what, DevicePluginConfig* plugin)
        : config_(config), what_(std::move(what)), plugin_(plugin ? plugin : &scratch_) {}

    void read(const toml::table& root) {
        for (const auto& [key, node] : root) {
            std::string k(key.str());
            if (k == "node")
                table(node, k, [&](auto& t) { read_node(t, k); });
            else if (k == "policy")
                table(node, k, [&](auto& t) { read_policy(t, k); });
            else if (k == "log")
                table(node, k, [&](auto& t) { read_log(t, k); });
            else if (k == "runtime")
                table(node, k, [&](auto& t) { read_runtime(t, k); });
            else if (k == "catalog")
                table(node, k, [&](auto& t) { read_catalog(t, k); });
            else if (k == "cdi")
                table(node, k, [&](auto& t) { read_cdi(t, k); });
            else if (k == "family")
                table(node, k, [&](auto& t) { read_families(t, k); });
            else if (k == "device-plugin")
                table(node, k, [&](auto& t) { read_device_plugin(t, k); });
            else if (k == "mps")
                table(node, k, [&](auto& t) { read_mps(t, k); });
            else if (k == "nvidia-container-cli")
                table(node, k, [&](auto& t) { read_nvidia_cli(t, k); });
            else if (k == "nvidia-container-runtime")
                table(node, k, [&](auto& t) { read_nvidia_runtime(t, k); });
            else if (k == "nvidia-container-runtime-hook" || k == "nvidia-ctk")
                table(node, k, [](auto&) {});  // their keys have no meaning here
            else
                read_nvidia_top(node, k);
        }
    }

  private:
    [[noreturn]] void fail(const std::string& key, const std::string& why) const {
        util::throw_invalid("load config", what_, key + ": " + why);
    }

    template <typename F>
    void table(const toml::node& node, const std::string& key, F&& body) {
        const auto* t = node.as_table();
        if (!t) fail(key, "expected a table");
        body(*t);
    }

    bool boolean(const toml::node& node, const std::string& key) const {
        if (auto v = node.value<bool>(); v && node.is_boolean()) return *v;
        fail(key, "expected true or false");
    }

    std::string string(const toml::node& node, const std::string& key) const {
        if (const auto* s = node.as_string()) return s->get();
        fail(key, "expected a string");
    }

    std::vector<std::string> strings(const toml::node& node, const std::string& key) const {
        const auto* arr = node.as_array();
        if (!arr) fail(key, "expected an array of strings");
        std::vector<std::string> out;
        for (const auto& item : *arr) {
            const auto* s = item.as_string();
            if (!s) fail(key, "expected an array of strings");
            out.push_back(s->get());
        }
        return out;
    }

    std::vector<std::string> vendors(const toml::node& node, const std::string& key) const {
        auto list = strings(node, key);
        for (const auto& v : list)
            if (auto why = util::vendor_error(v))
                fail(key, "\"" + v + "\" is not a CDI vendor: " + *why);
        return list;
    }

    std::vector<unsigned> uids(const toml::node& node, const std::string& key) const {
        const auto* arr = node.as_array();
        if (!arr) fail(key, "expected an array of numeric user ids");
        std::vector<unsigned> out;
        for (const auto& item : *arr) {
            const auto* n = item.as_integer();
            if (!n || n->get() < 0 || n->get() > 0xfffffffeLL)
                fail(key, "expected an array of numeric user ids");
            out.push_back(static_cast<unsigned>(n->get()));
        }
        return out;
    }

    std::filesystem::path absolute(const toml::node& node, const std::string& key) const {
        std::string s = string(node, key);
        if (!s.empty() && s.front() == '@') s.erase(0, 1);  // nvidia's "host path" marker
        if (s.empty() || s.front() != '/') fail(key, "expected an absolute path");
        return s;
    }

    Capabilities capabilities(const toml::node& node, const std::string& key) const {
        std::string unknown;
        auto caps = parse_capabilities(string(node, key), &unknown);
        if (!caps) fail(key, "unknown capability \"" + unknown + "\"");
        return *caps;
    }

    void read_node(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "driver-root")
                config_.roots.driver = absolute(node, full);
            else if (k == "dev-root")
                config_.roots.dev = absolute(node, full);
            else if (k == "proc-root")
                config_.roots.proc = absolute(node, full);
            else if (k == "sys-root")
                config_.roots.sys = absolute(node, full);
            else if (k == "ldcache")
                config_.ldcache =
                    string(node, full).empty() ? std::filesystem::path() : absolute(node, full);
            else if (k == "ldconfig")
                config_.ldconfig = absolute(node, full);
            else if (k == "state-dir")
                config_.state_dir = absolute(node, full);
            else if (k == "bpf-dir")
                config_.bpf_dir =
                    string(node, full).empty() ? std::filesystem::path() : absolute(node, full);
            else
                fail(full, "unknown key");
        }
    }

    void read_policy(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "accept-envvar-unprivileged")
                config_.policy.accept_envvar_unprivileged = boolean(node, full);
            else if (k == "accept-cdi-annotations-unprivileged")
                config_.policy.accept_cdi_annotations_unprivileged = boolean(node, full);
            else if (k == "cdi-vendors")
                config_.policy.cdi_vendors = vendors(node, full);
            else if (k == "accept-volume-mounts")
                config_.policy.accept_volume_mounts = boolean(node, full);
            else if (k == "disable-require")
                config_.policy.disable_require = boolean(node, full);
            else if (k == "supported-capabilities")
                config_.policy.supported = capabilities(node, full);
            else if (k == "cgroups")
                config_.policy.cgroups = boolean(node, full);
            else if (k == "on-refused")
                config_.policy.on_refused = on_refused(node, full);
            else if (k == "shares")
                config_.policy.shares = shares(node, full);
            else if (k == "cuda-compat")
                config_.policy.cuda_compat = boolean(node, full);
            else if (k == "ldcache")
                config_.policy.ldcache = ldcache_method(node, full);
            else if (k == "ipc-owners")
                config_.policy.ipc_owners = uids(node, full);
            else
                fail(full, "unknown key");
        }
    }

    void read_log(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "file") {
                config_.log.file = string(node, full);
                if (!config_.log.file.empty()) absolute(node, full);
            } else if (k == "level") {
                config_.log.level = log_level(node, full);
            } else {
                fail(full, "unknown key");
            }
        }
    }

    // [mps]: root (absolute), memory ("", a size, "replicas"), compute (a
    // percent 1 to 100 or "replicas"); the values are checked by `gpubind mps`.
    void read_mps(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "root") {
                config_.mps.root = absolute(node, full);
            } else if (k == "memory") {
                config_.mps.memory = string(node, full);
            } else if (k == "compute") {
                if (const auto* n = node.as_integer()) {
                    if (n->get() < 1 || n->get() > 100) fail(full, "expected a percent, 1 to 100");
                    config_.mps.compute = std::to_string(n->get());
                } else {
                    config_.mps.compute = string(node, full);
                    if (config_.mps.compute != "replicas")
                        fail(full, "expected a percent (1 to 100) or \"replicas\"");
                }
            } else {
                fail(full, "unknown key");
            }
        }
    }

    OnRefused on_refused(const toml::node& node, const std::string& key) const {
        std::string value = string(node, key);
        if (value == "fail") return OnRefused::Fail;
        if (value == "warn") return OnRefused::Warn;
        fail(key, "expected \"fail\" or \"warn\", not \"" + value + "\"");
    }

    SharesPolicy shares(const toml::node& node, const std::string& key) const {
        std::string value = string(node, key);
        if (value == "strict") return SharesPolicy::Strict;
        if (value == "soft") return SharesPolicy::Soft;
        fail(key, "expected \"strict\" or \"soft\", not \"" + value + "\"");
    }

    LdcacheMethod ldcache_method(const toml::node& node, const std::string& key) const {
        std::string value = string(node, key);
        if (value == "gpubind") return LdcacheMethod::Gpubind;
        if (value == "ldconfig") return LdcacheMethod::Ldconfig;
        fail(key, "expected \"gpubind\" or \"ldconfig\", not \"" + value + "\"");
    }

    std::string log_level(const toml::node& node, const std::string& key) const {
        std::string level = string(node, key);
        for (std::string_view ok : {"trace", "debug", "info", "warn", "warning", "error", "off"})
            if (level == ok) return level == "warning" ? "warn" : level;
        fail(key, "unknown level \"" + level + "\" (trace, debug, info, warn, error, off)");
    }

    void read_runtime(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "runtimes")
                config_.runtimes = runtimes(node, full);
            else
                fail(full, "unknown key");
        }
    }

    void read_cdi(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "dir") {
                config_.cdi.dir = absolute(node, full);
            } else if (k == "kind") {
                config_.cdi.kind = string(node, full);
                if (auto why = util::kind_error(config_.cdi.kind))
                    fail(full, "\"" + config_.cdi.kind + "\" is not a CDI kind: " + *why);
            } else if (k == "capabilities") {
                config_.cdi.caps = capabilities(node, full);
            } else if (k == "hook") {
                config_.cdi.hook = absolute(node, full);
            } else if (k == "spec-dirs") {
                config_.cdi.spec_dirs.clear();
                for (const auto& d : strings(node, full)) {
                    if (d.empty() || d.front() != '/') fail(full, "expected absolute paths");
                    config_.cdi.spec_dirs.emplace_back(d);
                }
            } else {
                fail(full, "unknown key");
            }
        }
    }

    // [family.<name>]: each table changes the family of that name (a built-in
    // one) or adds one; each is checked whole once read.
    void read_families(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string name(key.str()), full = prefix + "." + name;
            if (auto why = family_name_error(name)) fail(full, *why);
            auto it = std::find_if(config_.families.begin(), config_.families.end(),
                                   [&](const Family& f) { return f.name == name; });
            if (it == config_.families.end()) {
                Family fresh;
                fresh.name = name;
                it = config_.families.insert(
                    std::upper_bound(
                        config_.families.begin(), config_.families.end(), name,
                        [](const std::string& n, const Family& f) { return n < f.name; }),
                    std::move(fresh));
            }
            table(node, full, [&](auto& body) { read_family(body, full, *it); });
            check_family(*it, full);
        }
    }

    static std::optional<std::string> family_name_error(std::string_view name) {
        const bool ok = !name.empty() && name.size() <= 32 && name.front() >= 'a' &&
                        name.front() <= 'z' &&
                        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") ==
                            std::string_view::npos;
        if (!ok) return "a family's name is 1 to 32 of [a-z0-9-], starting with a letter";
        if (name == "imex" || name == "cdi" || name == "all") {
            std::string why = "\"";
            why.append(name).append("\" is reserved (device mounts use it)");
            return why;
        }
        return std::nullopt;
    }

    std::string variable(const toml::node& node, const std::string& key) const {
        auto v = string(node, key);
        if (!valid_variable(v)) fail(key, "\"" + v + "\" is not an environment variable name");
        return v;
    }

    static bool valid_variable(std::string_view v) {
        return !v.empty() && v.size() <= 64 && !(v.front() >= '0' && v.front() <= '9') &&
               v.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") ==
                   std::string_view::npos;
    }

    void read_family(const toml::table& t, const std::string& prefix, Family& f) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "source") {
                const auto v = string(node, full);
                if (v == "glob")
                    f.source = FamilySource::Glob;
                else if (v == "infiniband")
                    f.source = FamilySource::Infiniband;
                else if (v == "drm")
                    f.source = FamilySource::Drm;
                else
                    fail(full, "\"" + v + "\": expected glob, infiniband or drm");
            } else if (k == "nodes") {
                f.nodes = strings(node, full);
                for (const auto& n : f.nodes) {
                    const auto normal = std::filesystem::path(n).lexically_normal().string();
                    if (!n.starts_with("/dev/") || normal != n || n.find("/../") != n.npos ||
                        n.find_first_of("[]\\\n") != std::string::npos || n.size() > 256)
                        fail(full, "\"" + n +
                                       "\": expected a normal absolute path under /dev (globs: * "
                                       "and ? in names)");
                }
            } else if (k == "major") {
                f.major = string(node, full);
                if (f.major.empty() || f.major.size() > 64 ||
                    f.major.find_first_of(" \t\n") != std::string::npos)
                    fail(full, "expected a driver's name as /proc/devices lists it, or \"misc\"");
            } else if (k == "variables") {
                f.variables.clear();
                for (const auto& v : strings(node, full)) {
                    if (!valid_variable(v))
                        fail(full, "\"" + v + "\" is not an environment variable name");
                    f.variables.push_back(v);
                }
            } else if (k == "select") {
                f.select = string(node, full).empty() ? std::string() : variable(node, full);
            } else if (k == "extras") {
                f.extras = string(node, full).empty() ? std::string() : variable(node, full);
            } else if (k == "capabilities") {
                f.caps = string(node, full).empty() ? 0 : capabilities(node, full);
            } else if (k == "files") {
                f.files = strings(node, full);
                for (const auto& file : f.files)
                    if (file.empty() || file.front() != '/' ||
                        std::filesystem::path(file).lexically_normal().string() != file)
                        fail(full, "\"" + file + "\": expected a normal absolute path");
            } else if (k == "cdi-kind") {
                f.cdi_kind = string(node, full);
                if (!f.cdi_kind.empty())
                    if (auto why = util::kind_error(f.cdi_kind))
                        fail(full, "\"" + f.cdi_kind + "\" is not a CDI kind: " + *why);
            } else {
                fail(full, "unknown key");
            }
        }
    }

    // A family as a whole: what its source needs.
    void check_family(const Family& f, const std::string& key) const {
        if (f.source == FamilySource::Glob && f.nodes.empty())
            fail(key, "a glob family needs nodes (paths or globs under /dev)");
        if (!f.nodes.empty() && f.major.empty())
            fail(key,
                 "nodes need a major: the driver's name in /proc/devices (the node decides "
                 "the numbers, never the image)");
        if (f.variables.empty() && f.select.empty() && f.caps == 0)
            fail(key, "nothing asks for this family: give variables, select or capabilities");
        if (f.source == FamilySource::Drm && !f.nodes.empty())
            fail(key, "a drm family's nodes come from sysfs; it takes no nodes");
    }

    std::vector<std::string> runtimes(const toml::node& node, const std::string& key) const {
        auto list = strings(node, key);
        if (list.empty()) fail(key, "expected at least one runtime");
        for (const auto& r : list)
            if (r.empty()) fail(key, "empty runtime name");
        return list;
    }

    void read_catalog(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            auto cap = parse_capabilities(k);
            if (!cap || *cap == 0 || (*cap & (*cap - 1)) != 0 || *cap == kCapCompat32)
                fail(full, "not a capability (utility, compute, video, graphics, display, ngx)");
            table(node, full,
                  [&](const toml::table& lists) { read_catalog_cap(lists, full, *cap); });
        }
    }

    // Replaces the lists of one capability.
    void read_catalog_cap(const toml::table& t, const std::string& prefix, Capabilities cap) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            std::vector<CatalogEntry>* list = nullptr;
            if (k == "libraries")
                list = &config_.catalog.libraries;
            else if (k == "binaries")
                list = &config_.catalog.binaries;
            else if (k == "ipcs")
                list = &config_.catalog.ipcs;
            else if (k == "firmware")
                list = &config_.catalog.firmware;
            else
                fail(full, "unknown key");
            auto names = strings(node, full);
            for (const auto& n : names) {
                if (n.empty()) fail(full, "empty name");
                if (list != &config_.catalog.libraries && list != &config_.catalog.binaries &&
                    n.front() != '/')
                    fail(full, "\"" + n + "\" is not an absolute path");
                if ((list == &config_.catalog.libraries || list == &config_.catalog.binaries) &&
                    n.find('/') != std::string::npos)
                    fail(full, "\"" + n + "\" must be a file name, not a path");
            }
            set_catalog(*list, cap, names);
        }
    }

    static void set_catalog(std::vector<CatalogEntry>& list, Capabilities cap,
                            const std::vector<std::string>& names) {
        // Drop this capability from every entry, then add it to the named ones.
        for (auto& e : list) e.caps &= ~cap;
        std::erase_if(list, [](const CatalogEntry& e) { return e.caps == 0; });
        for (const auto& n : names) {
            auto it = std::find_if(list.begin(), list.end(),
                                   [&](const CatalogEntry& e) { return e.name == n; });
            if (it != list.end())
                it->caps |= cap;
            else
                list.push_back({n, cap});
        }
    }

    // Top-level keys of nvidia-container-runtime's config.toml.
    void read_nvidia_top(const toml::node& node, const std::string& k) {
        if (k == "disable-require")
            config_.policy.disable_require = boolean(node, k);
        else if (k == "supported-driver-capabilities")
            config_.policy.supported = capabilities(node, k);
        else if (k == "accept-nvidia-visible-devices-envvar-when-unprivileged")
            config_.policy.accept_envvar_unprivileged = boolean(node, k);
        else if (k == "accept-nvidia-visible-devices-as-volume-mounts")
            config_.policy.accept_volume_mounts = boolean(node, k);
        else if (k == "swarm-resource")
            string(node, k);  // accepted, no meaning here
        else
            fail(k, "unknown key");
    }

    void read_nvidia_cli(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "root") {
                config_.roots.driver = absolute(node, full);
            } else if (k == "ldcache") {
                config_.ldcache = absolute(node, full);
            } else if (k == "ldconfig") {
                config_.ldconfig = absolute(node, full);
            } else if (k == "no-cgroups") {
                config_.policy.cgroups = !boolean(node, full);
            } else if (k == "debug") {
                config_.log.file = absolute(node, full).string();
            } else if (k == "path" || k == "environment" || k == "load-kmods" || k == "user" ||
                       k == "no-pivot" || k == "no-fabricmanager" || k == "no-persistenced") {
                util::logger().debug("config {}: {} is accepted and has no effect", what_, full);
            } else {
                fail(full, "unknown key");
            }
        }
    }

    void read_nvidia_runtime(const toml::table& t, const std::string& prefix) {
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "runtimes")
                config_.runtimes = runtimes(node, full);
            else if (k == "log-level")
                config_.log.level = log_level(node, full);
            else if (k == "debug")
                config_.log.file = absolute(node, full).string();
            else if (k == "mode" || k == "modes")
                util::logger().debug("config {}: {} is accepted and has no effect", what_, full);
            else
                fail(full, "unknown key");
        }
    }

    // [device-plugin]: gpubind-device-plugin's settings (device_plugin.hpp);
    // checked for every reader, kept by the plugin's.
    void read_device_plugin(const toml::table& t, const std::string& prefix) {
        DevicePluginConfig& p = *plugin_;
        for (const auto& [key, node] : t) {
            std::string k(key.str()), full = prefix + "." + k;
            if (k == "resource-name") {
                p.resource_name = string(node, full);
                if (auto why = util::kind_error(p.resource_name))
                    fail(full, "\"" + p.resource_name + "\" is not a resource name: " + *why);
            } else if (k == "device-list-strategy") {
                p.device_list.clear();
                for (const auto& v : strings(node, full))
                    p.device_list.push_back(pick<DeviceListStrategy>(
                        v, full,
                        {DeviceListStrategy::CdiCri, DeviceListStrategy::CdiAnnotations,
                         DeviceListStrategy::Envvar, DeviceListStrategy::VolumeMounts}));
                if (p.device_list.empty()) fail(full, "expected at least one strategy");
                for (std::size_t i = 0; i < p.device_list.size(); ++i)
                    if (std::count(p.device_list.begin(), p.device_list.end(), p.device_list[i]) >
                        1)
                        fail(full, "\"" + std::string(strategy_name(p.device_list[i])) +
                                       "\" is given twice");
            } else if (k == "id-strategy") {
                p.id_strategy = pick<IdStrategy>(string(node, full), full,
                                                 {IdStrategy::Uuid, IdStrategy::Index});
            } else if (k == "mig-strategy") {
                p.mig_strategy =
                    pick<MigStrategy>(string(node, full), full,
                                      {MigStrategy::None, MigStrategy::Single, MigStrategy::Mixed});
            } else if (k == "rdma") {
                p.rdma = pick<RdmaStrategy>(string(node, full), full,
                                            {RdmaStrategy::None, RdmaStrategy::Affine});
            } else if (k == "plugin-dir") {
                p.plugin_dir = absolute(node, full);
            } else if (k == "socket") {
                p.socket_name = string(node, full);
                if (p.socket_name.empty() || p.socket_name.find('/') != std::string::npos ||
                    p.socket_name == "." || p.socket_name == ".." || p.socket_name.size() > 64)
                    fail(full, "expected a file name (no '/', at most 64 characters)");
            } else if (k == "health-interval-ms") {
                const auto* n = node.as_integer();
                if (!n || n->get() < 100 || n->get() > 3600000)
                    fail(full, "expected milliseconds, 100 to 3600000");
                p.health_interval_ms = static_cast<unsigned>(n->get());
            } else if (k == "ignored-xids") {
                const auto* a = node.as_array();
                if (!a) fail(full, "expected an array of Xids (integers 1 to 65535)");
                p.ignored_xids.clear();
                for (const auto& v : *a) {
                    const auto* n = v.as_integer();
                    if (!n || n->get() < 1 || n->get() > 65535)
                        fail(full, "expected an array of Xids (integers 1 to 65535)");
                    p.ignored_xids.push_back(static_cast<unsigned>(n->get()));
                }
            } else if (k == "sharing") {
                read_sharing(node, full, p);
            } else if (k == "memory-resource-name") {
                p.memory_resource_name = string(node, full);
                if (auto why = util::kind_error(p.memory_resource_name))
                    fail(full,
                         "\"" + p.memory_resource_name + "\" is not a resource name: " + *why);
            } else {
                fail(full, "unknown key");
            }
        }
        if (p.sharing != SharingMode::None && p.mig_strategy != MigStrategy::None)
            fail(prefix + ".sharing",
                 "GPU shares need mig-strategy \"none\" (a share of a MIG device is not enforced)");
    }

    // sharing = "none" | "memory" | { replicas = N }.
    void read_sharing(const toml::node& node, const std::string& full, DevicePluginConfig& p) {
        const char* expected = "expected \"none\", \"memory\" or { replicas = N } (N 2 to 100)";
        if (const auto* t = node.as_table()) {
            const auto* n = (*t)["replicas"].as_integer();
            if (t->size() != 1 || !n || n->get() < 2 || n->get() > 100) fail(full, expected);
            p.sharing = SharingMode::Replicas;
            p.replicas = static_cast<unsigned>(n->get());
            return;
        }
        const auto* v = node.as_string();
        if (!v || (v->get() != "none" && v->get() != "memory")) fail(full, expected);
        p.sharing = v->get() == "none" ? SharingMode::None : SharingMode::Memory;
        p.replicas = 0;
    }

    // The value of `choices` whose strategy_name is `value`.
    template <typename E>
    E pick(const std::string& value, const std::string& key,
           std::initializer_list<E> choices) const {
        std::string names;
        for (E e : choices) {
            if (strategy_name(e) == value) return e;
            names += (names.empty() ? "" : ", ") + std::string(strategy_name(e));
        }
        fail(key, "unknown value \"" + value + "\" (" + names + ")");
    }

    Config& config_;
    std::string what_;
    DevicePluginConfig scratch_;
    DevicePluginConfig* plugin_;
};

}  // namespace

Config parse_config_over(Config config, std::string_view text, const std::string& what,
                         DevicePluginConfig* plugin) {
    if (auto unsafe = util::detail::toml_unsafe_text(text))
        util::throw_invalid("load config", what, *unsafe);
    toml::table root;
    try {
        root = toml::parse(text, what);
    } catch (const toml::parse_error& e) {
        const auto& where = e.source().begin;
        util::throw_invalid(
            "load config", what,
            "line " + std::to_string(where.line) + ": " + std::string(e.description()));
    }
    Reader(config, what, plugin).read(root);
    return config;
}

}  // namespace gpubind::config::detail

namespace gpubind::config {

std::string_view strategy_name(DeviceListStrategy s) {
    switch (s) {
        case DeviceListStrategy::CdiCri:
            return "cdi-cri";
        case DeviceListStrategy::CdiAnnotations:
            return "cdi-annotations";
        case DeviceListStrategy::Envvar:
            return "envvar";
        case DeviceListStrategy::VolumeMounts:
            return "volume-mounts";
    }
    return "?";
}

std::string_view strategy_name(IdStrategy s) {
    return s == IdStrategy::Uuid ? "uuid" : "index";
}

std::string_view strategy_name(SharingMode s) {
    switch (s) {
        case SharingMode::None:
            return "none";
        case SharingMode::Replicas:
            return "replicas";
        case SharingMode::Memory:
            return "memory";
    }
    return "?";
}

std::string_view strategy_name(MigStrategy s) {
    switch (s) {
        case MigStrategy::None:
            return "none";
        case MigStrategy::Single:
            return "single";
        case MigStrategy::Mixed:
            return "mixed";
    }
    return "?";
}

std::string_view strategy_name(RdmaStrategy s) {
    return s == RdmaStrategy::Affine ? "affine" : "none";
}

}  // namespace gpubind::config
