// What the steps of one execution share: the plan and the target, the
// process and namespaces the host side opened, the container's root (its
// directories resolved once, what may be created where), the ids things
// are created as, the undo list and the timing. exec.cpp runs the steps in
// order (host.cpp, place.cpp, leftovers.cpp, proc_view.cpp,
// loader_cache.cpp) and rolls back; every system call goes through System.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpubind/decide/plan.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/os/system.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/timing.hpp"

namespace gpubind::ldcache {
struct Cache;
}  // namespace gpubind::ldcache

namespace gpubind::exec {

class DeviceAccess;

using Type = os::FileInfo::Type;
using SharedFd = std::shared_ptr<util::Fd>;

inline constexpr std::size_t kMaxPlannedFile = 64 * 1024;  // an existing file of the plan
inline constexpr std::size_t kMaxDirEntries = 1u << 16;    // an image's library directory

// A container path the plan names (`kind` says what it is: "device",
// "mount target", ...): absolute, no ".", ".." or empty components, not "/".
void check_container_path(std::string_view p, std::string_view kind);
// A single file name from the node (a PCI bus id, a capability file's path
// component): no slash, not "." or "..".
void check_name(const std::string& name, const std::string& what);
// Where a capability file (a host path under <proc root>/driver/nvidia) sits in the view.
std::vector<std::string> proc_relative(const std::string& host_path);
// "character device 195:0", "directory", ...
std::string describe(const os::FileInfo& info);
// Whether the normal path `p` is `dir` or lies below it.
bool within(std::string_view p, std::string_view dir);
// Whether the loader cache is made by the host's ldconfig (not gpubind's writer).
bool use_ldconfig(const decide::Plan& plan, const Target& target);

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
    SharedFd fd;          // the parent directory
    std::string name;     // the entry in the directory
    std::string what;     // for the log: the container path or the cgroup file
    std::string old{};    // RestoreLink: the link's target; RestoreFile: the contents
    std::string other{};  // RenameBack, ExchangeBack: the entry `name` was renamed to / swapped
                          // with; RestoreCache: the temporary name it is written through
    std::function<void()> call{};  // Call
    // RestoreCache: the loader cache we replaced goes back as it was.
    std::shared_ptr<const os::RegularFile> original{};
};

// Runs one item's steps; an Error says which item it was about. `what`
// (text, or a callable making it) is made only then: a start names no item
// it does not fail on.
template <class What, class F>
void in_context(What&& what, F&& step) {
    try {
        step();
    } catch (const util::Error& e) {
        if constexpr (std::is_invocable_v<What>)
            throw util::Error(e.kind(), e.code().value(), std::string(what()), {}, e.what());
        else
            throw util::Error(e.kind(), e.code().value(), std::string(what), {}, e.what());
    }
}

inline constexpr const char* kCache = "ld.so.cache";
inline constexpr const char* kCacheTemp = "ld.so.cache~";

// The names in one directory, in one buffer (Context::listing).
class DirListing {
  public:
    void add(std::string_view name);
    void sort();  // after the last add(), before contains()
    bool contains(std::string_view name) const;
    void erase(std::string_view name);
    template <class F>
    void for_each(F&& f) const {
        for (const std::uint32_t at : sorted_) f(name_at(at));
    }

  private:
    // Where `name` is in sorted_; its end when not there.
    std::vector<std::uint32_t>::const_iterator find(std::string_view name) const;
    std::string_view name_at(std::uint32_t at) const {
        return std::string_view(bytes_.data() + at);  // each name ends with a NUL
    }
    std::string bytes_;
    std::vector<std::uint32_t> sorted_;  // where each name starts, in name order
};

// What the host side opened: the process, the namespaces, the sources.
struct Host {
    util::Fd pidfd, container_ns, own_ns, cwd, ldconfig;
    util::Fd user_ns;         // the container's user namespace (Target::join_user_ns)
    bool in_user_ns = false;  // joined it: there is no way back
    bool in_container = false;
    std::vector<util::Fd> device_trees, mount_trees, cap_trees;  // one per planned item
    std::vector<std::string> fresh_candidates;  // Target::fresh_tmpfs the plan reaches into
    util::Fd host_mountinfo;  // the runtime's namespace's, when fresh_candidates has any
};

// The rule for where gpubind may create, mount or remove: on the container
// root's own mount (the runtime's /dev and /proc for paths there, a fresh
// tmpfs of the container's own), never on a shared mount. Each mount is asked
// about once per start.
class OwnMounts {
  public:
    explicit OwnMounts(os::SystemFiles& sys) : sys_(sys) {}

    // The root just opened, and the tmpfs at `candidates` that are the
    // container's own memory (no mount of `host_mountinfo` shows them).
    void set_root(const SharedFd& root);
    void find_fresh_tmpfs(const std::vector<std::string>& candidates,
                          const util::Fd& host_mountinfo);

    // What gpubind creates or mounts at `p` (in the directory `dir`) is on
    // the container root's own mount, never on a volume a host directory may
    // be behind, and never on a shared mount (what is mounted there would
    // reach its peers, the host's mount table among them). Returns the
    // directory's mount id.
    std::uint64_t check(const SharedFd& dir, std::string_view p);
    // Whether gpubind may remove or replace names in `dir` (at `p`): a
    // directory on another mount (a volume) holds nothing of gpubind's, and
    // the container's own root may not be able to change it (a root-owned
    // host directory in a user-namespaced container): skipped, not refused.
    bool may_clean(const SharedFd& dir, std::string_view p);
    // Whether mount `id` is the runtime's /proc (known once check() looked there).
    bool is_runtime_proc(std::uint64_t id) const { return proc_mount_ && id == *proc_mount_; }

  private:
    // Why check() refuses (nullptr when it does not; `id` is then the
    // directory's mount id).
    const char* problem(const SharedFd& dir, std::string_view p, std::uint64_t& id);

    os::SystemFiles& sys_;
    SharedFd root_;
    std::uint64_t root_mount_ = 0;
    std::optional<std::uint64_t> dev_mount_, proc_mount_;
    std::set<std::uint64_t> fresh_tmpfs_;           // mount ids: tmpfs of the container's own
    std::map<std::uint64_t, bool> shared_mounts_;   // mount id -> shared (mountinfo), asked once
    std::map<SharedFd, std::uint64_t> dir_mounts_;  // directory -> its mount id, asked once
    std::optional<std::string> mountinfo_;          // the container namespace's, read once
};

class Context {
  public:
    Context(const decide::Plan& plan_in, const Target& target_in, os::System& sys_in)
        : plan(plan_in),
          target(target_in),
          sys(sys_in),
          files(sys_in),
          processes(sys_in),
          mounts(sys_in) {}

    const decide::Plan& plan;
    const Target& target;
    // The one System of the start, and the parts of it the steps use: the
    // files and mounts (the root, the mounts, the loader cache, the proc
    // view, the rollback) and the processes and namespaces (the host side,
    // entering and leaving, file system ids, ldconfig). Device access takes
    // its own parts (DeviceAccess).
    os::System& sys;
    os::SystemFiles& files;
    os::SystemProcesses& processes;
    Host host;
    OwnMounts mounts;
    util::Timing timing;
    std::vector<Undo> undo;

    // --- namespaces ---
    void enter();
    void leave();

    // --- the ids what is created belongs to ---
    // The container's root as the host sees it (a container with a user
    // namespace gets what we create owned by the ids its root maps to).
    void set_owner(os::Owner owner) { owner_ = owner; }
    const os::Owner& owner() const { return owner_; }
    // Whether what we create is created as other ids than root's.
    bool chown() const { return owner_ != os::Owner{}; }
    // Creates something in the root (and records its undo) as the container's
    // root: with the file system ids switched to its host ids, so that it is
    // theirs from the start (a file system the container mounted in its user
    // namespace, its /dev, refuses files of ids it cannot map: EOVERFLOW),
    // then switched back.
    template <class F>
    void as_owner(F&& create) {
        if (!chown()) {
            create();
            return;
        }
        switch_fs_ids(owner_);
        try {
            create();
        } catch (...) {
            // A caller may go on (the proc view's fallback): back to root's
            // ids now; should even that fail, rollback tries again first.
            restore_fs_ids();
            throw;
        }
        switch_fs_ids({});
    }
    // Back to root's file system ids if a creation left them switched (rollback).
    void restore_fs_ids() noexcept;

    // --- inside the root ---
    void open_root();
    // The directory `p` inside the root, created (one component at a time,
    // relative to its parent's descriptor) where missing.
    SharedFd resolve_dir(std::string_view p);
    // A directory inside the root, not created: empty when missing.
    SharedFd find_dir(std::string_view p);
    const SharedFd& root() const { return root_; }

    enum class PointKind { File, Directory, Device };
    // The inode to mount onto at dir/name (container path `p`): an existing
    // one of the right type, or a new empty file or directory.
    util::Fd mount_point(const SharedFd& dir, const std::string& p, PointKind kind,
                         unsigned major = 0, unsigned minor = 0);
    // The same where `info` is what stat_at found there just now.
    util::Fd mount_point(const SharedFd& dir, const std::string& p, PointKind kind,
                         os::FileInfo info, unsigned major = 0, unsigned minor = 0);
    // The detached mount `tree` attached at `target` (flags set on it first).
    void bind(util::Fd& tree, const std::string& target, PointKind kind, unsigned flags,
              unsigned major = 0, unsigned minor = 0);
    // Removes the link at `p` (its directory `dir`), never following it, and
    // records how to put it back; `with` says what takes its place (the log).
    void replace_link(const SharedFd& dir, const std::string& p, const std::string& with);
    // Removes the regular file at `p` (in `dir`), never following it, and
    // records how to put it back: holding `old`.
    void remove_file(const SharedFd& dir, const std::string& p, std::string old);
    // The names in the container directory `dir` (`path`), listed once per
    // start: the driver's names there and the loader cache's entries are
    // both checked against one listing (an image's library directory holds
    // hundreds). A directory with more than kMaxDirEntries entries refuses
    // the start. What remove_file() and forget() take out is taken out of
    // the listing too.
    const DirListing& listing(const SharedFd& dir, std::string_view path);
    // `name` removed from `dir_path` by the caller.
    void forget(std::string_view dir_path, std::string_view name);

  private:
    void switch_fs_ids(os::Owner to);

    os::Owner owner_;  // the host ids of the container's root
    bool fs_ids_switched_ = false;
    SharedFd root_;
    std::map<std::string, SharedFd, std::less<>> dirs_;        // container path -> directory
    std::map<std::string, DirListing, std::less<>> listings_;  // container path -> names
};

// The steps, in the order exec.cpp runs them.

// host.cpp: before anything changes, from the host: the plan checked, the
// process pinned, its namespaces and ids, device access prepared, every
// source opened and checked.
void prepare_host(Context& c, DeviceAccess& devices);

// place.cpp: the plan's devices, mounts, links and files.
void bind_device(Context& c, std::size_t i);
void bind_mount(Context& c, std::size_t i);
void make_link(Context& c, const decide::PlannedSymlink& link);
void write_planned_file(Context& c, const decide::PlannedFile& f);

// leftovers.cpp: what an earlier start or the image left that this plan does not want.
void remove_stale_file(Context& c, const decide::PlannedFile& f);
void bring_up_to_date(Context& c, const decide::OwnedDir& owned);

// proc_view.cpp: the tmpfs over /proc/driver/nvidia.
void mount_proc_view(Context& c);

// loader_cache.cpp: /etc/ld.so.cache, checked before anything is done and
// refreshed last.
class LoaderCache {
  public:
    explicit LoaderCache(Context& c) : c_(c) {}
    // The files ldconfig reads or writes under fixed names: missing or
    // regular files, else the container is refused before anything is done.
    void check_files();
    void refresh();

  private:
    Type check_etc();
    SharedFd cache_dir();
    void run_ldconfig();
    void install_cache(const std::string& cache);
    void drop_gone_entries(ldcache::Cache& image);
    static std::string own_temp_name();

    Context& c_;
    // What check_files() found: /etc, /etc/ld.so.cache, /etc/ld.so.cache~.
    Type etc_type_ = Type::Missing, cache_type_ = Type::Missing, cache_temp_type_ = Type::Missing;
};

}  // namespace gpubind::exec
