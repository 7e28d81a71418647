// `gpubind doctor`, gpubind itself and the container engines: the config,
// each engine's registration of gpubind (the files `gpubind setup` writes,
// read under a prefix), the binaries it names, and the systemd hazard of the
// bare hook.
#include <elf.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/doctor/doctor.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/toml.hpp"

namespace gpubind::doctor {

namespace fs = std::filesystem;
using node::detail::under;

namespace {

constexpr std::size_t kMaxFile = 4u << 20;
constexpr std::string_view kCri = "io.containerd.grpc.v1.cri";
// Where podman and CRI-O read OCI hooks.
constexpr const char* kHooksDirs[] = {"/usr/share/containers/oci/hooks.d",
                                      "/etc/containers/oci/hooks.d"};

// Whether an ELF file is statically linked (no PT_INTERP); nullopt when it
// is not a 64-bit ELF file we can read.
std::optional<bool> is_static(const fs::path& path) {
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) return std::nullopt;
    Elf64_Ehdr eh{};
    if (::pread(fd.get(), &eh, sizeof eh, 0) != static_cast<ssize_t>(sizeof eh))
        return std::nullopt;
    if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256)
        return std::nullopt;
    for (unsigned i = 0; i < eh.e_phnum; ++i) {
        Elf64_Phdr ph{};
        const auto off = static_cast<off_t>(eh.e_phoff + i * sizeof ph);
        if (::pread(fd.get(), &ph, sizeof ph, off) != static_cast<ssize_t>(sizeof ph))
            return std::nullopt;
        if (ph.p_type == PT_INTERP) return false;
    }
    return true;
}

// A registration of `path` (a host path: the engine runs it as named).
Registration registration(std::string mode, const fs::path& file, const std::string& path) {
    Registration r;
    r.mode = std::move(mode);
    r.file = file.string();
    r.path = path;
    std::error_code ec;
    const fs::path real = fs::canonical(path, ec);
    r.binary = ec ? FileFact{} : stat_path(real);
    if (r.binary.type == FileFact::Type::Regular) r.is_static = is_static(real);
    return r;
}

std::optional<std::string> read_if_there(const fs::path& path) {
    if (!stat_path(path).exists()) return std::nullopt;
    return util::read_file(path, kMaxFile);
}

toml::table parse_toml_file(const fs::path& path, const std::string& text) {
    if (auto unsafe = gpubind::util::detail::toml_unsafe_text(text))
        util::throw_invalid("read", path.string(), "invalid TOML at " + *unsafe);
    try {
        return toml::parse(text, path.string());
    } catch (const toml::parse_error& e) {
        util::throw_invalid("read", path.string(),
                            "invalid TOML at line " + std::to_string(e.source().begin.line) + ": " +
                                std::string(e.description()));
    }
}

bool installed(const fs::path& prefix, const char* binary, const char* config_dir,
               std::string& evidence) {
    for (const char* dir : {"usr/bin", "usr/sbin", "usr/local/bin", "bin", "sbin"}) {
        const fs::path p = prefix / dir / binary;
        if (stat_path(p).exists()) {
            evidence = p.string();
            return true;
        }
    }
    const fs::path c = prefix / config_dir;
    if (stat_path(c).type == FileFact::Type::Directory) {
        evidence = c.string();
        return true;
    }
    return false;
}

void gather_docker(EngineFacts& e, const fs::path& prefix, bool cgroup2) {
    const fs::path file = prefix / setup::kDockerConfig;
    // dockerd uses the systemd driver on cgroup v2 hosts unless told otherwise.
    e.systemd_cgroup_driver = cgroup2;
    auto text = read_if_there(file);
    if (!text) return;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& x) {
        e.error = file.string() + ": invalid JSON: " + x.what();
        return;
    }
    if (!j.is_object()) return;
    if (auto opts = j.find("exec-opts"); opts != j.end() && opts->is_array())
        for (const auto& o : *opts)
            if (o.is_string()) {
                const auto s = o.get<std::string>();
                if (s == "native.cgroupdriver=systemd") e.systemd_cgroup_driver = true;
                if (s == "native.cgroupdriver=cgroupfs") e.systemd_cgroup_driver = false;
            }
    auto rt = j.find("runtimes");
    if (rt == j.end() || !rt->is_object()) return;
    auto ours = rt->find(setup::kRuntimeName);
    if (ours == rt->end() || !ours->is_object() || !ours->contains("path") ||
        !(*ours)["path"].is_string())
        return;
    Registration r = registration("runtime", file, (*ours)["path"].get<std::string>());
    r.is_default = j.value("default-runtime", "") == setup::kRuntimeName;
    e.registrations.push_back(std::move(r));
}

void gather_containerd(EngineFacts& e, const fs::path& prefix) {
    const fs::path main = prefix / setup::kContainerdConfig;
    const fs::path drop_in = prefix / setup::kContainerdDropIn;
    try {
        auto main_text = read_if_there(main);
        auto drop_text = read_if_there(drop_in);
        bool imported = false;
        // plugins."io.containerd.grpc.v1.cri".containerd (its name has dots: no at_path).
        auto cri = [](const toml::table& t) { return t["plugins"][kCri]["containerd"]; };
        auto systemd_in = [&](const toml::table& t) {
            const auto* runtimes = cri(t)["runtimes"].as_table();
            if (!runtimes) return;
            for (const auto& [name, rt] : *runtimes)
                if (auto v = rt.at_path("options.SystemdCgroup").value<bool>(); v && *v)
                    e.systemd_cgroup_driver = true;
        };
        const std::string import = "/" + std::string(setup::kContainerdDropIn);
        if (main_text) {
            const toml::table t = parse_toml_file(main, *main_text);
            if (const auto* imports = t.get_as<toml::array>("imports"))
                for (const auto& i : *imports)
                    if (auto glob = i.value<std::string>())
                        imported = imported || *glob == import ||
                                   ::fnmatch(glob->c_str(), import.c_str(), FNM_PATHNAME) == 0;
            systemd_in(t);
        }
        if (!drop_text) return;
        const toml::table t = parse_toml_file(drop_in, *drop_text);
        systemd_in(t);
        const auto binary =
            cri(t)["runtimes"][setup::kRuntimeName]["options"]["BinaryName"].value<std::string>();
        if (!binary) return;
        if (!imported)
            e.error = drop_in.string() + " is not imported by " + main.string() +
                      ": containerd does not read it";
        Registration r = registration("runtime", drop_in, *binary);
        r.is_default =
            cri(t)["default_runtime_name"].value<std::string>() == std::string(setup::kRuntimeName);
        e.registrations.push_back(std::move(r));
    } catch (const util::Error& x) {
        e.error = x.what();
    }
}

void gather_hooks(EngineFacts& e, const fs::path& prefix) {
    for (const char* dir : kHooksDirs) {
        for (const auto& name : node::detail::list_dir(under(prefix, dir))) {
            if (fs::path(name).extension() != ".json") continue;
            const fs::path file = under(prefix, dir) / name;
            try {
                auto j = nlohmann::json::parse(util::read_file(file, kMaxFile));
                const auto path = j.at("hook").at("path").get<std::string>();
                if (fs::path(path).filename() != kHookName) continue;
                e.registrations.push_back(registration("hook", file, path));
            } catch (const std::exception& x) {
                if (name.find("gpubind") != std::string::npos)
                    e.error = file.string() + ": " + x.what();
            }
        }
    }
}

void gather_crio(EngineFacts& e, const fs::path& prefix) {
    // CRI-O's default cgroup manager is systemd.
    e.systemd_cgroup_driver = true;
    try {
        std::vector<fs::path> files = {prefix / "etc/crio/crio.conf"};
        for (const auto& name : node::detail::list_dir(prefix / "etc/crio/crio.conf.d"))
            files.push_back(prefix / "etc/crio/crio.conf.d" / name);
        for (const auto& file : files) {
            auto text = read_if_there(file);
            if (!text) continue;
            const toml::table t = parse_toml_file(file, *text);
            if (auto m = t.at_path("crio.runtime.cgroup_manager").value<std::string>())
                e.systemd_cgroup_driver = *m == "systemd";
            if (auto p =
                    t.at_path("crio.runtime.runtimes.gpubind.runtime_path").value<std::string>()) {
                Registration r = registration("runtime", file, *p);
                r.is_default = t.at_path("crio.runtime.default_runtime").value<std::string>() ==
                               std::string(setup::kRuntimeName);
                e.registrations.push_back(std::move(r));
            }
        }
    } catch (const util::Error& x) {
        e.error = x.what();
    }
    gather_hooks(e, prefix);
}

void gather_podman(EngineFacts& e, const fs::path& prefix) {
    // podman's default cgroup manager is systemd (cgroupfs only when set).
    e.systemd_cgroup_driver = true;
    if (auto text = read_if_there(prefix / "etc/containers/containers.conf")) {
        try {
            const toml::table t = parse_toml_file(prefix / "etc/containers/containers.conf", *text);
            if (auto m = t.at_path("engine.cgroup_manager").value<std::string>())
                e.systemd_cgroup_driver = *m == "systemd";
        } catch (const util::Error& x) {
            e.error = x.what();
        }
    }
    gather_hooks(e, prefix);
}

}  // namespace

EnginesFacts gather_engines(const EngineOptions& options) {
    const fs::path& prefix = options.prefix;
    EnginesFacts f;
    f.systemd = stat_path(prefix / "run/systemd/system").type == FileFact::Type::Directory;
    f.cgroup2 = stat_path(prefix / "sys/fs/cgroup/cgroup.controllers").exists();
    struct Known {
        const char* name;
        const char* binary;
        const char* config_dir;
    };
    for (const Known k :
         {Known{"docker", "dockerd", "etc/docker"},
          Known{"containerd", "containerd", "etc/containerd"}, Known{"crio", "crio", "etc/crio"},
          Known{"podman", "podman", "etc/containers"}, Known{"runc", "runc", "etc/runc"}}) {
        EngineFacts e;
        e.name = k.name;
        e.installed = installed(prefix, k.binary, k.config_dir, e.installed_evidence);
        if (!e.installed) continue;
        const std::string n = k.name;
        if (n == "docker")
            gather_docker(e, prefix, f.cgroup2);
        else if (n == "containerd")
            gather_containerd(e, prefix);
        else if (n == "crio")
            gather_crio(e, prefix);
        else if (n == "podman")
            gather_podman(e, prefix);
        f.engines.push_back(std::move(e));
    }
    return f;
}

std::vector<Check> check_engines(const EnginesFacts& f) {
    std::vector<Check> out;
    for (const auto& e : f.engines) {
        Check c;
        c.group = "engines";
        c.name = "engine-" + e.name;
        c.evidence.push_back("installed: " + e.installed_evidence);
        const std::string setup_cmd = "gpubind setup --engine " + e.name;
        if (!e.error.empty()) {
            c.verdict = Verdict::Problem;
            c.summary =
                "its configuration cannot be read, or gpubind's part of it does not take effect";
            c.evidence.push_back(e.error);
            c.fix = "correct the file; `" + setup_cmd + "` writes gpubind's part again";
            out.push_back(std::move(c));
            continue;
        }
        if (e.name == "runc") {
            c.summary = "registered per bundle (hooks.prestart of config.json)";
            c.fix = "";
            out.push_back(std::move(c));
            continue;
        }
        if (e.registrations.empty()) {
            c.summary = "gpubind is not registered";
            c.fix = "";
            c.evidence.push_back("`" + setup_cmd + "` registers it");
            out.push_back(std::move(c));
            continue;
        }
        std::vector<std::string> modes;
        std::string fix;
        for (const auto& r : e.registrations) {
            modes.push_back(r.mode + (r.is_default ? " (default)" : ""));
            c.evidence.push_back(
                fmt::format("{}: {} {} ({})", r.file, r.mode, r.path, describe(r.binary)));
            if (r.binary.type != FileFact::Type::Regular || !r.binary.executable) {
                c.verdict = Verdict::Problem;
                c.summary = fmt::format(
                    "the registration in {} names {}, which is {}: every GPU "
                    "container fails to start",
                    r.file, r.path, describe(r.binary));
                fix = "install gpubind (" + r.path + "), or `" + setup_cmd + " --" +
                      (r.mode == "hook" ? "hook" : "runtime") + "-path PATH` to name where it is";
            } else if (r.is_static == false && c.verdict == Verdict::Ok) {
                c.verdict = Verdict::Warning;
                c.summary = r.path +
                            " is dynamically linked: the engine runs it as root, and "
                            "the environment can load code into it";
                fix = "install the packaged, static " + fs::path(r.path).filename().string();
            }
        }
        const bool systemd_hazard = f.systemd && (f.cgroup2 || e.systemd_cgroup_driver);
        const bool bare_hook = std::any_of(e.registrations.begin(), e.registrations.end(),
                                           [](const auto& r) { return r.mode == "hook"; });
        if (c.verdict == Verdict::Ok && systemd_hazard && bare_hook) {
            c.verdict = Verdict::Warning;
            c.summary = fmt::format(
                "GPU containers start through the bare hook on a systemd host ({}): their device "
                "access is lost at the next `systemctl daemon-reload`",
                f.cgroup2 ? "cgroup v2" : "systemd cgroup driver");
            fix = e.name == "crio"
                      ? "`gpubind setup --engine crio` and run GPU pods with the gpubind runtime "
                        "class, then remove the hook file"
                      : "start GPU containers with --runtime /usr/bin/gpubind-runtime (or by CDI), "
                        "then remove the hook file";
        }
        if (c.verdict == Verdict::Ok)
            c.summary = "gpubind is registered: " + fmt::format("{}", fmt::join(modes, ", "));
        c.fix = fix;
        out.push_back(std::move(c));
    }
    if (out.empty()) {
        Check c{"engines", "engines", Verdict::Warning, "no container engine found", {}, ""};
        c.fix = "install one (docker, containerd, CRI-O, podman or runc), then `gpubind setup`";
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<Check> check_gpubind(const GpubindFacts& f) {
    Check c{"gpubind", "config", Verdict::Ok, "", {}, ""};
    const std::string file = f.config_path.empty() ? "built-in defaults" : f.config_path;
    if (!f.config_error.empty()) {
        c.verdict = Verdict::Problem;
        c.summary = "the config does not load: the hook refuses every GPU container";
        c.evidence = {f.config_error};
        c.fix = f.config_env_relative
                    ? "give GPUBIND_CONFIG as an absolute path, here and in the hook's "
                      "registration (its \"env\"): the hook and gpubind-runtime refuse a "
                      "relative one"
                    : "correct " + file + " where it says; `gpubind doctor --config " + file +
                          "` checks it again";
    } else {
        c.summary = "parses: " + file;
    }
    return {std::move(c)};
}

}  // namespace gpubind::doctor
