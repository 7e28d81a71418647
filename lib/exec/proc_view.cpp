// The proc view: a read-only tmpfs over /proc/driver/nvidia holding the
// driver's version and params, the container's GPUs' information files, and
// the capability files bound from the host (exec.hpp, step 4).
#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"

#include "context.hpp"

namespace gpubind::exec {

namespace {

constexpr unsigned kProcFlags =
    util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec;

// An empty file in the tmpfs where a capability file is bound once it is attached.
struct CapPoint {
    SharedFd dir;
    std::string name;
    std::string container_path;
};

// Where the tmpfs is attached: `point` at the container path `target` in
// `dir`; `one_level_down` when that is the parent of the view's path.
struct ViewPoint {
    util::Fd point;
    SharedFd dir;
    std::string target;
    bool one_level_down = false;
};

// The mount point at view.target, or (the tmpfs then going over the parent)
// at its parent. procfs has driver/nvidia only while the driver is loaded
// and refuses new directories: on a host without it (a simulated node) the
// tmpfs goes over the parent instead, holding the view. Known beforehand on
// the runtime's /proc; learnt from the refusal elsewhere.
ViewPoint view_point(Context& c, const std::string& view_target) {
    ViewPoint v{{}, c.resolve_dir(util::dir_name(view_target)), view_target};
    const std::uint64_t mount = c.mounts.check(v.dir, v.target);
    const std::string name(util::base_name(v.target));
    const os::FileInfo there = c.files.stat_at(v.dir->get(), name);
    v.one_level_down = c.mounts.is_runtime_proc(mount) && there.type == Type::Missing;
    if (!v.one_level_down) {
        try {
            v.point = c.mount_point(v.dir, v.target, Context::PointKind::Directory, there);
            return v;
        } catch (const util::Error& e) {
            const int err = e.code().value();
            if (err != ENOENT && err != EPERM && err != EACCES && err != EROFS) throw;
            if (c.files.stat_at(v.dir->get(), name).type != Type::Missing) throw;
            v.one_level_down = true;
        }
    }
    // The view is the tmpfs's "nvidia" directory.
    v.target = std::string(util::dir_name(v.target));
    v.dir = c.resolve_dir(util::dir_name(v.target));
    c.mounts.check(v.dir, v.target);
    v.point = c.mount_point(v.dir, v.target, Context::PointKind::Directory);
    return v;
}

// The view's files written into `base` (a directory of the new tmpfs), and
// the empty files the capability files are bound onto.
std::vector<CapPoint> fill_view(Context& c, const decide::ProcView& view, const SharedFd& base) {
    c.files.write_file_at(base->get(), "version", view.version, 0444);
    c.files.write_file_at(base->get(), "params", view.params, 0444);
    if (!view.gpus.empty()) {
        util::Fd gpus = c.files.make_dir(base->get(), "gpus", 0555);
        for (const auto& g : view.gpus) {
            util::Fd gdir = c.files.make_dir(gpus.get(), g.bus_id, 0555);
            c.files.write_file_at(gdir.get(), "information", g.information, 0444);
        }
    }
    std::map<std::string, SharedFd> tmp_dirs;
    std::vector<CapPoint> cap_points;
    for (const auto& cap : view.capability_files) {
        std::vector<std::string> rel = proc_relative(cap);
        SharedFd cur = base;
        std::string key;
        for (std::size_t k = 0; k + 1 < rel.size(); ++k) {
            key += "/" + rel[k];
            auto it = tmp_dirs.find(key);
            if (it == tmp_dirs.end())
                it = tmp_dirs
                         .emplace(key, std::make_shared<util::Fd>(
                                           c.files.make_dir(cur->get(), rel[k], 0555)))
                         .first;
            cur = it->second;
        }
        c.files.make_file(cur->get(), rel.back(), 0444);
        std::string where = view.target;  // where it shows in the container either way
        for (const auto& r : rel) where = util::join_path(where, r);
        cap_points.push_back({cur, rel.back(), where});
    }
    return cap_points;
}

}  // namespace

void mount_proc_view(Context& c) {
    const decide::ProcView& view = *c.plan.proc;
    const ViewPoint at = view_point(c, view.target);

    auto shared_fs = std::make_shared<util::Fd>(c.files.make_tmpfs());
    SharedFd base = shared_fs;
    if (at.one_level_down)
        base = std::make_shared<util::Fd>(
            c.files.make_dir(shared_fs->get(), std::string(util::base_name(view.target)), 0555));
    const std::vector<CapPoint> cap_points = fill_view(c, view, base);
    c.files.set_mount_flags(shared_fs->get(), kProcFlags);
    c.files.attach(shared_fs->get(), at.point.get());
    c.undo.push_back(
        {Undo::Kind::Detach, at.dir, std::string(util::base_name(at.target)), at.target});
    for (std::size_t i = 0; i < cap_points.size(); ++i) {
        const CapPoint& cp = cap_points[i];
        util::Fd cpoint = c.files.open_at(cp.dir->get(), cp.name);
        c.files.set_mount_flags(c.host.cap_trees[i].get(), kProcFlags);
        c.files.attach(c.host.cap_trees[i].get(), cpoint.get());
        c.undo.push_back({Undo::Kind::Detach, cp.dir, cp.name, cp.container_path});
    }
}

}  // namespace gpubind::exec
