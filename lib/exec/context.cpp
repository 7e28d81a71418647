// The context the executor's steps share (context.hpp): the checks on what
// the plan names, the namespaces, the ids things are created as, the
// container's root and the rule for where gpubind may act in it.
#include "context.hpp"

#include <algorithm>
#include <cerrno>
#include <exception>

#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::exec {

void check_container_path(std::string_view p, std::string_view kind) {
    auto fail = [&](std::string_view why) {
        util::throw_invalid("execute", std::string(p), fmt::format("{} {} {}", kind, p, why));
    };
    if (!p.starts_with('/')) fail("is not an absolute path");
    if (p == "/") fail("is the root itself");
    for (std::string_view rest = p.substr(1);;) {
        const std::size_t slash = rest.find('/');
        const std::string_view c = rest.substr(0, slash);
        if (c.empty() || c == "." || c == "..") fail("has a '.', '..' or empty component");
        if (slash == std::string_view::npos) break;
        rest.remove_prefix(slash + 1);
    }
}

void check_name(const std::string& name, const std::string& what) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
        util::throw_invalid("execute", name, what + " is not a single file name");
}

std::vector<std::string> proc_relative(const std::string& host_path) {
    std::vector<std::string> parts;
    for (std::string_view c : util::split(host_path, '/'))
        if (!c.empty()) parts.emplace_back(c);
    for (std::size_t i = parts.size(); i-- > 1;) {
        if (parts[i - 1] == "driver" && parts[i] == "nvidia") {
            std::vector<std::string> rel(parts.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                         parts.end());
            if (rel.empty()) break;
            for (const auto& r : rel) check_name(r, "capability file " + host_path);
            return rel;
        }
    }
    util::throw_invalid("execute", host_path,
                        "capability file is not under a driver/nvidia directory");
}

std::string describe(const os::FileInfo& info) {
    std::string s(to_string(info.type));
    if (info.type == Type::CharDevice || info.type == Type::BlockDevice)
        s.append(" ")
            .append(std::to_string(info.major))
            .append(":")
            .append(std::to_string(info.minor));
    return s;
}

bool within(std::string_view p, std::string_view dir) {
    return p.starts_with(dir) && (p.size() == dir.size() || dir == "/" || p[dir.size()] == '/');
}

bool use_ldconfig(const decide::Plan& plan, const Target& target) {
    return target.ldcache == config::LdcacheMethod::Ldconfig || plan.ldcache_scan;
}

// --- namespaces ---

void Context::enter() {
    if (target.join_user_ns && !host.in_user_ns) {
        processes.enter_user_ns(host.user_ns.get());
        host.in_user_ns = true;
    }
    if (!target.in_place) processes.enter_mount_ns(host.container_ns.get());
    host.in_container = true;
}

void Context::leave() {
    // Nothing leads back out of a user namespace: the caller stays (and exits).
    if (host.in_user_ns) return;
    if (!target.in_place) processes.enter_mount_ns(host.own_ns.get());
    host.in_container = false;
    processes.change_dir(host.cwd.get());
}

// --- ids ---

void Context::switch_fs_ids(os::Owner to) {
    processes.set_fs_ids(to.uid, to.gid);
    fs_ids_switched_ = to != os::Owner{};
}

void Context::restore_fs_ids() noexcept {
    if (!fs_ids_switched_) return;
    try {
        switch_fs_ids({});
    } catch (const std::exception& e) {
        util::logger().error("cannot switch the file system ids back: {}", e.what());
    }
}

// --- inside the root ---

void Context::open_root() {
    root_ = std::make_shared<util::Fd>(files.open_root(target.rootfs));
    mounts.set_root(root_);
    mounts.find_fresh_tmpfs(host.fresh_candidates, host.host_mountinfo);
}

SharedFd Context::resolve_dir(std::string_view p) {
    if (SharedFd found = find_dir(p)) return found;
    util::Fd fd;
    SharedFd parent = resolve_dir(util::dir_name(p));
    std::string name(util::base_name(p));
    os::FileInfo info = files.stat_at(parent->get(), name);
    if (info.type == Type::Symlink)
        throw util::Error(ENOENT, "create directory", std::string(p),
                          "is a symbolic link that leads nowhere inside the container; "
                          "not following it");
    if (info.type != Type::Missing)
        throw util::Error(ENOTDIR, "create directory", std::string(p),
                          "exists and is " + describe(info));
    mounts.check(parent, p);
    as_owner([&] {
        fd = files.make_dir(parent->get(), name, 0755);
        undo.push_back({Undo::Kind::RemoveDir, parent, name, std::string(p)});
    });
    auto shared = std::make_shared<util::Fd>(std::move(fd));
    dirs_.emplace(p, shared);
    return shared;
}

SharedFd Context::find_dir(std::string_view p) {
    if (p == "/") return root_;
    auto it = dirs_.find(p);
    if (it != dirs_.end()) return it->second;
    util::Fd fd = files.open_dir_in_root(root_->get(), p);
    if (!fd) return {};
    auto shared = std::make_shared<util::Fd>(std::move(fd));
    dirs_.emplace(p, shared);
    return shared;
}

util::Fd Context::mount_point(const SharedFd& dir, const std::string& p, PointKind kind,
                              unsigned major, unsigned minor) {
    // Created first (O_CREAT|O_EXCL|O_NOFOLLOW, mkdirat): on a fresh root the
    // name is free, and no lookup needs to find nothing first. Whatever is
    // there already is looked at as before.
    const std::string name(util::base_name(p));
    const bool directory = kind == PointKind::Directory;
    util::Fd created;
    as_owner([&] {
        created = directory ? files.try_make_dir(dir->get(), name, 0755)
                            : files.try_make_file(dir->get(), name, 0644);
        if (created)
            undo.push_back(
                {directory ? Undo::Kind::RemoveDir : Undo::Kind::RemoveFile, dir, name, p});
    });
    if (created) return created;
    return mount_point(dir, p, kind, files.stat_at(dir->get(), name), major, minor);
}

util::Fd Context::mount_point(const SharedFd& dir, const std::string& p, PointKind kind,
                              os::FileInfo info, unsigned major, unsigned minor) {
    const std::string name(util::base_name(p));
    if (info.type == Type::Symlink && kind == PointKind::File) {
        // A link at a driver file's name (the image's, or one of an
        // earlier start): replaced by the mount point, never followed.
        replace_link(dir, p, "an empty mount point");
        info.type = Type::Missing;
    }
    bool ok = false;
    switch (info.type) {
        case Type::Missing: {
            // What we create is the mount point: its own descriptor, no
            // second lookup that something swapped in could answer.
            util::Fd created;
            as_owner([&] {
                const bool directory = kind == PointKind::Directory;
                created = directory ? files.make_dir(dir->get(), name, 0755)
                                    : files.make_file(dir->get(), name, 0644);
                undo.push_back(
                    {directory ? Undo::Kind::RemoveDir : Undo::Kind::RemoveFile, dir, name, p});
            });
            return created;
        }
        case Type::Regular:
            ok = kind != PointKind::Directory;
            break;
        case Type::Directory:
            ok = kind == PointKind::Directory;
            break;
        case Type::CharDevice:
            ok = kind == PointKind::Device && info.major == major && info.minor == minor;
            break;
        default:
            break;
    }
    if (!ok)
        throw util::Error(EEXIST, "create mount point", p,
                          "exists and is " + describe(info) + "; refusing to mount over it");
    util::Fd fd = files.open_at(dir->get(), name);
    // The inode we mount onto is the one just checked, not one swapped in meanwhile.
    os::FileInfo now = files.stat_fd(fd.get());
    if (now.type != info.type)
        throw util::Error(EEXIST, "create mount point", p,
                          "changed to " + describe(now) + " while being prepared");
    return fd;
}

void Context::bind(util::Fd& tree, const std::string& target_path, PointKind kind, unsigned flags,
                   unsigned major, unsigned minor) {
    SharedFd dir = resolve_dir(util::dir_name(target_path));
    mounts.check(dir, target_path);
    util::Fd point = mount_point(dir, target_path, kind, major, minor);
    // Flags go on the detached mount: it never appears without them.
    if (flags != 0) files.set_mount_flags(tree.get(), flags);
    files.attach(tree.get(), point.get());
    undo.push_back(
        {Undo::Kind::Detach, dir, std::string(util::base_name(target_path)), target_path});
    // A directory mounted over a path hides what was resolved below it.
    if (kind == PointKind::Directory) dirs_.clear();
}

void Context::replace_link(const SharedFd& dir, const std::string& p, const std::string& with) {
    const std::string name(util::base_name(p));
    std::string old = files.read_link_at(dir->get(), name);
    util::logger().info("{}: replaced the link to {} with {}", p, old, with);
    files.remove(dir->get(), name, false);
    undo.push_back({Undo::Kind::RestoreLink, dir, name, p, std::move(old)});
}

void Context::remove_file(const SharedFd& dir, const std::string& p, std::string old) {
    const std::string name(util::base_name(p));
    files.remove(dir->get(), name, false);
    forget(util::dir_name(p), name);
    undo.push_back({Undo::Kind::RestoreFile, dir, name, p, std::move(old)});
}

const DirListing& Context::listing(const SharedFd& dir, std::string_view path) {
    if (auto it = listings_.find(path); it != listings_.end()) return it->second;
    DirListing names;
    const os::DirNames listed =
        files.list_dir(dir->get(), kMaxDirEntries, [&](std::string_view name) {
            names.add(name);
            return false;  // kept here, in one buffer, not as a string each
        });
    if (listed.more)
        throw util::Error(util::ErrorKind::Invalid, E2BIG, "list directory", std::string(path),
                          fmt::format("has more than {} entries; refusing", kMaxDirEntries));
    names.sort();
    return listings_.emplace(std::string(path), std::move(names)).first->second;
}

void Context::forget(std::string_view dir_path, std::string_view name) {
    if (auto it = listings_.find(dir_path); it != listings_.end()) it->second.erase(name);
}

void DirListing::add(std::string_view name) {
    sorted_.push_back(static_cast<std::uint32_t>(bytes_.size()));
    (bytes_ += name) += '\0';
}

void DirListing::sort() {
    std::sort(sorted_.begin(), sorted_.end(),
              [&](std::uint32_t a, std::uint32_t b) { return name_at(a) < name_at(b); });
}

std::vector<std::uint32_t>::const_iterator DirListing::find(std::string_view name) const {
    const auto it =
        std::lower_bound(sorted_.begin(), sorted_.end(), name,
                         [&](std::uint32_t at, std::string_view n) { return name_at(at) < n; });
    return it != sorted_.end() && name_at(*it) == name ? it : sorted_.end();
}

bool DirListing::contains(std::string_view name) const {
    return find(name) != sorted_.end();
}

void DirListing::erase(std::string_view name) {
    if (const auto it = find(name); it != sorted_.end()) sorted_.erase(it);
}

// --- where gpubind may act ---

void OwnMounts::set_root(const SharedFd& root) {
    root_ = root;
    root_mount_ = sys_.mount_id(root->get());
}

// The mounts at Target::fresh_tmpfs's paths that are the container's own
// memory: a tmpfs no mount of the runtime's namespace (host_mountinfo)
// shows. Looked at before anything is mounted, so nothing of ours is
// what a path there resolves to.
void OwnMounts::find_fresh_tmpfs(const std::vector<std::string>& candidates,
                                 const util::Fd& host_mountinfo) {
    std::vector<std::uint64_t> ids;
    std::vector<std::pair<unsigned, unsigned>> devices;
    for (const std::string& at : candidates) {
        util::Fd top;
        try {
            top = sys_.open_dir_in_root(root_->get(), at);
        } catch (const util::Error& e) {
            util::logger().debug("{}: not taken as the runtime's tmpfs: {}", at, e.what());
            continue;
        }
        if (!top) continue;
        const auto device = sys_.tmpfs_device(top.get());
        if (!device) {
            util::logger().debug("{}: not a tmpfs", at);
            continue;
        }
        ids.push_back(sys_.mount_id(top.get()));
        devices.push_back(*device);
    }
    if (ids.empty()) return;
    // Read after the mounts were looked at: a host mount made meanwhile
    // is in it too.
    const std::vector<bool> shown = sys_.mountinfo_shows(host_mountinfo.get(), devices);
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (shown[i]) {
            util::logger().debug("mount {}: a tmpfs the runtime's namespace shows too", ids[i]);
            continue;
        }
        fresh_tmpfs_.insert(ids[i]);
    }
}

std::uint64_t OwnMounts::check(const SharedFd& dir, std::string_view p) {
    std::uint64_t id = 0;
    if (const char* why = problem(dir, p, id))
        throw util::Error(EXDEV, "refuse", std::string(p), why);
    return id;
}

bool OwnMounts::may_clean(const SharedFd& dir, std::string_view p) {
    std::uint64_t id = 0;
    const char* why = problem(dir, p, id);
    if (why) util::logger().debug("{}: left as it is: {}", p, why);
    return why == nullptr;
}

const char* OwnMounts::problem(const SharedFd& dir, std::string_view p, std::uint64_t& id) {
    // Asked once per directory descriptor: it pins its mount (and the
    // key keeps the descriptor, so no other takes its place meanwhile).
    auto [cached, fresh] = dir_mounts_.try_emplace(dir, 0);
    if (fresh) cached->second = sys_.mount_id(dir->get());
    id = cached->second;
    if (id != root_mount_) {
        // The path's first component: "dev" of "/dev/nvidia0".
        const std::string_view rest = p.substr(p.starts_with('/') ? 1 : 0);
        const std::string_view first = rest.substr(0, rest.find('/'));
        bool runtime_mount = false;
        if (first == "dev" || first == "proc") {
            auto& known = first == "dev" ? dev_mount_ : proc_mount_;
            if (!known) {
                util::Fd top = sys_.open_dir_in_root(root_->get(), util::join_path("/", first));
                known = top ? sys_.mount_id(top.get()) : root_mount_;
            }
            runtime_mount = id == *known;
        }
        if (!runtime_mount) runtime_mount = fresh_tmpfs_.contains(id);
        if (!runtime_mount)
            return "is on another mount than the container's root (a volume); gpubind "
                   "creates and mounts only on the rootfs's own mount";
    }
    auto [known, added] = shared_mounts_.try_emplace(id, false);
    if (added) {
        if (const auto shared = sys_.mount_shared(dir->get())) {
            known->second = *shared;
        } else {
            if (!mountinfo_) mountinfo_ = sys_.read_mountinfo();  // once per start
            known->second = os::mount_is_shared(*mountinfo_, id);
        }
    }
    if (known->second)
        return "is on a shared mount (rootfsPropagation or a shared /dev): what gpubind "
               "mounts there would propagate to its peers, the host's mount table "
               "among them";
    return nullptr;
}

}  // namespace gpubind::exec
