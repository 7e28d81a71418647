// A Config written as C++ initialisers: the generated default_config.cpp.
//
// Every struct is taken apart with a structured binding, which names all of
// its members: a member added to Config and not written here stops the build
// (and tests/unit/config_test.cpp compares every member with operator==).
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "config_builtin.hpp"

namespace gpubind::config::detail {

namespace {

// A C++ string literal: printable ASCII as is, every other byte in octal.
std::string literal(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        const auto b = static_cast<unsigned char>(c);
        if (b >= 0x20 && b < 0x7f && c != '"' && c != '\\')
            out += c;
        else
            out += fmt::format("\\{:03o}", b);
    }
    return out + "\"";
}

std::string path_literal(const std::filesystem::path& p) {
    return literal(p.native());
}

std::string caps(Capabilities c) {
    return fmt::format("0x{:x}u /* {} */", c, c ? capability_names(c) : "none");
}

template <typename T, typename F>
std::string list(const std::vector<T>& items, F&& item, std::string_view indent) {
    if (items.empty()) return "{}";
    std::string out = "{\n";
    for (const auto& x : items) out += fmt::format("{}    {},\n", indent, item(x));
    return out + std::string(indent) + "}";
}

std::string entries(const std::vector<CatalogEntry>& list_of, std::string_view indent) {
    return list(
        list_of,
        [](const CatalogEntry& e) {
            const auto& [name, entry_caps] = e;
            return fmt::format("{{{}, {}}}", literal(name), caps(entry_caps));
        },
        indent);
}

std::string paths(const std::vector<std::filesystem::path>& ps, std::string_view indent) {
    return list(
        ps, [](const std::filesystem::path& p) { return path_literal(p); }, indent);
}

std::string strings(const std::vector<std::string>& ss, std::string_view indent) {
    return list(
        ss, [](const std::string& s) { return literal(s); }, indent);
}

std::string boolean(bool b) {
    return b ? "true" : "false";
}

std::string shares_policy(SharesPolicy v) {
    switch (v) {
        case SharesPolicy::Strict:
            return "SharesPolicy::Strict";
        case SharesPolicy::Soft:
            return "SharesPolicy::Soft";
    }
    return fmt::format("static_cast<SharesPolicy>({})", static_cast<int>(v));
}

std::string on_refused(OnRefused v) {
    switch (v) {
        case OnRefused::Fail:
            return "OnRefused::Fail";
        case OnRefused::Warn:
            return "OnRefused::Warn";
    }
    return fmt::format("static_cast<OnRefused>({})", static_cast<int>(v));
}

std::string ldcache_method(LdcacheMethod v) {
    switch (v) {
        case LdcacheMethod::Gpubind:
            return "LdcacheMethod::Gpubind";
        case LdcacheMethod::Ldconfig:
            return "LdcacheMethod::Ldconfig";
    }
    return fmt::format("static_cast<LdcacheMethod>({})", static_cast<int>(v));
}

std::string family_source(FamilySource v) {
    switch (v) {
        case FamilySource::Glob:
            return "FamilySource::Glob";
        case FamilySource::Infiniband:
            return "FamilySource::Infiniband";
        case FamilySource::Drm:
            return "FamilySource::Drm";
    }
    return fmt::format("static_cast<FamilySource>({})", static_cast<int>(v));
}

std::string family(const Family& f) {
    const auto& [name, source, nodes, major, variables, select, extras, family_caps, files,
                 cdi_kind] = f;
    constexpr std::string_view in4 = "                ";
    return fmt::format(
        "Family{{\n            .name = {},\n            .source = {},\n"
        "            .nodes = {},\n            .major = {},\n            .variables = {},\n"
        "            .select = {},\n            .extras = {},\n            .caps = {},\n"
        "            .files = {},\n            .cdi_kind = {},\n        }}",
        literal(name), family_source(source), strings(nodes, in4), literal(major),
        strings(variables, in4), literal(select), literal(extras), caps(family_caps),
        strings(files, in4), literal(cdi_kind));
}

}  // namespace

std::string builtin_config_source(const Config& config, std::string_view text) {
    const auto& [roots, ldcache, ldconfig, state_dir, bpf_dir, catalog, policy, log, runtimes, cdi,
                 families, mps, source] = config;
    const auto& [driver, dev, proc, sys] = roots;
    const auto& [libraries, binaries, ipcs, firmware] = catalog;
    const auto& [envvar, cdi_annotations, cdi_vendors, volumes, disable_require, supported, cgroups,
                 refused, shares, cuda_compat, ldcache_how, ipc_owners] = policy;
    const auto& [log_file, log_level] = log;
    const auto& [cdi_dir, cdi_kind, cdi_caps, cdi_hook, spec_dirs] = cdi;
    constexpr std::string_view in2 = "        ", in3 = "            ";
    const std::size_t text_size = text.size();

    std::string out =
        "// Generated by gpubind_config_gen from config/config.toml: do not edit.\n"
        "#include \"config_builtin.hpp\"\n\n"
        "namespace gpubind::config::detail {\n\n"
        "Config make_builtin_config() {\n"
        "    return Config{\n";
    out +=
        fmt::format("        .roots = {{.driver = {}, .dev = {}, .proc = {}, .sys = {}}},\n",
                    path_literal(driver), path_literal(dev), path_literal(proc), path_literal(sys));
    out += fmt::format(
        "        .ldcache = {},\n        .ldconfig = {},\n        .state_dir = {},\n"
        "        .bpf_dir = {},\n",
        path_literal(ldcache), path_literal(ldconfig), path_literal(state_dir),
        path_literal(bpf_dir));
    out += fmt::format(
        "        .catalog = {{\n"
        "            .libraries = {},\n            .binaries = {},\n"
        "            .ipcs = {},\n            .firmware = {},\n        }},\n",
        entries(libraries, in3), entries(binaries, in3), entries(ipcs, in3),
        entries(firmware, in3));
    out += fmt::format(
        "        .policy = {{\n"
        "            .accept_envvar_unprivileged = {},\n"
        "            .accept_cdi_annotations_unprivileged = {},\n"
        "            .cdi_vendors = {},\n"
        "            .accept_volume_mounts = {},\n"
        "            .disable_require = {},\n"
        "            .supported = {},\n"
        "            .cgroups = {},\n"
        "            .on_refused = {},\n"
        "            .shares = {},\n"
        "            .cuda_compat = {},\n"
        "            .ldcache = {},\n"
        "            .ipc_owners = {},\n"
        "        }},\n",
        boolean(envvar), boolean(cdi_annotations), strings(cdi_vendors, in3), boolean(volumes),
        boolean(disable_require), caps(supported), boolean(cgroups), on_refused(refused),
        shares_policy(shares), boolean(cuda_compat), ldcache_method(ldcache_how),
        list(
            ipc_owners, [](unsigned uid) { return fmt::format("{}u", uid); }, in3));
    out += fmt::format("        .log = {{.file = {}, .level = {}}},\n", literal(log_file),
                       literal(log_level));
    out += fmt::format("        .runtimes = {},\n", strings(runtimes, in2));
    out += fmt::format(
        "        .cdi = {{\n"
        "            .dir = {},\n            .kind = {},\n            .caps = {},\n"
        "            .hook = {},\n            .spec_dirs = {},\n        }},\n",
        path_literal(cdi_dir), literal(cdi_kind), caps(cdi_caps), path_literal(cdi_hook),
        paths(spec_dirs, in3));
    out += fmt::format("        .families = {},\n", list(families, family, in2));
    out += fmt::format("        .mps = {{.root = {}, .memory = {}, .compute = {}}},\n",
                       path_literal(mps.root), literal(mps.memory), literal(mps.compute));
    out += fmt::format("        .source = {},\n", path_literal(source));
    out += "    };\n}\n\nstd::string_view builtin_config_text() {\n    return std::string_view{\n";
    while (!text.empty()) {  // one literal per line of the file
        const std::size_t n = std::min(text.find('\n'), text.size() - 1) + 1;
        out += fmt::format("        {}\n", literal(text.substr(0, n)));
        text.remove_prefix(n);
    }
    out += fmt::format("        \"\", {}}};\n}}\n\n}}  // namespace gpubind::config::detail\n",
                       text_size);
    return out;
}

}  // namespace gpubind::config::detail
