// The Container Device Interface (CDI): the node described as CDI specs
// (`gpubind cdi generate`, kept current by every container start that reads
// the node), and CDI requests honoured by gpubind-runtime for engines that do
// not apply CDI themselves (cdi_apply.cpp; reading and applying specs is
// apply.hpp).
//
// The GPU spec (kind config.cdi.kind) holds, at the top level, what every
// device needs: NVIDIA_VISIBLE_DEVICES=void (a legacy hook injects nothing
// more), the control nodes, the driver files of config.cdi.caps as bind mounts
// (the plan's targets and options, make_plan for all GPUs with image_for()),
// and a createRuntime hook running gpubind-hook's "cdi" stage (it joins the
// container by the state's pid, which at createContainer runc and crun give
// as the container's own pid namespace sees it) and at poststop (it undoes
// what the start set on the node: a GPU share's limit); each device
// holds its own nodes: by index ("0") and UUID ("GPU-..."), MIG devices by
// "<gpu>:<mig>" and UUID (the parent's node and both capability nodes), and
// "all" (every GPU). IMEX channels are a spec of their own,
// "<vendor>/imex-channel", one device per channel number; so is each device
// family with a cdi-kind (family_spec).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpubind/config/config.hpp"
#include "gpubind/decide/image.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/plan.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/node/description.hpp"
#include "gpubind/node/devices.hpp"
#include "gpubind/node/node.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::cdi {

// The hook stage gpubind-hook runs for a CDI container.
inline constexpr std::string_view kHookStage = "cdi";
// The class of the IMEX channel kind (its vendor is config.cdi.kind's).
inline constexpr std::string_view kImexClass = "imex-channel";

// The CDI versions, oldest first, and the one a spec needs at least:
// 0.3.0; 0.4.0 for a mount's "type"; 0.5.0 for a device name starting with
// a digit or a device node's "hostPath"; 0.6.0 for annotations (spec or
// device) or a '.' in the class; 0.7.0 for "additionalGids" or "intelRdt";
// 1.1.0 for "netDevices" or intelRdt's "schemata"/"enableMonitoring".
const std::vector<std::string>& versions();
std::string minimum_version(const nlohmann::json& spec);
// Index of `version` in versions() ("v" prefix accepted), or -1: whether a
// spec's cdiVersion is one gpubind knows, written as the list writes it.
// Known versions are ordered by util's compare_versions (gpubind/util/version.hpp).
int version_index(std::string_view version);

// The image layout CDI containers get: the node's own library directories
// (as seen from the driver root) and /usr/bin, whatever the image's. The
// spec's mounts and the hook's plan are both made with it.
decide::Image image_for(const node::Node& node, decide::Image image = {});

// The GPU spec of the node, and the IMEX spec (nullopt when the node has no
// channel). The hook entry runs config.cdi.hook with
// env GPUBIND_CONFIG=<config.source> (empty: the default path).
nlohmann::json gpu_spec(const node::Node& node, const config::Config& config);
std::optional<nlohmann::json> imex_spec(const node::Node& node, const config::Config& config);
// The spec of device family `name` (kind: its cdi-kind): a device per device
// of the family (its nodes, by its name: "mlx5_0", "nvidia-fs3") and "all";
// the family's shared nodes and files (read-only mounts) at the top level.
// nullopt when the family has no CDI kind or the node has none of it.
std::optional<nlohmann::json> family_spec(const node::Node& node, const config::Config& config,
                                          std::string_view name);

// The qualified names a spec offers ("nvidia.com/gpu=0"), in its order.
std::vector<std::string> device_names(const nlohmann::json& spec);

enum class Format { Json, Yaml };
std::string serialize(const nlohmann::json& spec, Format format);

// The file name of a kind's spec in a directory: "nvidia.com-gpu.json".
std::string file_name(std::string_view kind, Format format = Format::Json);

// Writes `content` to `path` atomically, only when it differs from what is
// there (read without following a link). Returns whether it wrote.
// `check_dir`: the directory must be root's (or this user's) and writable by no
// one else (write_file_atomic); off only for a file a user names (-o FILE).
bool write_if_changed(const std::filesystem::path& path, std::string_view content,
                      bool check_dir = true);

// (Re)writes the node's specs under config.cdi.dir (created if missing):
// the GPU spec, and the IMEX spec and each family's, or their removal when
// the node has none.
// Returns the files it changed; idempotent.
std::vector<std::filesystem::path> refresh(const node::Node& node, const config::Config& config);
// The files refresh() keeps and what each holds for `node` (nullopt: absent).
struct SpecFile {
    std::filesystem::path path;
    std::optional<std::string> content;
};
std::vector<SpecFile> wanted_specs(const node::Node& node, const config::Config& config);
// Removes the node's specs refresh() writes (package removal); returns those
// it removed.
std::vector<std::filesystem::path> remove(const config::Config& config);
// On a container start: the node's specs that are already there, written
// for this node (their device nodes under its dev root), brought up to date;
// none is created (`gpubind cdi generate|refresh` and the boot unit do that)
// and another node's spec is left alone (a config for a simulated node
// sharing the host's CDI directory). A failure is a warning in the log, never
// the container's failure.
void refresh_quietly(const node::Node& node, const config::Config& config);
// Every containerEdits of a spec: the top level's, then each device's.
std::vector<const nlohmann::json*> all_edits(const nlohmann::json& spec);
// The same, to change them.
std::vector<nlohmann::json*> all_edits(nlohmann::json& spec);
// Whether the spec text is one refresh() wrote for the node of `config`:
// JSON whose every device node's hostPath (its path where it has none, as
// refresh() writes them for a dev root of "/") lies under its dev root's /dev.
bool written_for(std::string_view spec_text, const config::Config& config);

// The GPUs and MIG devices whose nodes a container's spec holds in
// linux.devices (path, type "c" and numbers as the node's): what the CDI
// devices the engine applied gave it. A MIG device counts when both its
// capability nodes are there; its parent GPU then counts as a whole GPU only
// when none of its MIG devices does. IMEX channels likewise (channel numbers).
struct SpecSelection {
    node::Selection selection;
    std::vector<std::string> imex_channels;
    std::vector<std::string> names;  // "GPU 0", "MIG 1:0", for the log
};
SpecSelection selection_in_spec(const node::Node& node, const nlohmann::json& spec);

// --- CDI requests (cdi_apply.cpp) ---

// What a container asks for by CDI name, in the forms engines without CDI
// pass on: annotations "cdi.k8s.io/<anything>" holding comma lists of
// qualified names (a container without CAP_SYS_ADMIN only under
// policy.accept_cdi_annotations_unprivileged); NVIDIA_VISIBLE_DEVICES holding
// qualified names (its last value; under policy.accept_envvar_unprivileged
// unless privileged), of the allowed vendors only; /dev/null mounts at
// /var/run/nvidia-container-devices/cdi/<vendor>/<class>/<name> (under
// policy.accept_volume_mounts; present, they replace the variable). The
// allowed vendors are policy.cdi_vendors, or the vendor of config.cdi.kind
// when that is empty: a container without CAP_SYS_ADMIN names only their
// devices, by any way. Names are deduplicated, the first order kept. A
// malformed name, more than kMaxRequestNames names, or NVIDIA_VISIBLE_DEVICES
// mixing CDI names with other ids, throws Error(EINVAL/E2BIG, "read CDI
// request", <where>, why); a request refused by policy Error(ECANCELED,
// "refuse request", ...).
struct Requests {
    std::vector<std::string> devices;  // qualified names
    std::string source;                // "annotation cdi.k8s.io/x", "NVIDIA_VISIBLE_DEVICES", ...
};
// The most CDI device names one container may give, all ways together
// (a node's GPUs, MIG devices and IMEX channels are far fewer).
inline constexpr std::size_t kMaxRequestNames = 1024;
Requests read_requests(const decide::oci::Spec& spec, const config::Config& config);

// The limits on a spec file gpubind-runtime reads.
inline constexpr std::size_t kMaxSpecFileSize = 1u << 20;

// The annotation marking a spec gpubind-runtime applied CDI devices to.
inline constexpr std::string_view kAppliedAnnotation = "gpubind.cdi";

}  // namespace gpubind::cdi
