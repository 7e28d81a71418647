// The node as CDI specs (rules in cdi.hpp).
#include "gpubind/cdi/cdi.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/cdi/runtime.hpp"
#include "gpubind/cdi/yaml.hpp"
#include "gpubind/decide/plan.hpp"
#include "gpubind/node/families.hpp"
#include "gpubind/node/node_read.hpp"
#include "gpubind/util/cdi_name.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/journal.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::cdi {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Where a host path under the driver root appears in a container.
std::optional<fs::path> container_path(const node::Node& node, const fs::path& host) {
    const fs::path rel =
        host.lexically_normal().lexically_relative(node.roots.driver.lexically_normal());
    if (rel.empty() || *rel.begin() == "..") return std::nullopt;
    return fs::path("/") / rel;
}

// The directory most of the node's libraries (64-bit or 32-bit) are in, as
// a container sees it.
std::optional<fs::path> library_dir(const node::Node& node, bool compat32) {
    std::map<fs::path, unsigned> count;
    for (const auto& f : node.files)
        if (f.kind == node::FileKind::Library && f.compat32 == compat32)
            if (auto dir = container_path(node, fs::path(f.host_path).parent_path())) ++count[*dir];
    std::optional<fs::path> best;
    unsigned most = 0;
    for (const auto& [dir, n] : count)
        if (n > most) {
            best = dir;
            most = n;
        }
    return best;
}

json node_json(const node::DeviceNode& n) {
    json j = {{"path", n.path},
              {"type", "c"},
              {"major", n.major},
              {"minor", n.minor},
              {"fileMode", static_cast<unsigned>(n.mode & 0777)},
              {"permissions", "rw"}};
    if (util::normal_path(n.host_path) != util::normal_path(n.path)) j["hostPath"] = n.host_path;
    return j;
}

json device_json(const std::string& name, const std::vector<const node::DeviceNode*>& nodes) {
    json list = json::array();
    for (const node::DeviceNode* n : nodes) list.push_back(node_json(*n));
    return {{"name", name}, {"containerEdits", {{"deviceNodes", list}}}};
}

// A device under a name the CDI rules accept; another name is left out (logged).
void add_device(json& devices, const std::string& name,
                const std::vector<const node::DeviceNode*>& nodes) {
    if (auto why = util::device_name_error(name)) {
        util::logger().warn("CDI spec: leaving out device \"{}\": {}", name, *why);
        return;
    }
    devices.push_back(device_json(name, nodes));
}

json with_version(json spec) {
    spec["cdiVersion"] = minimum_version(spec);
    return spec;
}

}  // namespace

decide::Image image_for(const node::Node& node, decide::Image image) {
    if (auto dir = library_dir(node, false)) image.lib_dir = *dir;
    if (auto dir = library_dir(node, true)) image.lib32_dir = *dir;
    image.bin_dir = "/usr/bin";
    return image;
}

json gpu_spec(const node::Node& node, const config::Config& config) {
    decide::Request request;
    request.source = decide::RequestSource::Explicit;
    request.devices = {node::DeviceIdsKind::All, {}};
    request.caps = config.cdi.caps;
    const decide::Plan plan = decide::make_plan(
        request, node, node::select_devices(node, request.devices), image_for(node), config, {});

    // The nodes of single devices; every other planned node is common.
    std::set<fs::path> own;
    for (const auto& gpu : node.gpus) {
        own.insert(gpu.node.path);
        for (const auto& m : gpu.mig) {
            own.insert(m.gi_cap.path);
            own.insert(m.ci_cap.path);
        }
    }
    json edits = json::object();
    edits["env"] = json::array({"NVIDIA_VISIBLE_DEVICES=void"});
    json nodes = json::array();
    for (const auto& d : plan.devices)
        if (!own.count(d.node.path)) nodes.push_back(node_json(d.node));
    edits["deviceNodes"] = nodes;
    json mounts = json::array();
    for (const auto& m : plan.mounts)
        mounts.push_back({{"hostPath", m.source},
                          {"containerPath", m.target},
                          {"options", cdi::mount_options(m.flags)}});
    edits["mounts"] = mounts;
    std::string config_path;
    if (!config.source.empty())
        config_path = fs::absolute(config.source).lexically_normal().string();
    // The "cdi" stage at createRuntime, and poststop: it undoes what the
    // start set on the node for the container (a GPU share's limit).
    const std::string config_env = std::string(config::kConfigEnv) + "=" + config_path;
    edits["hooks"] = json::array({{{"hookName", "createRuntime"},
                                   {"path", config.cdi.hook.string()},
                                   {"args", {"gpubind-hook", std::string(kHookStage)}},
                                   {"env", {config_env}}},
                                  {{"hookName", "poststop"},
                                   {"path", config.cdi.hook.string()},
                                   {"args", {"gpubind-hook", "poststop"}},
                                   {"env", {config_env}}}});

    // With the capabilities of a GPU-bound family (DRM with graphics), each
    // GPU's device carries that family's nodes of the GPU too.
    auto gpu_nodes = [&](const node::Gpu& gpu) {
        std::vector<const node::DeviceNode*> out = {&gpu.node};
        for (const auto& family : config.families) {
            const node::FamilyNodes* f = node::find_family(node, family.name);
            if (family.source != config::FamilySource::Drm || !(family.caps & config.cdi.caps) ||
                !f)
                continue;
            for (const auto& d : f->devices)
                if (d.pci_bus_id == gpu.pci_bus_id)
                    for (const auto& n : d.nodes) out.push_back(&n);
        }
        return out;
    };
    json devices = json::array();
    for (const auto& gpu : node.gpus) {
        add_device(devices, std::to_string(gpu.index), gpu_nodes(gpu));
        if (!gpu.uuid.empty()) add_device(devices, gpu.uuid, gpu_nodes(gpu));
    }
    for (const auto& gpu : node.gpus)
        for (const auto& m : gpu.mig) {
            const std::vector<const node::DeviceNode*> mig_nodes = {&gpu.node, &m.gi_cap,
                                                                    &m.ci_cap};
            add_device(devices, fmt::format("{}:{}", gpu.index, m.index), mig_nodes);
            if (!m.uuid.empty()) add_device(devices, m.uuid, mig_nodes);
        }
    if (!node.gpus.empty()) {
        std::vector<const node::DeviceNode*> all;
        for (const auto& gpu : node.gpus)
            for (const node::DeviceNode* n : gpu_nodes(gpu)) all.push_back(n);
        add_device(devices, "all", all);
    }
    return with_version(
        {{"kind", config.cdi.kind}, {"devices", devices}, {"containerEdits", edits}});
}

std::optional<json> family_spec(const node::Node& node, const config::Config& config,
                                std::string_view name) {
    const config::Family* family = config.family(name);
    const node::FamilyNodes* f = node::find_family(node, name);
    if (!family || family->cdi_kind.empty() || !f) return std::nullopt;
    json devices = json::array();
    std::vector<const node::DeviceNode*> all;
    for (const auto& d : f->devices) {
        std::vector<const node::DeviceNode*> nodes;
        for (const auto& n : d.nodes) nodes.push_back(&n);
        all.insert(all.end(), nodes.begin(), nodes.end());
        add_device(devices, d.name, nodes);
    }
    add_device(devices, "all", all);
    json edits = json::object();
    json shared = json::array();
    for (const auto& n : f->shared) shared.push_back(node_json(n));
    if (!shared.empty()) edits["deviceNodes"] = shared;
    json mounts = json::array();
    for (const auto& file : f->files)
        mounts.push_back({{"hostPath", node::detail::under(node.roots.driver, file).string()},
                          {"containerPath", file},
                          {"options", cdi::mount_options(util::kMountReadOnly | util::kMountNoSuid |
                                                         util::kMountNoDev | util::kMountNoExec)}});
    if (!mounts.empty()) edits["mounts"] = mounts;
    json spec = {{"kind", family->cdi_kind}, {"devices", devices}};
    if (!edits.empty()) spec["containerEdits"] = edits;
    return with_version(spec);
}

std::optional<json> imex_spec(const node::Node& node, const config::Config& config) {
    if (node.imex_channels.empty()) return std::nullopt;
    json devices = json::array();
    for (const auto& channel : node.imex_channels)
        add_device(devices, std::to_string(channel.minor), {&channel});
    return with_version(
        {{"kind", std::string(util::vendor_of(config.cdi.kind)) + "/" + std::string(kImexClass)},
         {"devices", devices}});
}

std::string serialize(const json& spec, Format format) {
    return format == Format::Yaml ? yaml::dump(spec) : spec.dump(2) + "\n";
}

std::string file_name(std::string_view kind, Format format) {
    std::string name(kind);
    std::replace(name.begin(), name.end(), '/', '-');
    return name + (format == Format::Yaml ? ".yaml" : ".json");
}

bool write_if_changed(const fs::path& path, std::string_view content, bool check_dir) {
    util::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (fd && ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<std::size_t>(st.st_size) == content.size() &&
        util::read_fd(fd.get(), content.size(), path.string()) == content)
        return false;
    util::write_file_atomic(path, content, {.mode = 0644, .check_dir = check_dir});
    return true;
}

namespace {

// The files refresh() writes: the GPU spec, the IMEX spec, then each
// family's that has a CDI kind (config order).
std::vector<fs::path> spec_files(const config::Config& config) {
    const fs::path& dir = config.cdi.dir;
    std::vector<fs::path> out = {dir / file_name(config.cdi.kind),
                                 dir / file_name(std::string(util::vendor_of(config.cdi.kind)) +
                                                 "/" + std::string(kImexClass))};
    for (const auto& f : config.families)
        if (!f.cdi_kind.empty()) out.push_back(dir / file_name(f.cdi_kind));
    return out;
}

// A spec file's bytes, or nullopt where none is (read without following a
// link; what is not a regular file is an Error naming it).
std::optional<std::string> read_spec_if_there(const fs::path& file) {
    util::Fd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) return std::nullopt;
        util::throw_errno("open", file.string());
    }
    return util::read_fd(fd.get(), kMaxSpecFileSize, file.string());
}

// Removes `file`; whether it was there.
bool remove_file(const fs::path& file) {
    if (::unlink(file.c_str()) == 0) return true;
    if (errno != ENOENT) util::throw_errno("remove", file.string());
    return false;
}

}  // namespace

std::vector<fs::path> remove(const config::Config& config) {
    std::vector<fs::path> out;
    for (const auto& f : spec_files(config))
        if (remove_file(f)) out.push_back(f);
    return out;
}

std::vector<SpecFile> wanted_specs(const node::Node& node, const config::Config& config) {
    const auto files = spec_files(config);
    std::vector<SpecFile> out = {{files[0], serialize(gpu_spec(node, config), Format::Json)},
                                 {files[1], std::nullopt}};
    if (auto spec = imex_spec(node, config)) out[1].content = serialize(*spec, Format::Json);
    std::size_t i = 2;
    for (const auto& f : config.families) {
        if (f.cdi_kind.empty()) continue;
        out.push_back({files[i++], std::nullopt});
        if (auto spec = family_spec(node, config, f.name))
            out.back().content = serialize(*spec, Format::Json);
    }
    return out;
}

std::vector<fs::path> refresh(const node::Node& node, const config::Config& config) {
    std::vector<fs::path> changed;
    const fs::path& dir = config.cdi.dir;
    const std::vector<SpecFile> wanted = wanted_specs(node, config);
    // All the specs or none: a step that fails puts back the ones before it.
    util::Journal journal;
    journal.dirs_for(dir / file_name(config.cdi.kind));
    util::make_directories(dir);
    for (const SpecFile& f : wanted) {
        // Read once: what the journal puts back, and whether it changes.
        std::optional<std::string> was = read_spec_if_there(f.path);
        journal.file(f.path, was, 0644);
        if (was == f.content) continue;
        if (f.content)
            util::write_file_atomic(f.path, *f.content, {.mode = 0644});
        else
            remove_file(f.path);
        changed.push_back(f.path);
    }
    journal.commit();
    return changed;
}

bool written_for(std::string_view spec_text, const config::Config& config) {
    const json spec = json::parse(spec_text, nullptr, false);
    if (spec.is_discarded()) return false;
    const std::string dev = (config.roots.dev / "dev").lexically_normal().string() + "/";
    std::size_t nodes = 0;
    bool all_here = true;
    for (const json* edits : all_edits(spec)) {
        if (!edits->contains("deviceNodes") || !(*edits)["deviceNodes"].is_array()) continue;
        for (const auto& n : (*edits)["deviceNodes"]) {
            ++nodes;
            // Without hostPath the node is at its path (a dev root of "/").
            const json* host = nullptr;
            if (n.is_object())
                for (const char* key : {"hostPath", "path"})
                    if (!host && n.contains(key)) host = &n[key];
            all_here = all_here && host && host->is_string() &&
                       host->get<std::string>().rfind(dev, 0) == 0;
        }
    }
    return nodes > 0 && all_here;
}

void refresh_quietly(const node::Node& node, const config::Config& config) {
    try {
        // This node's specs that are there, and what they hold: nothing is
        // computed for a node that has none.
        std::map<fs::path, std::string> ours;
        for (const fs::path& file : spec_files(config)) {
            util::Fd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
            struct stat st {};
            if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
            std::string text = util::read_fd(fd.get(), kMaxSpecFileSize, file.string());
            if (!written_for(text, config)) {
                util::logger().debug("CDI spec {} is not this node's: left alone", file.string());
                continue;
            }
            ours.emplace(file, std::move(text));
        }
        if (ours.empty()) return;
        for (const SpecFile& f : wanted_specs(node, config)) {
            const auto there = ours.find(f.path);
            if (there == ours.end() || (f.content && *f.content == there->second)) continue;
            if (f.content)
                util::write_file_atomic(f.path, *f.content, {.mode = 0644});
            else
                remove_file(f.path);
            util::logger().info("CDI spec {} rewritten: the node changed", f.path.string());
        }
    } catch (const std::system_error& e) {
        // A rootless start cannot write there, and need not say so every time.
        const int err = e.code().value();
        if (err == EACCES || err == EPERM || err == EROFS)
            util::logger().debug("CDI spec under {} not refreshed: {}", config.cdi.dir.string(),
                                 e.what());
        else
            util::logger().warn("CDI spec under {} not refreshed: {}", config.cdi.dir.string(),
                                e.what());
    } catch (const std::exception& e) {
        util::logger().warn("CDI spec under {} not refreshed: {}", config.cdi.dir.string(),
                            e.what());
    }
}

SpecSelection selection_in_spec(const node::Node& node, const json& spec) {
    std::set<std::tuple<std::string, unsigned, unsigned>> present;
    const json* linux = spec.is_object() && spec.contains("linux") ? &spec["linux"] : nullptr;
    if (linux && linux->is_object() && linux->contains("devices") && (*linux)["devices"].is_array())
        for (const auto& d : (*linux)["devices"]) {
            if (!d.is_object() || d.value("type", "") != "c") continue;
            const auto path = d.find("path");
            const auto major = d.find("major");
            const auto minor = d.find("minor");
            if (path == d.end() || !path->is_string() || major == d.end() ||
                !major->is_number_unsigned() || minor == d.end() || !minor->is_number_unsigned())
                continue;
            present.insert({util::normal_path(path->get_ref<const std::string&>()),
                            major->get<unsigned>(), minor->get<unsigned>()});
        }
    auto has = [&](const node::DeviceNode& n) {
        return present.count({util::normal_path(n.path), n.major, n.minor}) > 0;
    };
    SpecSelection out;
    for (const auto& gpu : node.gpus) {
        if (!has(gpu.node)) continue;
        bool mig = false;
        for (const auto& m : gpu.mig)
            if (has(m.gi_cap) && has(m.ci_cap)) {
                out.selection.migs.push_back(&m);
                out.names.push_back(fmt::format("MIG {}:{}", gpu.index, m.index));
                mig = true;
            }
        if (!mig) {
            out.selection.gpus.push_back(&gpu);
            out.names.push_back(fmt::format("GPU {}", gpu.index));
        }
    }
    for (const auto& channel : node.imex_channels)
        if (has(channel)) {
            out.imex_channels.push_back(std::to_string(channel.minor));
            out.names.push_back(fmt::format("IMEX channel {}", channel.minor));
        }
    return out;
}

}  // namespace gpubind::cdi
