// execute(): the order of the steps and their rollback. The steps share one
// context (context.hpp) and live beside it: the host side (host.cpp), the
// plan's devices, mounts, links and files (place.cpp), what earlier starts
// left (leftovers.cpp), the proc view (proc_view.cpp), the loader cache
// (loader_cache.cpp) and device access (device_access.cpp). Every system call
// goes through System (system_linux.cpp for the real one).
#include "gpubind/exec/exec.hpp"

#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"

#include "context.hpp"
#include "device_access.hpp"

namespace gpubind::exec {

namespace {

class Executor {
  public:
    Executor(const decide::Plan& plan, const Target& target, os::System& sys)
        : c_(plan, target, sys), devices_(sys, plan.devices, target.on_refused, target.bpf_dir) {}

    void run() {
        c_.timing.mark("");
        try {
            prepare_host(c_, devices_);
            if (!c_.host.in_container)
                in_context("enter the container's mount namespace", [&] { c_.enter(); });
            in_context([&] { return "open the container's root " + c_.target.rootfs.string(); },
                       [&] { c_.open_root(); });
            if (c_.plan.refresh_ldcache) in_context("loader cache", [&] { cache_.check_files(); });
            c_.timing.mark("root");
            place();
            in_context("device cgroup", [&] {
                devices_.allow([&](const std::string& what, std::function<void()> undo) {
                    Undo u{Undo::Kind::Call, nullptr, {}, what};
                    u.call = std::move(undo);
                    c_.undo.push_back(std::move(u));
                });
            });
            c_.timing.mark("device cgroup");
            finish();
            in_context("return to this process's mount namespace", [&] { c_.leave(); });
            c_.timing.mark("loader cache");
            c_.timing.log("", "execution: ");
        } catch (...) {
            std::exception_ptr first = std::current_exception();
            rollback();
            std::rethrow_exception(first);
        }
    }

  private:
    // Devices, mounts, links and files.
    void place() {
        const decide::Plan& plan = c_.plan;
        for (std::size_t i = 0; i < plan.devices.size(); ++i) {
            const auto& d = plan.devices[i];
            in_context([&] { return "device " + d.node.path + " (" + d.why + ")"; },
                       [&] { bind_device(c_, i); });
        }
        c_.timing.mark("devices");
        for (std::size_t i = 0; i < plan.mounts.size(); ++i) {
            const auto& m = plan.mounts[i];
            in_context([&] { return "mount " + m.target + " (" + m.why + ")"; },
                       [&] { bind_mount(c_, i); });
        }
        c_.timing.mark("mounts");
        for (const auto& link : plan.symlinks)
            in_context([&] { return "symlink " + link.path; }, [&] { make_link(c_, link); });
        for (const auto& f : plan.files)
            in_context([&] { return "file " + f.path; }, [&] { write_planned_file(c_, f); });
        c_.timing.mark("links and files");
    }

    // The proc view, what earlier starts left, the loader cache.
    void finish() {
        const decide::Plan& plan = c_.plan;
        if (plan.proc)
            in_context([&] { return "proc view " + plan.proc->target; },
                       [&] { mount_proc_view(c_); });
        c_.timing.mark("proc view");
        for (const auto& f : plan.stale_files)
            in_context([&] { return "file " + f.path; }, [&] { remove_stale_file(c_, f); });
        for (const auto& owned : plan.owned)
            in_context([&] { return "driver names in " + owned.dir; },
                       [&] { bring_up_to_date(c_, owned); });
        c_.timing.mark("owned names");
        if (plan.refresh_ldcache)
            in_context(use_ldconfig(plan, c_.target) ? "ldconfig" : "loader cache",
                       [&] { cache_.refresh(); });
    }

    void rollback() noexcept {
        c_.restore_fs_ids();
        // Undoing needs the container's namespace (umount2 acts on our own).
        if (!c_.undo.empty() && !c_.host.in_container) {
            try {
                c_.enter();
            } catch (const std::exception& e) {
                util::logger().error(
                    "rollback: cannot re-enter the container's mount namespace: {}", e.what());
            }
        }
        for (auto it = c_.undo.rbegin(); it != c_.undo.rend(); ++it) {
            try {
                undo(*it);
            } catch (const std::exception& e) {
                util::logger().error("rollback: {}: {}", it->what, e.what());
            }
        }
        c_.undo.clear();
        if (c_.host.in_container) {
            try {
                c_.leave();
            } catch (const std::exception& e) {
                util::logger().error("rollback: cannot return to the host's mount namespace: {}",
                                     e.what());
            }
        }
    }

    void undo(const Undo& u) {
        os::SystemFiles& files = c_.files;
        switch (u.kind) {
            case Undo::Kind::Detach:
                files.detach(u.fd->get(), u.name);
                break;
            case Undo::Kind::RemoveFile:
                files.remove(u.fd->get(), u.name, false);
                break;
            case Undo::Kind::RemoveDir:
                files.remove(u.fd->get(), u.name, true);
                break;
            case Undo::Kind::Call:
                u.call();
                break;
            case Undo::Kind::RenameBack:
                files.rename_at(u.fd->get(), u.other, u.name);
                break;
            case Undo::Kind::ExchangeBack:
                files.exchange_at(u.fd->get(), u.name, u.other);
                break;
            case Undo::Kind::RestoreLink:
                files.make_symlink(u.old, u.fd->get(), u.name);
                break;
            case Undo::Kind::RestoreFile:
                files.write_file_at(u.fd->get(), u.name, u.old, 0644);
                break;
            case Undo::Kind::RestoreCache: {
                const os::RegularFile& f = *u.original;
                files.replace_file_at(u.fd->get(), u.other, u.name, f.data, f.mode,
                                      os::Owner{f.uid, f.gid});
                break;
            }
        }
    }

    Context c_;
    DeviceAccess devices_;
    LoaderCache cache_{c_};
};

}  // namespace

Target make_target(const config::Config& config, pid_t pid, std::filesystem::path rootfs) {
    Target target;
    target.pid = pid;
    target.rootfs = std::move(rootfs);
    target.cgroups = config.policy.cgroups;
    target.on_refused = config.policy.on_refused;
    target.bpf_dir = config.bpf_dir.string();
    target.ldcache = config.policy.ldcache;
    target.ldconfig = config.ldconfig;
    return target;
}

void execute(const decide::Plan& plan, const Target& target, os::System& sys) {
    Executor(plan, target, sys).run();
}

void execute(const decide::Plan& plan, const Target& target) {
    os::LinuxSystem sys;
    execute(plan, target, sys);
}

}  // namespace gpubind::exec
