// The plan's devices, mounts, links and files placed in the container's root
// (exec.hpp, step 3).
#include <algorithm>
#include <cerrno>
#include <string>

#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

#include "context.hpp"

namespace gpubind::exec {

namespace {

constexpr unsigned kDeviceFlags =
    util::kMountNoSuid | util::kMountNoExec;  // not NoDev: they are devices

// The planned mount a planned link leads to, through other planned links
// in its directory (libcuda.so -> libcuda.so.1 -> libcuda.so.<version>);
// plan.mounts.size() when none.
std::size_t planned_mount_behind(const decide::Plan& plan, const decide::PlannedSymlink& link) {
    const std::string_view dir = util::dir_name(link.path);
    std::string target = link.target;
    for (std::size_t hops = 0; hops <= plan.symlinks.size(); ++hops) {
        if (target.find('/') != std::string::npos) break;
        const std::string p = util::join_path(dir, target);
        for (std::size_t i = 0; i < plan.mounts.size(); ++i)
            if (plan.mounts[i].target == p && !plan.mounts[i].directory) return i;
        auto next = std::find_if(plan.symlinks.begin(), plan.symlinks.end(),
                                 [&](const decide::PlannedSymlink& s) { return s.path == p; });
        if (next == plan.symlinks.end()) break;
        target = next->target;
    }
    return plan.mounts.size();
}

}  // namespace

void bind_device(Context& c, std::size_t i) {
    const auto& dev = c.plan.devices[i];
    if (!dev.bind) return;
    util::logger().debug("device {} -> {} ({})", dev.node.host_path, dev.node.path, dev.why);
    c.bind(c.host.device_trees[i], dev.node.path, Context::PointKind::Device, kDeviceFlags,
           dev.node.major, dev.node.minor);
}

void bind_mount(Context& c, std::size_t i) {
    const auto& m = c.plan.mounts[i];
    util::logger().debug("mount {} -> {} ({})", m.source, m.target, m.why);
    c.bind(c.host.mount_trees[i], m.target,
           m.directory ? Context::PointKind::Directory : Context::PointKind::File, m.flags);
}

void make_link(Context& c, const decide::PlannedSymlink& link) {
    SharedFd dir = c.resolve_dir(util::dir_name(link.path));
    c.mounts.check(dir, link.path);
    const std::string name(util::base_name(link.path));
    // Made first (symlinkat fails on any name taken, never following it):
    // on a fresh root the name is free. Whatever is there is looked at.
    bool made = false;
    c.as_owner([&] {
        made = c.files.try_make_symlink(link.target, dir->get(), name);
        if (made) c.undo.push_back({Undo::Kind::RemoveFile, dir, name, link.path});
    });
    if (made) return;
    os::FileInfo info = c.files.stat_at(dir->get(), name);
    if (info.type == Type::Symlink) {
        std::string existing = c.files.read_link_at(dir->get(), name);
        if (existing == link.target) return;  // already there
        // Another driver version's link (an earlier start's, the image's):
        // removed through the directory, never followed, and made anew.
        c.replace_link(dir, link.path, "-> " + link.target);
    } else if (info.type == Type::Regular) {
        // The image's own file at the driver's name: the host's file the
        // link would lead to is mounted over it.
        const std::size_t i = planned_mount_behind(c.plan, link);
        if (i == c.plan.mounts.size())
            throw util::Error(EEXIST, "create symlink", link.path,
                              "exists and is " + describe(info) +
                                  "; the plan mounts nothing it could be covered with");
        util::logger().info("{}: the image's own file, covered by the host's {}", link.path,
                            c.plan.mounts[i].source);
        util::Fd copy = c.files.clone_tree(c.host.mount_trees[i].get());
        c.bind(copy, link.path, Context::PointKind::File, c.plan.mounts[i].flags);
        return;
    } else if (info.type == Type::Directory) {
        throw util::Error(EISDIR, "create symlink", link.path,
                          "is a directory where the driver's link goes; refusing to replace it");
    } else if (info.type != Type::Missing) {
        throw util::Error(EEXIST, "create symlink", link.path, "exists and is " + describe(info));
    }
    c.as_owner([&] {
        c.files.make_symlink(link.target, dir->get(), name);
        c.undo.push_back({Undo::Kind::RemoveFile, dir, name, link.path});
    });
}

// A file of the plan (CUDA compat's loader entry): its parent resolved
// inside the root (created where missing), the file written with
// O_CREAT|O_EXCL|O_NOFOLLOW. A regular file already there (a restarted
// container keeps its rootfs) is left as it is; anything else is an Error.
void write_planned_file(Context& c, const decide::PlannedFile& f) {
    check_container_path(f.path, "file");
    SharedFd dir = c.resolve_dir(util::dir_name(f.path));
    c.mounts.check(dir, f.path);
    const std::string name(util::base_name(f.path));
    os::FileInfo info = c.files.stat_at(dir->get(), name);
    if (info.type == Type::Regular) {
        std::string old = c.files.read_regular_at(dir->get(), name, kMaxPlannedFile).data;
        if (old == f.content) {
            util::logger().debug("file {} is already there ({}); left as it is", f.path, f.why);
            return;
        }
        // gpubind's file, written by an earlier start: rewritten to this decision.
        util::logger().info("{}: rewritten ({})", f.path, f.why);
        c.remove_file(dir, f.path, std::move(old));
        info.type = Type::Missing;
    } else if (info.type == Type::Symlink) {
        c.replace_link(dir, f.path, "a file");
        info.type = Type::Missing;
    }
    if (info.type != Type::Missing)
        throw util::Error(EEXIST, "create file", f.path,
                          "exists and is " + describe(info) + "; refusing to replace it");
    util::logger().debug("file {} ({})", f.path, f.why);
    c.as_owner([&] {
        c.files.write_file_at(dir->get(), name, f.content, 0644);
        c.undo.push_back({Undo::Kind::RemoveFile, dir, name, f.path});
    });
}

}  // namespace gpubind::exec
