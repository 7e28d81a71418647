// execute(): the order of the steps and their rollback. Every system call
// goes through System (system_linux.cpp for the real one).
#include "gpubind/exec/exec.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpubind/exec/owned.hpp"
#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

#include "device_access.hpp"

namespace gpubind {

namespace {

using Type = FileInfo::Type;
using SharedFd = std::shared_ptr<Fd>;

constexpr unsigned kDeviceFlags = kMountNoSuid | kMountNoExec;  // not NoDev: they are devices
constexpr unsigned kProcFlags = kMountReadOnly | kMountNoSuid | kMountNoDev | kMountNoExec;
constexpr std::size_t kMaxPlannedFile = 64 * 1024;  // an existing file of the plan, read to compare
constexpr std::size_t kMaxDirEntries = 1u << 16;    // an image's library or binary directory

// A container path the plan names (`kind` says what it is: "device",
// "mount target", ...): absolute, no ".", ".." or empty components, not "/".
void check_container_path(std::string_view p, std::string_view kind) {
    auto fail = [&](std::string_view why) {
        throw_invalid("execute", std::string(p), fmt::format("{} {} {}", kind, p, why));
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

// A single file name from the node (a PCI bus id, a capability file's path
// component): no slash, not "." or "..".
void check_name(const std::string& name, const std::string& what) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
        throw_invalid("execute", name, what + " is not a single file name");
}

// Where a capability file (a host path under <proc root>/driver/nvidia) sits in the view.
std::vector<std::string> proc_relative(const std::string& host_path) {
    std::vector<std::string> parts;
    for (std::string_view c : split(host_path, '/'))
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
    throw_invalid("execute", host_path, "capability file is not under a driver/nvidia directory");
}

struct Undo {
    enum class Kind {
        RemoveFile,
        RemoveDir,
        Detach,
        Call,          // `call` (device access: a rule denied, a program swapped back)
        RestoreLink,   // a link gpubind removed comes back, pointing to `old`
        RestoreFile,   // a file gpubind removed comes back, holding `old`
        RenameBack,    // `other` renamed back to `name`
        ExchangeBack,  // `name` and `other` swapped back
        RestoreCache,  // the loader cache gpubind replaced comes back as it was
    };
    Kind kind;
    SharedFd fd;        // the parent directory
    std::string name;   // the entry in the directory
    std::string what;   // for the log: the container path or the cgroup file
    std::string old{};  // RestoreLink: the link's target; RestoreFile: the contents
    std::string
        other{};  // RenameBack, ExchangeBack: the entry `name` was renamed to / swapped with
    std::function<void()> call{};  // Call
    // RestoreCache: the loader cache we replaced goes back as it was.
    std::shared_ptr<const RegularFile> original{};
};

constexpr const char* kCache = "ld.so.cache";
constexpr const char* kCacheTemp = "ld.so.cache~";

class Executor {
  public:
    Executor(const Plan& plan, const Target& target, System& sys)
        : plan_(plan),
          target_(target),
          sys_(sys),
          devices_(sys, plan.devices, target.on_refused, target.bpf_dir) {}

    void run() {
        mark("");
        try {
            prepare_host();
            if (!in_container_) enter();
            root_ = std::make_shared<Fd>(sys_.open_root(target_.rootfs));
            root_mount_ = sys_.mount_id(root_->get());
            find_fresh_tmpfs();
            if (plan_.refresh_ldcache) in_context("loader cache", [&] { check_cache_files(); });
            mark("root");
            for (std::size_t i = 0; i < plan_.devices.size(); ++i) {
                const auto& d = plan_.devices[i];
                in_context("device " + d.node.path + " (" + d.why + ")", [&] { bind_device(i); });
            }
            mark("devices");
            for (std::size_t i = 0; i < plan_.mounts.size(); ++i) {
                const auto& m = plan_.mounts[i];
                in_context("mount " + m.target + " (" + m.why + ")", [&] { bind_mount(i); });
            }
            mark("mounts");
            for (const auto& link : plan_.symlinks)
                in_context("symlink " + link.path, [&] { make_link(link); });
            for (const auto& f : plan_.files)
                in_context("file " + f.path, [&] { write_planned_file(f); });
            mark("links and files");
            in_context("device cgroup", [&] {
                devices_.allow([&](const std::string& what, std::function<void()> undo) {
                    Undo u{Undo::Kind::Call, nullptr, {}, what};
                    u.call = std::move(undo);
                    undo_.push_back(std::move(u));
                });
            });
            mark("device cgroup");
            if (plan_.proc)
                in_context("proc view " + plan_.proc->target, [&] { mount_proc_view(); });
            mark("proc view");
            for (const auto& f : plan_.stale_files)
                in_context("file " + f.path, [&] { remove_stale_file(f); });
            for (const auto& owned : plan_.owned)
                in_context("driver names in " + owned.dir, [&] { bring_up_to_date(owned); });
            mark("owned names");
            if (plan_.refresh_ldcache)
                in_context(use_ldconfig() ? "ldconfig" : "loader cache",
                           [&] { refresh_ldcache(); });
            leave();
            mark("loader cache");
            if (timed_) {
                std::string text;
                for (std::size_t i = 1; i < marks_.size(); ++i)
                    text += fmt::format("{}{} {} us", i > 1 ? ", " : "", marks_[i].first,
                                        std::chrono::duration_cast<std::chrono::microseconds>(
                                            marks_[i].second - marks_[i - 1].second)
                                            .count());
                logger().debug("execution: {}", text);
            }
        } catch (...) {
            std::exception_ptr first = std::current_exception();
            rollback();
            std::rethrow_exception(first);
        }
    }

  private:
    // Where the time goes, at debug level only (tests/gpu/check.sh reads it).
    using Clock = std::chrono::steady_clock;
    const bool timed_ = logger().should_log(LogLevel::Debug);
    std::vector<std::pair<const char*, Clock::time_point>> marks_;
    void mark(const char* step) {
        if (timed_) marks_.emplace_back(step, Clock::now());
    }

    // Runs one item's steps; an Error says which item it was about.
    template <class F>
    static void in_context(const std::string& what, F&& step) {
        try {
            step();
        } catch (const Error& e) {
            throw Error(e.kind(), e.code().value(), what, {}, e.what());
        }
    }

    // --- host side ---

    void prepare_host() {
        const pid_t pid = target_.pid;
        const std::string who = "pid " + std::to_string(pid);
        if (pid <= 1) throw_invalid("execute", who, "refusing to act on pid <= 1");
        if (pid == ::getpid()) throw_invalid("execute", who, "refusing to act on this process");
        if (!target_.rootfs.is_absolute() || target_.rootfs.relative_path().empty())
            throw_invalid("execute", target_.rootfs.string(),
                          "the rootfs must be an absolute path other than /");
        validate_plan();
        // What the runtime's namespace shows, to tell the container's own
        // tmpfs from a host one: opened here, before any namespace is
        // entered, and only where a fresh tmpfs would take something of the plan
        // (containerd's /run; not the /dev every spec has, which is the
        // runtime's already): ~2 us per mount of the host's.
        for (const std::string& at : target_.fresh_tmpfs)
            if (!within(at, "/dev") && !within(at, "/proc") && plan_reaches(at))
                fresh_candidates_.push_back(at);
        if (!fresh_candidates_.empty()) host_mountinfo_ = sys_.open_mountinfo();

        pidfd_ = sys_.open_process(pid);
        container_ns_ = sys_.open_mount_ns(pidfd_.get(), pid);
        own_ns_ = sys_.open_own_mount_ns();
        prepare_owner(who);
        if (sys_.same_file(container_ns_.get(), own_ns_.get()))
            throw Error(EPERM, "execute", who,
                        "the container shares this process's mount namespace; refusing");
        mark("process and namespaces");
        if (target_.cgroups && !plan_.devices.empty()) devices_.prepare(pidfd_.get(), pid, who);
        mark("device cgroup prepared");
        // Rootless: the host's files are opened where this process may clone
        // mounts, the container's namespace before its pivot_root.
        if (target_.join_user_ns) enter();

        for (const auto& dev : plan_.devices) {
            if (!dev.bind) {  // cgroup access only
                device_trees_.emplace_back();
                continue;
            }
            Fd tree = sys_.open_tree(dev.node.host_path);
            FileInfo info = sys_.stat_fd(tree.get());
            if (info.type != Type::CharDevice || info.major != dev.node.major ||
                info.minor != dev.node.minor)
                throw Error(ErrorKind::Invalid, EINVAL, "bind device", dev.node.host_path,
                            "is " + describe(info) + ", not the character device " +
                                std::to_string(dev.node.major) + ":" +
                                std::to_string(dev.node.minor));
            device_trees_.push_back(std::move(tree));
        }
        for (const auto& m : plan_.mounts) {
            Fd tree = sys_.open_tree(m.source);
            FileInfo info = sys_.stat_fd(tree.get());
            if (m.directory != (info.type == Type::Directory))
                throw Error(m.directory ? ENOTDIR : EISDIR, "bind", m.source,
                            "is " + describe(info) + ", the plan wants " +
                                (m.directory ? "a directory" : "a file"));
            mount_trees_.push_back(std::move(tree));
        }
        if (plan_.proc) {
            for (const auto& cap : plan_.proc->capability_files) {
                Fd tree = sys_.open_tree(cap);
                FileInfo info = sys_.stat_fd(tree.get());
                if (info.type == Type::Directory)
                    throw Error(EISDIR, "bind", cap, "is a directory, not a file");
                cap_trees_.push_back(std::move(tree));
            }
        }
        if (plan_.refresh_ldcache && use_ldconfig())
            ldconfig_ = sys_.open_executable(target_.ldconfig);
        cwd_ = sys_.open_cwd();
        mark("driver files opened");
    }

    void validate_plan() {
        for (const auto& d : plan_.devices) {
            check_container_path(d.node.path, "device");
            if (d.bind && !d.node.host_path.starts_with('/'))
                throw_invalid("execute", d.node.host_path, "device source is not an absolute path");
        }
        for (const auto& m : plan_.mounts) {
            check_container_path(m.target, "mount target");
            if (!m.source.starts_with('/'))
                throw_invalid("execute", m.source, "mount source is not an absolute path");
        }
        for (const auto& s : plan_.symlinks) {
            check_container_path(s.path, "symlink");
            if (s.target.empty() || s.target.find('\0') != std::string::npos)
                throw_invalid("execute", s.path, "symlink has an empty target");
        }
        if (plan_.proc) {
            check_container_path(plan_.proc->target, "proc view");
            for (const auto& g : plan_.proc->gpus) check_name(g.bus_id, "GPU directory");
            for (const auto& c : plan_.proc->capability_files) proc_relative(c);
        }
        for (const auto& d : plan_.library_dirs)
            if (d != "/") check_container_path(d, "library directory");
    }

    // The container's root as the host sees it: a container with a user
    // namespace gets what we create owned by the ids its root maps to (an
    // unmapped root leaves them the host root's, "nobody" inside).
    void prepare_owner(const std::string& who) {
        if (target_.join_user_ns) {
            // What this process creates there is the container root's already.
            user_ns_ = sys_.open_user_ns(pidfd_.get(), target_.pid);
            return;
        }
        const auto uid =
            map_id(sys_.read_proc(pidfd_.get(), target_.pid, "uid_map"), 0, who + " uid_map");
        const auto gid =
            map_id(sys_.read_proc(pidfd_.get(), target_.pid, "gid_map"), 0, who + " gid_map");
        if (!uid || !gid) {
            logger().warn(
                "{}: the container's root is not mapped in its user namespace; "
                "what gpubind creates stays owned by the host's root",
                who);
            return;
        }
        owner_ = {*uid, *gid};
        chown_ = *uid != 0 || *gid != 0;
        if (chown_)
            logger().debug("{}: user namespace, its root is {}:{} on the host", who, *uid, *gid);
    }

    // Creates something in the root (and records its undo) as the container's
    // root: with the file system ids switched to its host ids, so that it is
    // theirs from the start (a file system the container mounted in its user
    // namespace, its /dev, refuses files of ids it cannot map: EOVERFLOW),
    // then switched back.
    template <class F>
    void as_owner(F&& create) {
        if (!chown_) {
            create();
            return;
        }
        sys_.set_fs_ids(owner_.uid, owner_.gid);
        fs_ids_switched_ = true;
        try {
            create();
        } catch (...) {
            // A caller may go on (the proc view's fallback): back to root's
            // ids now; should even that fail, rollback() tries again first.
            try {
                sys_.set_fs_ids(0, 0);
                fs_ids_switched_ = false;
            } catch (const std::exception& e) {
                logger().error("cannot switch the file system ids back: {}", e.what());
            }
            throw;
        }
        sys_.set_fs_ids(0, 0);
        fs_ids_switched_ = false;
    }

    static std::string describe(const FileInfo& info) {
        std::string s(to_string(info.type));
        if (info.type == Type::CharDevice || info.type == Type::BlockDevice)
            s += " " + std::to_string(info.major) + ":" + std::to_string(info.minor);
        return s;
    }

    // --- namespaces ---

    void enter() {
        if (target_.join_user_ns && !in_user_ns_) {
            sys_.enter_user_ns(user_ns_.get());
            in_user_ns_ = true;
        }
        sys_.enter_mount_ns(container_ns_.get());
        in_container_ = true;
    }

    void leave() {
        // Nothing leads back out of a user namespace: the caller stays (and exits).
        if (in_user_ns_) return;
        sys_.enter_mount_ns(own_ns_.get());
        in_container_ = false;
        sys_.change_dir(cwd_.get());
    }

    // --- inside the root ---

    // The directory `p` inside the root, created (one component at a time,
    // relative to its parent's descriptor) where missing.
    SharedFd resolve_dir(std::string_view p) {
        if (SharedFd found = find_dir(p)) return found;
        Fd fd;
        SharedFd parent = resolve_dir(dir_name(p));
        std::string name(base_name(p));
        FileInfo info = sys_.stat_at(parent->get(), name);
        if (info.type == Type::Symlink)
            throw Error(ENOENT, "create directory", std::string(p),
                        "is a symbolic link that leads nowhere inside the container; "
                        "not following it");
        if (info.type != Type::Missing)
            throw Error(ENOTDIR, "create directory", std::string(p),
                        "exists and is " + describe(info));
        check_own_mount(parent, p);
        as_owner([&] {
            fd = sys_.make_dir(parent->get(), name, 0755);
            undo_.push_back({Undo::Kind::RemoveDir, parent, name, std::string(p)});
        });
        auto shared = std::make_shared<Fd>(std::move(fd));
        dirs_.emplace(p, shared);
        return shared;
    }

    enum class PointKind { File, Directory, Device };

    // The inode to mount onto at dir/name (container path `p`): an existing
    // one of the right type, or a new empty file or directory.
    Fd mount_point(const SharedFd& dir, const std::string& p, PointKind kind, unsigned major = 0,
                   unsigned minor = 0) {
        return mount_point(dir, p, kind, sys_.stat_at(dir->get(), std::string(base_name(p))), major,
                           minor);
    }
    // The same where `info` is what stat_at found there just now.
    Fd mount_point(const SharedFd& dir, const std::string& p, PointKind kind, FileInfo info,
                   unsigned major = 0, unsigned minor = 0) {
        const std::string name(base_name(p));
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
                Fd created;
                as_owner([&] {
                    const bool directory = kind == PointKind::Directory;
                    created = directory ? sys_.make_dir(dir->get(), name, 0755)
                                        : sys_.make_file(dir->get(), name, 0644);
                    undo_.push_back(
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
            throw Error(EEXIST, "create mount point", p,
                        "exists and is " + describe(info) + "; refusing to mount over it");
        Fd fd = sys_.open_at(dir->get(), name);
        // The inode we mount onto is the one just checked, not one swapped in meanwhile.
        FileInfo now = sys_.stat_fd(fd.get());
        if (now.type != info.type)
            throw Error(EEXIST, "create mount point", p,
                        "changed to " + describe(now) + " while being prepared");
        return fd;
    }

    void bind(Fd& tree, const std::string& target, PointKind kind, unsigned flags,
              unsigned major = 0, unsigned minor = 0) {
        SharedFd dir = resolve_dir(dir_name(target));
        check_own_mount(dir, target);
        Fd point = mount_point(dir, target, kind, major, minor);
        // Flags go on the detached mount: it never appears without them.
        if (flags != 0) sys_.set_mount_flags(tree.get(), flags);
        sys_.attach(tree.get(), point.get());
        undo_.push_back({Undo::Kind::Detach, dir, std::string(base_name(target)), target});
        // A directory mounted over a path hides what was resolved below it.
        if (kind == PointKind::Directory) dirs_.clear();
    }

    void bind_device(std::size_t i) {
        const auto& dev = plan_.devices[i];
        if (!dev.bind) return;
        logger().debug("device {} -> {} ({})", dev.node.host_path, dev.node.path, dev.why);
        bind(device_trees_[i], dev.node.path, PointKind::Device, kDeviceFlags, dev.node.major,
             dev.node.minor);
    }

    void bind_mount(std::size_t i) {
        const auto& m = plan_.mounts[i];
        logger().debug("mount {} -> {} ({})", m.source, m.target, m.why);
        bind(mount_trees_[i], m.target, m.directory ? PointKind::Directory : PointKind::File,
             m.flags);
    }

    void make_link(const PlannedSymlink& link) {
        SharedFd dir = resolve_dir(dir_name(link.path));
        check_own_mount(dir, link.path);
        const std::string name(base_name(link.path));
        FileInfo info = sys_.stat_at(dir->get(), name);
        if (info.type == Type::Symlink) {
            std::string existing = sys_.read_link_at(dir->get(), name);
            if (existing == link.target) return;  // already there
            // Another driver version's link (an earlier start's, the image's):
            // removed through the directory, never followed, and made anew.
            replace_link(dir, link.path, "-> " + link.target);
        } else if (info.type == Type::Regular) {
            // The image's own file at the driver's name: the host's file the
            // link would lead to is mounted over it.
            const std::size_t i = planned_mount_behind(link);
            if (i == plan_.mounts.size())
                throw Error(EEXIST, "create symlink", link.path,
                            "exists and is " + describe(info) +
                                "; the plan mounts nothing it could be covered with");
            logger().info("{}: the image's own file, covered by the host's {}", link.path,
                          plan_.mounts[i].source);
            Fd copy = sys_.clone_tree(mount_trees_[i].get());
            bind(copy, link.path, PointKind::File, plan_.mounts[i].flags);
            return;
        } else if (info.type == Type::Directory) {
            throw Error(EISDIR, "create symlink", link.path,
                        "is a directory where the driver's link goes; refusing to replace it");
        } else if (info.type != Type::Missing) {
            throw Error(EEXIST, "create symlink", link.path, "exists and is " + describe(info));
        }
        as_owner([&] {
            sys_.make_symlink(link.target, dir->get(), name);
            undo_.push_back({Undo::Kind::RemoveFile, dir, name, link.path});
        });
    }

    // A file of the plan (CUDA compat's loader entry): its parent resolved
    // inside the root (created where missing), the file written with
    // O_CREAT|O_EXCL|O_NOFOLLOW. A regular file already there (a restarted
    // container keeps its rootfs) is left as it is; anything else is an Error.
    void write_planned_file(const PlannedFile& f) {
        check_container_path(f.path, "file");
        SharedFd dir = resolve_dir(dir_name(f.path));
        check_own_mount(dir, f.path);
        const std::string name(base_name(f.path));
        FileInfo info = sys_.stat_at(dir->get(), name);
        if (info.type == Type::Regular) {
            std::string old = sys_.read_regular_at(dir->get(), name, kMaxPlannedFile).data;
            if (old == f.content) {
                logger().debug("file {} is already there ({}); left as it is", f.path, f.why);
                return;
            }
            // gpubind's file, written by an earlier start: rewritten to this decision.
            logger().info("{}: rewritten ({})", f.path, f.why);
            remove_file(dir, f.path, std::move(old));
            info.type = Type::Missing;
        } else if (info.type == Type::Symlink) {
            replace_link(dir, f.path, "a file");
            info.type = Type::Missing;
        }
        if (info.type != Type::Missing)
            throw Error(EEXIST, "create file", f.path,
                        "exists and is " + describe(info) + "; refusing to replace it");
        logger().debug("file {} ({})", f.path, f.why);
        as_owner([&] {
            sys_.write_file_at(dir->get(), name, f.content, 0644);
            undo_.push_back({Undo::Kind::RemoveFile, dir, name, f.path});
        });
    }

    // Removes the link at `p` (its directory `dir`), never following it, and
    // records how to put it back; `with` says what takes its place (the log).
    void replace_link(const SharedFd& dir, const std::string& p, const std::string& with) {
        const std::string name(base_name(p));
        std::string old = sys_.read_link_at(dir->get(), name);
        logger().info("{}: replaced the link to {} with {}", p, old, with);
        sys_.remove(dir->get(), name, false);
        undo_.push_back({Undo::Kind::RestoreLink, dir, name, p, std::move(old)});
    }

    // The planned mount a planned link leads to, through other planned links
    // in its directory (libcuda.so -> libcuda.so.1 -> libcuda.so.<version>);
    // plan_.mounts.size() when none.
    std::size_t planned_mount_behind(const PlannedSymlink& link) const {
        const std::string_view dir = dir_name(link.path);
        std::string target = link.target;
        for (std::size_t hops = 0; hops <= plan_.symlinks.size(); ++hops) {
            if (target.find('/') != std::string::npos) break;
            const std::string p = join_path(dir, target);
            for (std::size_t i = 0; i < plan_.mounts.size(); ++i)
                if (plan_.mounts[i].target == p && !plan_.mounts[i].directory) return i;
            auto next = std::find_if(plan_.symlinks.begin(), plan_.symlinks.end(),
                                     [&](const PlannedSymlink& s) { return s.path == p; });
            if (next == plan_.symlinks.end()) break;
            target = next->target;
        }
        return plan_.mounts.size();
    }

    // A directory inside the root, not created: empty when missing.
    SharedFd find_dir(std::string_view p) {
        if (p == "/") return root_;
        auto it = dirs_.find(p);
        if (it != dirs_.end()) return it->second;
        Fd fd = sys_.open_dir_in_root(root_->get(), p);
        if (!fd) return {};
        auto shared = std::make_shared<Fd>(std::move(fd));
        dirs_.emplace(p, shared);
        return shared;
    }

    // A file an earlier start wrote that this plan does not: removed where it
    // holds exactly what gpubind wrote, left alone otherwise.
    void remove_stale_file(const PlannedFile& f) {
        check_container_path(f.path, "file");
        SharedFd dir = find_dir(dir_name(f.path));
        if (!dir || !may_clean(dir, f.path)) return;
        const std::string name(base_name(f.path));
        if (sys_.stat_at(dir->get(), name).type != Type::Regular) return;
        std::string old = sys_.read_regular_at(dir->get(), name, kMaxPlannedFile).data;
        if (old != f.content) return;
        logger().info("{}: removed ({})", f.path, f.why);
        remove_file(dir, f.path, std::move(old));
    }

    // Removes the regular file at `p` (in `dir`), never following it, and
    // records how to put it back: holding `old`.
    void remove_file(const SharedFd& dir, const std::string& p, std::string old) {
        const std::string name(base_name(p));
        sys_.remove(dir->get(), name, false);
        undo_.push_back({Undo::Kind::RestoreFile, dir, name, p, std::move(old)});
    }

    // The driver's names in one directory: what an earlier start or the image
    // left there that this plan does not put there itself (owned.hpp).
    void bring_up_to_date(const OwnedDir& owned) {
        check_container_path(owned.dir, "directory");
        SharedFd dir = find_dir(owned.dir);
        if (!dir || !may_clean(dir, owned.dir)) return;
        std::set<std::string> planned;
        for (const auto& m : plan_.mounts)
            if (dir_name(m.target) == owned.dir) planned.emplace(base_name(m.target));
        for (const auto& l : plan_.symlinks)
            if (dir_name(l.path) == owned.dir) planned.emplace(base_name(l.path));
        // Only the names that may be the driver's become strings: an image's
        // library directory holds hundreds of others.
        DirNames listed = list_names(
            dir, owned.dir, [&](std::string_view name) { return may_be_owned(owned, name); });
        std::vector<DirEntry> entries;
        for (auto& name : listed.names) {
            if (planned.count(name)) continue;
            FileInfo info = sys_.stat_at(dir->get(), name);
            std::string target;
            if (info.type == Type::Symlink) target = sys_.read_link_at(dir->get(), name);
            entries.push_back({std::move(name), info, std::move(target)});
        }
        for (const StaleEntry& e : stale_entries(owned, entries, planned)) {
            const std::string p = join_path(owned.dir, e.name);
            check_name(e.name, "entry of " + owned.dir);
            if (e.action == StaleEntry::Action::Cover) {
                const std::string with = join_path(owned.dir, e.cover_with);
                std::size_t i = 0;
                while (i < plan_.mounts.size() && plan_.mounts[i].target != with) ++i;
                if (i == plan_.mounts.size()) continue;
                logger().info("{}: {}", p, e.why);
                Fd copy = sys_.clone_tree(mount_trees_[i].get());
                bind(copy, p, PointKind::File, plan_.mounts[i].flags);
                continue;
            }
            const auto it = std::find_if(entries.begin(), entries.end(),
                                         [&](const DirEntry& d) { return d.name == e.name; });
            logger().info("{}: removed, {}", p, e.why);
            sys_.remove(dir->get(), e.name, false);
            if (it != entries.end() && it->info.type == Type::Symlink)
                undo_.push_back({Undo::Kind::RestoreLink, dir, e.name, p, it->link});
            else
                undo_.push_back({Undo::Kind::RestoreFile, dir, e.name, p, {}});
        }
    }

    void mount_proc_view() {
        const ProcView& view = *plan_.proc;
        std::string target = view.target;
        SharedFd dir = resolve_dir(dir_name(target));
        const std::uint64_t mount = check_own_mount(dir, target);
        // procfs has driver/nvidia only while the driver is loaded and
        // refuses new directories: on a host without it (a simulated node)
        // the tmpfs goes over the parent instead, holding the view. Known
        // beforehand on the runtime's /proc; learnt from the refusal elsewhere.
        const std::string name(base_name(target));
        const FileInfo there = sys_.stat_at(dir->get(), name);
        bool one_level_down = proc_mount_ && mount == *proc_mount_ && there.type == Type::Missing;
        Fd point;
        if (!one_level_down) {
            try {
                point = mount_point(dir, target, PointKind::Directory, there);
            } catch (const Error& e) {
                const int err = e.code().value();
                if (err != ENOENT && err != EPERM && err != EACCES && err != EROFS) throw;
                if (sys_.stat_at(dir->get(), name).type != Type::Missing) throw;
                one_level_down = true;
            }
        }
        if (one_level_down) {  // the view is the tmpfs's "nvidia" directory
            target = std::string(dir_name(target));
            dir = resolve_dir(dir_name(target));
            check_own_mount(dir, target);
            point = mount_point(dir, target, PointKind::Directory);
        }

        auto shared_fs = std::make_shared<Fd>(sys_.make_tmpfs());
        SharedFd base = shared_fs;
        if (one_level_down)
            base = std::make_shared<Fd>(
                sys_.make_dir(shared_fs->get(), std::string(base_name(view.target)), 0555));
        sys_.write_file_at(base->get(), "version", view.version, 0444);
        sys_.write_file_at(base->get(), "params", view.params, 0444);
        if (!view.gpus.empty()) {
            Fd gpus = sys_.make_dir(base->get(), "gpus", 0555);
            for (const auto& g : view.gpus) {
                Fd gdir = sys_.make_dir(gpus.get(), g.bus_id, 0555);
                sys_.write_file_at(gdir.get(), "information", g.information, 0444);
            }
        }
        // Empty files in the tmpfs for the capability files, bound once it is attached.
        std::map<std::string, SharedFd> tmp_dirs;
        struct CapPoint {
            SharedFd dir;
            std::string name;
            std::string container_path;
        };
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
                             .emplace(key,
                                      std::make_shared<Fd>(sys_.make_dir(cur->get(), rel[k], 0555)))
                             .first;
                cur = it->second;
            }
            sys_.make_file(cur->get(), rel.back(), 0444);
            std::string where = view.target;  // where it shows in the container either way
            for (const auto& r : rel) where = join_path(where, r);
            cap_points.push_back({cur, rel.back(), where});
        }
        sys_.set_mount_flags(shared_fs->get(), kProcFlags);
        sys_.attach(shared_fs->get(), point.get());
        undo_.push_back({Undo::Kind::Detach, dir, std::string(base_name(target)), target});
        for (std::size_t i = 0; i < cap_points.size(); ++i) {
            const CapPoint& cp = cap_points[i];
            Fd cpoint = sys_.open_at(cp.dir->get(), cp.name);
            sys_.set_mount_flags(cap_trees_[i].get(), kProcFlags);
            sys_.attach(cap_trees_[i].get(), cpoint.get());
            undo_.push_back({Undo::Kind::Detach, cp.dir, cp.name, cp.container_path});
        }
    }

    // The files ldconfig reads or writes under fixed names: missing or
    // regular files, else the container is refused before anything is done
    // (an image's block device named ld.so.cache~, a FIFO for ld.so.conf).
    // Each directory is opened once and each name looked at once per start:
    // what the cache refresh later needs (/etc's type, the cache's) is kept.
    void check_cache_files() {
        etc_type_ = check_etc();
        static const std::pair<const char*, std::vector<const char*>> kFiles[] = {
            {"/etc", {kCache, kCacheTemp, "ld.so.conf"}},
            {"/var/cache/ldconfig", {"aux-cache", "aux-cache~"}},
        };
        for (const auto& [dir_path, names] : kFiles) {
            if (dir_path == std::string_view("/etc") && etc_type_ == Type::Missing) continue;
            const SharedFd dir = find_dir(dir_path);
            if (!dir) continue;
            for (const char* name : names) {
                const FileInfo info = sys_.stat_at(dir->get(), name);
                if (info.type != Type::Missing && info.type != Type::Regular)
                    throw Error(ErrorKind::Invalid, EINVAL, "refresh the loader cache",
                                join_path(dir_path, name),
                                "is " + describe(info) + ", not a regular file; refusing");
                if (std::string_view(name) == kCache) cache_type_ = info.type;
                if (std::string_view(name) == kCacheTemp) cache_temp_type_ = info.type;
            }
        }
    }

    // --- the loader cache ---

    bool use_ldconfig() const {
        return target_.ldcache == LdcacheMethod::Ldconfig || plan_.ldcache_scan;
    }

    // /etc/ld.so.cache and what ldconfig writes it through are regular files
    // or missing, /etc a directory (or missing: the writer creates it,
    // ldconfig fails without it): anything else is refused here, before any
    // open, whichever method writes the cache. Null: no /etc for ldconfig.
    // /etc is a directory or missing.
    Type check_etc() {
        const FileInfo etc = sys_.stat_at(root_->get(), "etc");
        if (etc.type != Type::Directory && etc.type != Type::Missing)
            throw Error(
                ENOTDIR, "check", "/etc",
                "is " + describe(etc) + ", not a directory (refusing to write the cache there)");
        return etc.type;
    }

    // /etc, as check_cache_files() found it; null: no /etc for ldconfig.
    SharedFd cache_dir() {
        if (etc_type_ == Type::Missing && use_ldconfig()) return nullptr;
        return resolve_dir("/etc");
    }

    void refresh_ldcache() {
        SharedFd etc = cache_dir();
        if (use_ldconfig()) {
            run_ldconfig();
            return;
        }
        check_own_mount(etc, "/etc/ld.so.cache");
        // The image's cache, if any: read by descriptor, never following a link.
        std::optional<RegularFile> original;
        std::optional<ldcache::Cache> image;
        if (cache_type_ == Type::Regular) {
            original = sys_.read_regular_at(etc->get(), kCache, ldcache::kMaxCacheSize);
            try {
                image = ldcache::parse(original->data, "/etc/ld.so.cache");
            } catch (const Error& e) {
                logger().warn("{}; writing a cache of the injected libraries alone", e.what());
            }
        }
        // ldconfig rescans the refreshed directories: an image entry there
        // whose file is gone (an earlier start's driver file, removed above)
        // goes too. One listing per directory (a real image's cache names
        // hundreds of files there), never following anything.
        if (image) drop_gone_entries(*image);
        const std::size_t image_entries = image ? image->entries.size() : 0;
        const std::string bytes = ldcache::serialize(
            ldcache::merge(std::move(image), plan_.ldcache_libraries, plan_.library_dirs));
        // A leftover ld.so.cache~ (regular, checked above) gives way to ours.
        if (cache_temp_type_ == Type::Regular)
            as_owner([&] { sys_.remove(etc->get(), kCacheTemp, false); });
        // The new file is created as the container's root; it keeps the
        // original's owner (set by the host's root where that is someone else)
        // and permissions, or gets 0644 as ldconfig gives it.
        const Owner creator = chown_ ? owner_ : Owner{};
        const unsigned mode = original ? (original->mode & 0777) : 0644;
        std::optional<Owner> chown_to;
        if (original && (Owner{original->uid, original->gid} != creator) && !target_.join_user_ns)
            chown_to = Owner{original->uid, original->gid};
        logger().debug("loader cache: {} entries, {} bytes ({} injected)", image_entries,
                       bytes.size(), plan_.ldcache_libraries.size());
        if (chown_to)
            sys_.replace_file_at(etc->get(), kCacheTemp, kCache, bytes, mode, chown_to);
        else
            as_owner([&] {
                sys_.replace_file_at(etc->get(), kCacheTemp, kCache, bytes, mode, std::nullopt);
            });
        Undo undo{original ? Undo::Kind::RestoreCache : Undo::Kind::RemoveFile, etc, kCache,
                  "/etc/ld.so.cache"};
        if (original) undo.original = std::make_shared<const RegularFile>(std::move(*original));
        undo_.push_back(std::move(undo));
    }

    // ldconfig, confined (System::run), writes the cache into its own scratch
    // and reads the image without writing to it; the cache comes back here
    // and is put in place by descriptor.
    void run_ldconfig() {
        const std::string out = std::string(kLdconfigScratch) + "/" + std::string(kLdconfigOutput);
        std::vector<std::string> args = {"-r", target_.rootfs.string(), "-X", "-C", out};
        for (const auto& d : plan_.library_dirs) args.push_back(d);
        // The root of ldconfig's user namespace: the container's root where it
        // has a user namespace (its host ids; itself when rootless), else an
        // unprivileged host id (System::run).
        std::string cache;
        if (chown_)
            cache = sys_.run_as(owner_, ldconfig_.get(), target_.ldconfig.string(), args,
                                target_.ldconfig_timeout);
        else if (target_.join_user_ns)
            cache = sys_.run_as(Owner{}, ldconfig_.get(), target_.ldconfig.string(), args,
                                target_.ldconfig_timeout);
        else
            cache = sys_.run(ldconfig_.get(), target_.ldconfig.string(), args,
                             target_.ldconfig_timeout);
        install_cache(cache);
    }

    // /etc/ld.so.cache replaced: written under a new name (O_CREAT|O_EXCL|
    // O_NOFOLLOW) in /etc on the root's own mount, then renamed over a missing
    // one or exchanged with the image's (whose old contents are removed once
    // in place). Undone like the rest until then.
    void install_cache(const std::string& cache) {
        SharedFd etc = resolve_dir("/etc");
        check_own_mount(etc, "/etc/ld.so.cache");
        const std::string name = kCache;  // missing or regular (check_cache_files)
        const std::string temp = "ld.so.cache.gpubind-" + std::to_string(::getpid());
        as_owner([&] {
            sys_.write_file_at(etc->get(), temp, cache, 0644);
            undo_.push_back({Undo::Kind::RemoveFile, etc, temp, "/etc/" + temp});
        });
        if (cache_type_ == Type::Missing) {
            sys_.rename_at(etc->get(), temp, name);
            Undo back{Undo::Kind::RenameBack, etc, temp, "/etc/ld.so.cache"};
            back.other = name;
            undo_.push_back(std::move(back));
            return;
        }
        sys_.exchange_at(etc->get(), temp, name);
        Undo back{Undo::Kind::ExchangeBack, etc, temp, "/etc/ld.so.cache"};
        back.other = name;
        undo_.push_back(std::move(back));
        // The image's old cache, now under the temporary name.
        sys_.remove(etc->get(), temp, false);
        undo_.pop_back();
        undo_.pop_back();
    }

    // The names System::list_dir keeps of the container directory `dir`
    // (`path`): one with more than kMaxDirEntries entries refuses the start.
    DirNames list_names(const SharedFd& dir, std::string_view path, const NameFilter& keep) {
        DirNames listed = sys_.list_dir(dir->get(), kMaxDirEntries, keep);
        if (listed.more)
            throw Error(ErrorKind::Invalid, E2BIG, "list directory", std::string(path),
                        fmt::format("has more than {} entries; refusing", kMaxDirEntries));
        return listed;
    }

    // The image's cache entries for files of the refreshed library
    // directories that are no longer there, dropped: each directory listed
    // once, only the names the cache mentions kept.
    void drop_gone_entries(ldcache::Cache& image) {
        for (const auto& d : plan_.library_dirs) {
            std::set<std::string_view> named;
            for (const auto& e : image.entries)
                if (dir_name(e.path) == d) named.insert(base_name(e.path));
            if (named.empty()) continue;
            DirNames listed;
            if (const SharedFd dir = find_dir(d))
                listed = list_names(dir, d, [&](std::string_view n) { return named.contains(n); });
            // Views of `listed`: those of `named` point into the entries erase_if moves.
            const std::set<std::string_view> there(listed.names.begin(), listed.names.end());
            std::erase_if(image.entries, [&](const ldcache::Entry& e) {
                return dir_name(e.path) == d && !there.contains(base_name(e.path));
            });
        }
    }

    // What gpubind creates or mounts at `p` (in the directory `dir`) is on
    // the container root's own mount (the runtime's /dev and /proc for
    // paths there), never on a volume a host directory may be behind, and
    // never on a shared mount (what is mounted there would reach its peers,
    // the host's mount table among them).
    // Returns the directory's mount id.
    std::uint64_t check_own_mount(const SharedFd& dir, std::string_view p) {
        std::uint64_t id = 0;
        if (const char* why = own_mount_problem(dir, p, id))
            throw Error(EXDEV, "refuse", std::string(p), why);
        return id;
    }

    // Why gpubind may not create, mount or remove at `p` in `dir` (nullptr
    // when it may; `id` is then the directory's mount id): check_own_mount's
    // rule, for the steps that skip such a directory instead of refusing.
    const char* own_mount_problem(const SharedFd& dir, std::string_view p, std::uint64_t& id) {
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
                    Fd top = sys_.open_dir_in_root(root_->get(), join_path("/", first));
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
                known->second = mount_is_shared(*mountinfo_, id);
            }
        }
        if (known->second)
            return "is on a shared mount (rootfsPropagation or a shared /dev): what gpubind "
                   "mounts there would propagate to its peers, the host's mount table "
                   "among them";
        return nullptr;
    }

    // Whether gpubind may remove or replace names in `dir` (at `p`): a
    // directory on another mount (a volume) holds nothing of gpubind's, and
    // the container's own root may not be able to change it (a root-owned
    // host directory in a user-namespaced container): skipped, not refused.
    bool may_clean(const SharedFd& dir, std::string_view p) {
        std::uint64_t id = 0;
        const char* why = own_mount_problem(dir, p, id);
        if (why) logger().debug("{}: left as it is: {}", p, why);
        return why == nullptr;
    }

    // The mounts at Target::fresh_tmpfs's paths that are the container's own
    // memory: a tmpfs no mount of the runtime's namespace (host_mountinfo_)
    // shows. Looked at before anything is mounted, so nothing of ours is
    // what a path there resolves to.
    // Whether the normal path `p` is `dir` or lies below it.
    static bool within(std::string_view p, std::string_view dir) {
        return p.starts_with(dir) && (p.size() == dir.size() || dir == "/" || p[dir.size()] == '/');
    }

    // Whether the plan creates, mounts or writes anything at or below `at`.
    bool plan_reaches(std::string_view at) const {
        auto in = [&](std::string_view p) { return within(p, at); };
        return std::any_of(plan_.mounts.begin(), plan_.mounts.end(),
                           [&](const auto& m) { return in(m.target); }) ||
               std::any_of(plan_.symlinks.begin(), plan_.symlinks.end(),
                           [&](const auto& l) { return in(l.path); }) ||
               std::any_of(plan_.files.begin(), plan_.files.end(),
                           [&](const auto& f) { return in(f.path); }) ||
               std::any_of(plan_.stale_files.begin(), plan_.stale_files.end(),
                           [&](const auto& f) { return in(f.path); }) ||
               std::any_of(plan_.owned.begin(), plan_.owned.end(),
                           [&](const auto& o) { return in(o.dir); }) ||
               std::any_of(plan_.library_dirs.begin(), plan_.library_dirs.end(), in) ||
               (plan_.refresh_ldcache && in("/etc/ld.so.cache")) ||
               (plan_.proc && in(plan_.proc->target));
    }

    void find_fresh_tmpfs() {
        std::vector<std::uint64_t> ids;
        std::vector<std::pair<unsigned, unsigned>> devices;
        for (const std::string& at : fresh_candidates_) {
            Fd top;
            try {
                top = sys_.open_dir_in_root(root_->get(), at);
            } catch (const Error& e) {
                logger().debug("{}: not taken as the runtime's tmpfs: {}", at, e.what());
                continue;
            }
            if (!top) continue;
            const auto device = sys_.tmpfs_device(top.get());
            if (!device) {
                logger().debug("{}: not a tmpfs", at);
                continue;
            }
            ids.push_back(sys_.mount_id(top.get()));
            devices.push_back(*device);
        }
        if (ids.empty()) return;
        // Read after the mounts were looked at: a host mount made meanwhile
        // is in it too.
        const std::vector<bool> shown = sys_.mountinfo_shows(host_mountinfo_.get(), devices);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            if (shown[i]) {
                logger().debug("mount {}: a tmpfs the runtime's namespace shows too", ids[i]);
                continue;
            }
            fresh_tmpfs_.insert(ids[i]);
        }
    }

    // --- rollback ---

    void rollback() noexcept {
        if (fs_ids_switched_) {
            try {
                sys_.set_fs_ids(0, 0);
                fs_ids_switched_ = false;
            } catch (const std::exception& e) {
                logger().error("rollback: cannot switch the file system ids back: {}", e.what());
            }
        }
        // Undoing needs the container's namespace (umount2 acts on our own).
        if (!undo_.empty() && !in_container_) {
            try {
                enter();
            } catch (const std::exception& e) {
                logger().error("rollback: cannot re-enter the container's mount namespace: {}",
                               e.what());
            }
        }
        for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
            try {
                switch (it->kind) {
                    case Undo::Kind::Detach:
                        sys_.detach(it->fd->get(), it->name);
                        break;
                    case Undo::Kind::RemoveFile:
                        sys_.remove(it->fd->get(), it->name, false);
                        break;
                    case Undo::Kind::RemoveDir:
                        sys_.remove(it->fd->get(), it->name, true);
                        break;
                    case Undo::Kind::Call:
                        it->call();
                        break;
                    case Undo::Kind::RenameBack:
                        sys_.rename_at(it->fd->get(), it->other, it->name);
                        break;
                    case Undo::Kind::ExchangeBack:
                        sys_.exchange_at(it->fd->get(), it->name, it->other);
                        break;
                    case Undo::Kind::RestoreLink:
                        sys_.make_symlink(it->old, it->fd->get(), it->name);
                        break;
                    case Undo::Kind::RestoreFile:
                        sys_.write_file_at(it->fd->get(), it->name, it->old, 0644);
                        break;
                    case Undo::Kind::RestoreCache: {
                        const RegularFile& f = *it->original;
                        sys_.replace_file_at(it->fd->get(), kCacheTemp, it->name, f.data, f.mode,
                                             Owner{f.uid, f.gid});
                        break;
                    }
                }
            } catch (const std::exception& e) {
                logger().error("rollback: {}: {}", it->what, e.what());
            }
        }
        undo_.clear();
        if (in_container_) {
            try {
                leave();
            } catch (const std::exception& e) {
                logger().error("rollback: cannot return to the host's mount namespace: {}",
                               e.what());
            }
        }
    }

    const Plan& plan_;
    const Target& target_;
    System& sys_;

    Fd pidfd_, container_ns_, own_ns_, cwd_, ldconfig_;
    Fd user_ns_;               // the container's user namespace (Target::join_user_ns)
    bool in_user_ns_ = false;  // joined it: there is no way back
    Owner owner_;              // the host ids of the container's root
    bool chown_ = false;       // they are not 0:0: what we create is created as them
    bool fs_ids_switched_ = false;
    std::vector<Fd> device_trees_, mount_trees_, cap_trees_;
    DeviceAccess devices_;

    bool in_container_ = false;
    SharedFd root_;
    // What check_cache_files() found: /etc, /etc/ld.so.cache, /etc/ld.so.cache~.
    Type etc_type_ = Type::Missing, cache_type_ = Type::Missing, cache_temp_type_ = Type::Missing;
    std::uint64_t root_mount_ = 0;
    std::optional<std::uint64_t> dev_mount_, proc_mount_;
    std::vector<std::string> fresh_candidates_;  // Target::fresh_tmpfs the plan reaches into
    Fd host_mountinfo_;                          // the runtime's namespace's, when fresh_tmpfs asks
    std::set<std::uint64_t> fresh_tmpfs_;        // mount ids: tmpfs of the container's own
    std::map<std::uint64_t, bool> shared_mounts_;   // mount id -> shared (mountinfo), asked once
    std::map<SharedFd, std::uint64_t> dir_mounts_;  // directory -> its mount id, asked once
    std::optional<std::string> mountinfo_;          // the container namespace's, read once
    std::map<std::string, SharedFd, std::less<>> dirs_;  // container path -> directory
    std::vector<Undo> undo_;
};

}  // namespace

Target make_target(const Config& config, pid_t pid, std::filesystem::path rootfs) {
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

void execute(const Plan& plan, const Target& target, System& sys) {
    Executor(plan, target, sys).run();
}

void execute(const Plan& plan, const Target& target) {
    LinuxSystem sys;
    execute(plan, target, sys);
}

}  // namespace gpubind
