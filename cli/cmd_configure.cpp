// gpubind configure: give a running container GPUs by hand, with
// nvidia-container-cli's shape, for people scripting their own runtimes.
#include <fmt/format.h>

#include "commands.hpp"
#include "gpubind/start/configure.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::cli {

namespace {

struct ConfigureOptions {
    NodeOptions node;
    pid_t pid = 0;
    std::string device;
    std::vector<std::string> requires_;
    std::filesystem::path rootfs;
    bool no_cgroups = false, no_devbind = false, mig_config = false, mig_monitor = false;
    bool utility = false, compute = false, video = false, graphics = false, display = false,
         ngx = false, compat32 = false;
    std::string capabilities;
};

decide::Request make_request(const ConfigureOptions& o) {
    decide::Request r;
    r.source = decide::RequestSource::Explicit;
    r.devices = node::parse_device_ids(o.device.empty() ? "none" : o.device);
    if (r.devices.kind == node::DeviceIdsKind::Void) r.devices.kind = node::DeviceIdsKind::None;
    config::Capabilities caps = 0;
    if (!o.capabilities.empty()) {
        std::string unknown;
        auto parsed = config::parse_capabilities(o.capabilities, &unknown);
        if (!parsed)
            util::throw_invalid("parse capabilities", "--capabilities",
                                "unknown capability \"" + unknown + "\"");
        caps = *parsed;
    }
    const std::pair<bool, config::Capability> flags[] = {
        {o.utility, config::kCapUtility},  {o.compute, config::kCapCompute},
        {o.video, config::kCapVideo},      {o.graphics, config::kCapGraphics},
        {o.display, config::kCapDisplay},  {o.ngx, config::kCapNgx},
        {o.compat32, config::kCapCompat32}};
    for (auto [on, cap] : flags)
        if (on) caps |= cap;
    r.caps = caps ? caps : config::kCapDefault;
    for (const auto& expr : o.requires_) r.requirements.push_back({"--require", expr});
    if (o.mig_config) r.mig_config = node::parse_device_ids("all");
    if (o.mig_monitor) r.mig_monitor = node::parse_device_ids("all");
    return r;
}

}  // namespace

void register_configure(CLI::App& app, Action& action) {
    auto o = std::make_shared<ConfigureOptions>();
    auto* cmd = app.add_subcommand(
        "configure", "Give a running container (its init pid and rootfs) GPUs and driver files");
    add_node_options(*cmd, o->node);
    cmd->add_option("-p,--pid", o->pid, "The container's init process")->required();
    cmd->add_option("-d,--device", o->device, "Device ids (default none: driver files only)");
    cmd->add_option("-r,--require", o->requires_, "A requirement, as NVIDIA_REQUIRE_* values");
    cmd->add_option("-c,--capabilities", o->capabilities, "Driver capabilities, comma list");
    cmd->add_flag("--utility", o->utility, "Utility capability");
    cmd->add_flag("--compute", o->compute, "Compute capability");
    cmd->add_flag("--video", o->video, "Video capability");
    cmd->add_flag("--graphics", o->graphics, "Graphics capability");
    cmd->add_flag("--display", o->display, "Display capability");
    cmd->add_flag("--ngx", o->ngx, "NGX capability");
    add_compat32_flag(*cmd, o->compat32, "Also the 32-bit libraries");
    cmd->add_flag("--mig-config", o->mig_config, "The MIG config capability");
    cmd->add_flag("--mig-monitor", o->mig_monitor, "The MIG monitor capability");
    cmd->add_flag("--no-cgroups", o->no_cgroups, "Write no device cgroup rules");
    cmd->add_flag("--no-devbind", o->no_devbind,
                  "Do not bind the device nodes (cgroup rules only)");
    cmd->add_option("rootfs", o->rootfs, "The container's root filesystem")->required();
    cmd->callback([o, &action] {
        action = [o] {
            const config::Config config = node_config(o->node);
            start::configure(config, {.request = make_request(*o),
                                      .rootfs = std::filesystem::absolute(o->rootfs).string(),
                                      .pid = o->pid,
                                      .no_cgroups = o->no_cgroups,
                                      .no_devbind = o->no_devbind});
            return 0;
        };
    });
}

}  // namespace gpubind::cli
