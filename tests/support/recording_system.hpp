// A System that acts on an in-memory model of the host and the container
// instead of the kernel, and records every call as a line of text, for
// testing execute()'s order and rollback without root.
//
// Descriptors it hands out are real (each a /dev/null descriptor, so that Fd
// can close them), labelled with what they stand for: "root:/usr/lib" (a
// directory inside the container root), "tree:/host/x" (a detached bind mount
// of a host path), "tmpfs:/gpus" (a directory in the proc view tmpfs),
// "ns:container", "ns:own", "cgroup:<file>", "pidfd", "cwd", "exe:<path>",
// "cgroupdir:<dir>" (a cgroup v2 directory), "prog:<id>" (a device program),
// "progdir:<dir>" (the directory of kept device programs).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpubind/exec/exec.hpp"
#include "gpubind/os/system.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::test {

// A pid that is neither init nor this process (execute() refuses both).
inline pid_t fake_pid() {
    return ::getpid() == 4242 ? 4243 : 4242;
}

// The container the recording tests act on: rootfs /rootfs. The cache is
// refreshed by the ldconfig method (the tests follow its run); the writer's
// own tests (exec_test.cpp, LoaderCache) ask for LdcacheMethod::Gpubind.
inline exec::Target recording_target() {
    exec::Target t;
    t.pid = fake_pid();
    t.rootfs = "/rootfs";
    t.ldcache = config::LdcacheMethod::Ldconfig;
    return t;
}

class RecordingSystem : public os::System {
  public:
    using Type = os::FileInfo::Type;

    struct Mount {
        std::string source;  // label of what was attached ("tree:/host/x", "tmpfs")
        unsigned flags = 0;  // MountFlag bits set on it before or after attaching
    };

    // --- The model ---
    std::map<std::string, os::FileInfo> host;  // host paths open_tree and friends find
    std::map<std::string, os::FileInfo> root{{"/", {Type::Directory, 0, 0}}};  // container paths
    std::map<std::string, std::string> links;     // container symlink -> target
    std::map<std::string, os::FileInfo> tmpfs;    // the proc view: "/version", "/gpus", ...
    std::map<std::string, std::string> contents;  // files written: "tmpfs:/version" -> text
    std::map<std::string, Mount> mounted;         // container path (or "tmpfs:/x") -> mount
    std::set<std::string> allowed;                // device rules now allowed (allow - deny)
    std::vector<std::string> ldconfig_args;       // of the last run
    std::string ldconfig_output = "glibc-ld.so.cache1.1";  // the cache a run returns
    std::map<std::string, std::uint64_t> mount_ids;  // label prefix ("root:/data") -> mount id
    std::set<std::uint64_t> shared_mounts;           // mount ids whose propagation is shared
    std::string proc_cgroup = "5:devices:/ctr\n0::/\n";
    // The container's /proc/<pid>/uid_map and gid_map: no user namespace of its own.
    std::string uid_map = "         0          0 4294967295\n";
    std::string gid_map = "         0          0 4294967295\n";
    std::string fs_ids = "0:0";                 // set by set_fs_ids
    std::map<std::string, std::string> owners;  // "root:/x" -> fs_ids when created, if not 0:0
    std::string run_as_owner;                   // "uid:gid" of the last run_as
    struct Attr {
        os::Owner owner;
        unsigned mode = 0644;
    };
    std::map<std::string, Attr> attrs;  // "root:/etc/ld.so.cache" -> owner, mode (regular files)
    std::string mountinfo =
        "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n";
    std::string devices_list = "c 1:3 rwm\n";
    // cgroup v2: the device programs attached to the container's cgroup (one
    // cgroup in the model) and every program known, by id.
    os::DevicePrograms device_programs{os::kBpfAllowMulti, {}};
    std::map<std::uint32_t, std::vector<os::bpf::Insn>> programs;
    std::map<std::uint32_t, std::string> program_names;
    std::uint32_t next_program_id = 1000;
    // Kept device programs (bpffs): path -> program id; what open_program_dir
    // fails with (an errno), 0 when the directory is usable.
    std::map<std::string, std::uint32_t> kept_programs;
    int program_dir_errno = 0;
    bool program_dir_taken = false;  // there, but made by another user
    bool shares_namespace = false;   // the container is in our mount namespace
    bool host_namespace = false;     // ours is pid 1's (the host's)
    bool in_container = false;       // which mount namespace we are in
    bool in_user_ns = false;         // joined the container's user namespace (rootless)
    // The rootfs's path is the host's too (a runtime's bundle before its
    // pivot_root): until the first enter_mount_ns, the container's side may
    // be read from the host's (a start's decision inspects the image there).
    bool image_from_host = false;
    bool entered = false;  // enter_mount_ns was called

    // --- The record ---
    std::vector<std::string> calls;
    // Calls for which this returns true fail with Error(EIO, "injected", line).
    std::function<bool(std::size_t index, const std::string& line)> fail_if;
    int fail_errno = EIO;  // the errno of those failures

    void fail_at(std::size_t k) {
        fail_if = [k](std::size_t i, const std::string&) { return i == k; };
    }

    // --- System ---

    util::Fd open_process(pid_t pid) override {
        call("open_process " + std::to_string(pid), false);
        return make("pidfd");
    }
    util::Fd open_mount_ns(int, pid_t pid) override {
        call("open_mount_ns " + std::to_string(pid), false);
        return make(pid == 1 ? "ns:init" : "ns:container");
    }
    std::string read_proc(int, pid_t pid, const std::string& name) override {
        call("read_proc " + std::to_string(pid) + " " + name, false);
        if (name == "uid_map") return uid_map;
        if (name == "gid_map") return gid_map;
        return name == "cgroup" ? proc_cgroup : std::string();
    }
    util::Fd open_user_ns(int, pid_t pid) override {
        call("open_user_ns " + std::to_string(pid), false);
        return make("ns:user");
    }
    void enter_user_ns(int fd) override {
        call("enter_user_ns " + label(fd), false);
        in_user_ns = true;
    }
    util::Fd open_own_mount_ns() override {
        call("open_own_mount_ns", false);
        return make("ns:own");
    }
    util::Fd open_cwd() override {
        call("open_cwd", in_user_ns ? std::optional<bool>() : false);
        return make("cwd");
    }
    bool same_file(int a, int b) override {
        call("same_file " + label(a) + " " + label(b), false);
        const std::string la = label(a), lb = label(b);
        if (la == "ns:init" || lb == "ns:init")
            return host_namespace && (la == "ns:own" || lb == "ns:own");
        return shares_namespace || la == lb;
    }
    std::string read_host_file(const std::filesystem::path& p) override {
        call("read_host_file " + p.string(), false);
        if (p == "/proc/self/mountinfo") return mountinfo;
        if (p.filename() == "devices.list") return devices_list;
        throw util::Error(ENOENT, "read", p.string());
    }
    util::Fd open_tree(const std::filesystem::path& p) override {
        // Rootless, the host's files are opened in the container's namespace.
        call("open_tree " + p.string(), in_user_ns ? std::optional<bool>() : false);
        if (!host.count(p.string())) throw util::Error(ENOENT, "open mount source", p.string());
        return make("tree:" + p.string());
    }
    util::Fd open_executable(const std::filesystem::path& p) override {
        call("open_executable " + p.string(), in_user_ns ? std::optional<bool>() : false);
        return make("exe:" + p.string());
    }
    util::Fd open_cgroup_file(const std::filesystem::path& dir, const std::string& name) override {
        call("open_cgroup_file " + (dir / name).string(), false);
        return make("cgroup:" + (dir / name).string());
    }
    void write_rule(int fd, const std::string& rule, const std::string&) override {
        std::string l = label(fd);
        call("write_rule " + l + " " + rule, std::nullopt);
        if (l.ends_with("devices.allow"))
            allowed.insert(rule);
        else if (l.ends_with("devices.deny"))
            allowed.erase(rule);
    }
    util::Fd open_cgroup_dir(const std::filesystem::path& dir) override {
        call("open_cgroup_dir " + dir.string(), false);
        return make("cgroupdir:" + dir.string());
    }
    os::DevicePrograms query_device_programs(int fd) override {
        // By descriptor: any mount namespace (prepare_v2 on the host side,
        // the re-check before a single program's swap inside).
        call("query_device_programs " + label(fd), std::nullopt);
        return device_programs;
    }
    util::Fd open_program(std::uint32_t id) override {
        call("open_program " + std::to_string(id), std::nullopt);
        if (!programs.count(id))
            throw util::Error(ENOENT, "open device program", std::to_string(id));
        return make("prog:" + std::to_string(id));
    }
    std::vector<os::bpf::Insn> program_instructions(int fd) override {
        call("program_instructions " + label(fd), std::nullopt);
        return programs.at(id_of(fd));
    }
    util::Fd load_device_program(const std::vector<os::bpf::Insn>& insns,
                                 const std::string& name) override {
        call("load_device_program " + name, std::nullopt);
        std::uint32_t id = next_program_id++;
        programs[id] = insns;
        program_names[id] = name;
        return make("prog:" + std::to_string(id));
    }
    void replace_device_program(int cgroup_fd, int new_prog, int old_prog, unsigned flags,
                                const std::string&) override {
        call("replace_device_program " + label(cgroup_fd) + " " + label(new_prog) + " for " +
                 label(old_prog),
             std::nullopt);
        if (flags != device_programs.attach_flags)
            throw util::Error(EINVAL, "attach device program", label(cgroup_fd), "other flags");
        for (auto& id : device_programs.ids)
            if (id == id_of(old_prog)) {
                id = id_of(new_prog);
                return;
            }
        throw util::Error(ENOENT, "attach device program", label(old_prog), "not attached");
    }
    util::Fd open_program_dir(const std::filesystem::path& dir, std::string& why,
                              bool& taken) override {
        call("open_program_dir " + dir.string(), false);
        taken = program_dir_taken;
        if (taken) {
            why = dir.string() + ": owned by uid 1000, mode 700: must be root's";
            return util::Fd();
        }
        if (program_dir_errno) {
            why = dir.string() + ": " + std::strerror(program_dir_errno);
            return util::Fd();
        }
        return make("progdir:" + dir.string());
    }
    util::Fd open_kept_program(const std::string& path) override {
        call("open_kept_program " + path, false);
        auto it = kept_programs.find(path);
        return it == kept_programs.end() ? util::Fd() : make("prog:" + std::to_string(it->second));
    }
    void keep_program(int prog_fd, const std::string& path) override {
        call("keep_program " + label(prog_fd) + " " + path, false);
        if (!kept_programs.emplace(path, id_of(prog_fd)).second)
            throw util::Error(EEXIST, "keep device program", path);
    }
    os::FileInfo stat_fd(int fd) override {
        std::string l = label(fd);
        call("stat_fd " + l, std::nullopt);
        if (l.starts_with("tree:")) return host.at(l.substr(5));
        return lookup(l);
    }
    void enter_mount_ns(int fd) override {
        std::string l = label(fd);
        call("enter_mount_ns " + l, std::nullopt);
        in_container = l == "ns:container";
        entered = true;
    }
    void change_dir(int fd) override { call("change_dir " + label(fd), std::nullopt); }

    util::Fd open_root(const std::filesystem::path& rootfs) override {
        call("open_root " + rootfs.string(), true);
        return make("root:/");
    }
    util::Fd open_dir_in_root(int, const std::filesystem::path& p) override {
        call("open_dir_in_root " + p.string(), true);
        std::string cur;
        for (const auto& c : p.relative_path()) {
            cur += "/" + c.string();
            auto it = root.find(cur);
            // Symlinks in the model lead nowhere (dangling), as open_in_root would find.
            if (it == root.end() || it->second.type == Type::Symlink) return util::Fd();
            if (it->second.type != Type::Directory) throw util::Error(ENOTDIR, "open", cur);
        }
        return make("root:" + (cur.empty() ? "/" : cur));
    }
    os::FileInfo stat_at(int dir, const std::string& name) override {
        std::string p = child(dir, name);
        call("stat_at " + p, true);
        return lookup(p);
    }
    os::FileInfo stat_in_root(int, const std::filesystem::path& p) override {
        call("stat_in_root " + p.string(), true);
        std::string cur;
        os::FileInfo info{Type::Directory, 0, 0};
        for (const auto& c : p.relative_path()) {
            if (info.type != Type::Directory) return {};
            cur += "/" + c.string();
            auto it = root.find(cur);
            // Symlinks in the model lead nowhere (dangling), as open_in_root would find.
            if (it == root.end() || it->second.type == Type::Symlink) return {};
            info = it->second;
        }
        return info;
    }
    std::string read_link_at(int dir, const std::string& name) override {
        std::string p = child(dir, name);
        call("read_link_at " + p, true);
        return links.at(strip(p));
    }
    os::DirNames list_dir(int dir, std::size_t max_entries, const os::NameFilter& keep) override {
        std::string l = label(dir);
        if (l.starts_with("progdir:")) {  // the kept programs, host side
            call("list_dir " + l, false);
            return children(kept_programs, l.substr(8) + "/", max_entries, keep);
        }
        call("list_dir " + l, true);
        return children(model(l), strip(l) == "/" ? "/" : strip(l) + "/", max_entries, keep);
    }
    util::Fd make_dir(int dir, const std::string& name, unsigned) override {
        std::string p = child(dir, name);
        call("make_dir " + p, true);
        create(p, {Type::Directory, 0, 0});
        return make(p);
    }
    util::Fd make_file(int dir, const std::string& name, unsigned) override {
        std::string p = child(dir, name);
        call("make_file " + p, true);
        create(p, {Type::Regular, 0, 0});
        return make(p);
    }
    // Created first, as LinuxSystem does: a free name is a make_* call, one
    // already taken answers EEXIST without an error (recorded "exists: make_*").
    util::Fd try_make_dir(int dir, const std::string& name, unsigned mode) override {
        if (lookup(child(dir, name)).type == Type::Missing) return make_dir(dir, name, mode);
        call("exists: make_dir " + child(dir, name), true);
        return util::Fd();
    }
    util::Fd try_make_file(int dir, const std::string& name, unsigned mode) override {
        if (lookup(child(dir, name)).type == Type::Missing) return make_file(dir, name, mode);
        call("exists: make_file " + child(dir, name), true);
        return util::Fd();
    }
    bool try_make_symlink(const std::string& target, int dir, const std::string& name) override {
        if (lookup(child(dir, name)).type == Type::Missing) {
            make_symlink(target, dir, name);
            return true;
        }
        call("exists: make_symlink " + child(dir, name), true);
        return false;
    }
    void write_file_at(int dir, const std::string& name, const std::string& data,
                       unsigned) override {
        std::string p = child(dir, name);
        call("write_file_at " + p, true);
        create(p, {Type::Regular, 0, 0, data.size()});
        contents[p] = data;
    }
    os::RegularFile read_regular_at(int dir, const std::string& name,
                                    std::size_t max_size) override {
        std::string p = child(dir, name);
        call("read_regular_at " + p, true);
        const os::FileInfo info = lookup(p);
        if (info.type == Type::Missing) throw util::Error(ENOENT, "open", p);
        if (info.type == Type::Symlink) throw util::Error(ELOOP, "read", p);
        if (info.type != Type::Regular) util::throw_invalid("read", p, "not a regular file");
        os::RegularFile f;
        f.data = contents[p];
        if (f.data.size() > max_size) throw util::Error(util::ErrorKind::Invalid, EFBIG, "read", p);
        auto attr = attrs.find(p);
        if (attr != attrs.end()) {
            f.uid = attr->second.owner.uid;
            f.gid = attr->second.owner.gid;
            f.mode = attr->second.mode;
        }
        return f;
    }
    void replace_file_at(int dir, const std::string& temp, const std::string& name,
                         const std::string& data, unsigned mode,
                         const std::optional<os::Owner>& chown_to) override {
        std::string t = child(dir, temp), p = child(dir, name);
        std::string line =
            "replace_file_at " + p + " via " + temp + " mode " + std::to_string(mode);
        if (chown_to)
            line += " owner " + std::to_string(chown_to->uid) + ":" + std::to_string(chown_to->gid);
        call(line, true);
        create(t, {Type::Regular, 0, 0});  // O_EXCL
        const auto& m = model(p);
        auto it = m.find(strip(p));
        if (it != m.end() && it->second.type == Type::Directory) {
            root.erase(strip(t));
            throw util::Error(EISDIR, "rename", p);
        }
        root.erase(strip(t));
        root[strip(p)] = {Type::Regular, 0, 0};
        contents[p] = data;
        Attr attr;
        attr.mode = mode;
        if (chown_to) {
            attr.owner = *chown_to;
        } else {
            const auto colon = fs_ids.find(':');
            attr.owner = {static_cast<unsigned>(std::stoul(fs_ids.substr(0, colon))),
                          static_cast<unsigned>(std::stoul(fs_ids.substr(colon + 1)))};
        }
        attrs[p] = attr;
    }
    void make_symlink(const std::string& target, int dir, const std::string& name) override {
        std::string p = child(dir, name);
        call("make_symlink " + p + " -> " + target, true);
        create(p, {Type::Symlink, 0, 0});
        links[strip(p)] = target;
    }
    util::Fd open_at(int dir, const std::string& name) override {
        std::string p = child(dir, name);
        call("open_at " + p, true);
        if (lookup(p).type == Type::Missing) throw util::Error(ENOENT, "open", p);
        return make(p);
    }
    void remove(int dir, const std::string& name, bool directory) override {
        if (label(dir).starts_with("progdir:")) {
            const std::string p = label(dir).substr(8) + "/" + name;
            call("remove " + p, false);
            if (!kept_programs.erase(p)) throw util::Error(ENOENT, "remove", p);
            return;
        }
        std::string p = child(dir, name);
        call(std::string("remove ") + p + (directory ? " (dir)" : ""), true);
        auto& m = model(p);
        std::string key = strip(p);
        auto it = m.find(key);
        if (it == m.end()) throw util::Error(ENOENT, "remove", p);
        if (directory != (it->second.type == Type::Directory))
            throw util::Error(EISDIR, "remove", p);
        for (const auto& [k, v] : m)
            if (k.starts_with(key + "/")) throw util::Error(ENOTEMPTY, "remove", p);
        if (mounted.count(p)) throw util::Error(EBUSY, "remove", p);
        m.erase(it);
        links.erase(key);
        contents.erase(p);
    }
    void set_fs_ids(unsigned uid, unsigned gid) override {
        std::string ids = std::to_string(uid) + ":" + std::to_string(gid);
        call("set_fs_ids " + ids, std::nullopt);
        fs_ids = ids;
    }
    void set_mount_flags(int fd, unsigned flags) override {
        std::string l = label(fd);
        call("set_mount_flags " + l + " " + flag_names(flags), std::nullopt);
        flags_[l] |= flags;
    }
    void attach(int mount_fd, int target_fd) override {
        std::string from = label(mount_fd), to = label(target_fd);
        call("attach " + from + " -> " + to, true);
        if (lookup(to).type == Type::Missing) throw util::Error(ENOENT, "attach", to);
        mounted[to] = {from, flags_[from]};
    }
    void detach(int dir, const std::string& name) override {
        std::string p = child(dir, name);
        call("detach " + p, true);
        if (!mounted.erase(p)) throw util::Error(EINVAL, "unmount", p);
    }
    util::Fd clone_tree(int fd) override {
        std::string l = label(fd);
        call("clone_tree " + l, std::nullopt);
        if (!l.starts_with("tree:")) throw util::Error(EINVAL, "clone mount", l);
        return make(l);
    }
    util::Fd make_tmpfs() override {
        call("make_tmpfs", true);
        tmpfs.clear();
        tmpfs["/"] = {Type::Directory, 0, 0};
        flags_["tmpfs:/"] = util::kMountNoSuid | util::kMountNoDev | util::kMountNoExec;
        return make("tmpfs:/");
    }
    std::string run(int exe, const std::string& what, const std::vector<std::string>& args,
                    std::chrono::milliseconds) override {
        std::string line = "run " + label(exe);
        for (const auto& a : args) line += " " + a;
        call(line, true);
        (void)what;
        ldconfig_args = args;
        return ldconfig_output;
    }
    std::string run_as(const os::Owner& owner, int exe, const std::string& what,
                       const std::vector<std::string>& args, std::chrono::milliseconds) override {
        std::string ids = std::to_string(owner.uid) + ":" + std::to_string(owner.gid);
        std::string line = "run_as " + ids + " " + label(exe);
        for (const auto& a : args) line += " " + a;
        call(line, true);
        (void)what;
        ldconfig_args = args;
        run_as_owner = ids;
        return ldconfig_output;
    }
    void rename_at(int dir, const std::string& from, const std::string& to) override {
        const std::string a = child(dir, from), b = child(dir, to);
        call("rename_at " + a + " -> " + b, true);
        auto& m = model(a);
        auto it = m.find(strip(a));
        if (it == m.end()) throw util::Error(ENOENT, "rename", a);
        const os::FileInfo info = it->second;
        m.erase(it);
        model(b)[strip(b)] = info;
        if (auto c = contents.find(a); c != contents.end()) {
            contents[b] = c->second;
            contents.erase(c);
        }
        if (auto o = owners.find(a); o != owners.end()) {
            owners[b] = o->second;
            owners.erase(o);
        }
    }
    void exchange_at(int dir, const std::string& a, const std::string& b) override {
        const std::string pa = child(dir, a), pb = child(dir, b);
        call("exchange_at " + pa + " <-> " + pb, true);
        auto& m = model(pa);
        auto ia = m.find(strip(pa)), ib = m.find(strip(pb));
        if (ia == m.end() || ib == m.end()) throw util::Error(ENOENT, "exchange", pb);
        std::swap(ia->second, ib->second);
        std::swap(contents[pa], contents[pb]);
    }
    // Not recorded: the mount of a descriptor's path, from mount_ids (the
    // longest prefix of its label there), 1 (the root's) otherwise.
    std::uint64_t mount_id(int fd) override {
        const std::string l = label(fd);
        std::uint64_t id = 1;
        std::size_t best = 0;
        for (const auto& [prefix, mid] : mount_ids)
            if ((l == prefix || l.starts_with(prefix + "/")) && prefix.size() >= best) {
                best = prefix.size();
                id = mid;
            }
        return id;
    }

    // Not recorded: the mounts (by id) that are a tmpfs, their device 0:id;
    // host_mounts: those read_mountinfo shows (a host's tmpfs, seen from the
    // runtime's namespace).
    std::set<std::uint64_t> tmpfs_mounts;
    std::set<std::uint64_t> host_mounts;
    std::optional<std::pair<unsigned, unsigned>> tmpfs_device(int fd) override {
        const std::uint64_t id = mount_id(fd);
        if (!tmpfs_mounts.contains(id)) return std::nullopt;
        return std::pair{0u, static_cast<unsigned>(id)};
    }

    // Recorded ("open_mountinfo", "mountinfo_shows 0:7 ..."): host_mounts
    // are what the runtime's namespace shows.
    util::Fd open_mountinfo() override {
        call("open_mountinfo", false);
        return make("mountinfo");
    }
    std::vector<bool> mountinfo_shows(
        int fd, const std::vector<std::pair<unsigned, unsigned>>& devices) override {
        std::string line = "mountinfo_shows " + label(fd);
        std::vector<bool> shown;
        for (const auto& [major, minor] : devices) {
            line += " " + std::to_string(major) + ":" + std::to_string(minor);
            shown.push_back(major == 0 && host_mounts.contains(minor));
        }
        call(line, std::nullopt);  // any namespace: the descriptor says which it shows
        return shown;
    }

    // Not recorded: a kernel with statmount answers from shared_mounts by the
    // descriptor's mount id; without it (the default) the executor reads mountinfo.
    bool statmount = false;
    // Not recorded: the usual cgroup mounts as statmount would describe them
    // (nullopt: a kernel without it, the host's mountinfo is read).
    std::optional<std::string> usual_cgroup_mounts;
    std::optional<std::string> cgroup_mounts(bool) override { return usual_cgroup_mounts; }
    std::optional<bool> mount_shared(int fd) override {
        if (!statmount) return std::nullopt;
        const std::uint64_t id = mount_id(fd);
        return shared_mounts.count(id) != 0;
    }
    // Not recorded (counted): a mountinfo whose lines of shared_mounts' ids say "shared:N".
    std::size_t mountinfo_reads = 0;
    std::string read_mountinfo() override {
        ++mountinfo_reads;
        std::string text;
        for (std::uint64_t id : shared_mounts)
            text += std::to_string(id) + " 1 0:" + std::to_string(id) + " / /m" +
                    std::to_string(id) + " rw shared:" + std::to_string(id) + " - tmpfs tmpfs rw\n";

        return text;
    }

    // --- Helpers for tests ---

    static std::string flag_names(unsigned flags) {
        std::string s;
        auto add = [&](unsigned bit, const char* name) {
            if (flags & bit) s += (s.empty() ? "" : ",") + std::string(name);
        };
        add(util::kMountReadOnly, "ro");
        add(util::kMountNoSuid, "nosuid");
        add(util::kMountNoDev, "nodev");
        add(util::kMountNoExec, "noexec");
        return s.empty() ? "none" : s;
    }

    const std::string& label(int fd) const { return labels_.at(fd); }
    std::uint32_t id_of(int prog_fd) const {
        return static_cast<std::uint32_t>(std::stoul(label(prog_fd).substr(5)));
    }

  private:
    // Records the call, fails it when told to, and checks the namespace:
    // true: only inside the container's; false: only in our own; nullopt: either.
    void call(const std::string& line, std::optional<bool> container) {
        std::size_t index = calls.size();
        calls.push_back(line);
        if (image_from_host && !entered && container && *container) container.reset();
        // Sharing the container's namespace, every call is in both.
        if (container && !shares_namespace && *container != in_container)
            throw util::Error(EPERM, "wrong mount namespace", line,
                              *container ? "must run inside the container's mount namespace"
                                         : "must run in the host's mount namespace");
        if (fail_if && fail_if(index, line)) throw util::Error(fail_errno, "injected", line);
    }

    // list_dir of a model keyed by path: the entries right below `key` ("/dir/").
    template <class Model>
    static os::DirNames children(const Model& m, const std::string& key, std::size_t max_entries,
                                 const os::NameFilter& keep) {
        os::DirNames out;
        std::size_t read = 0;
        for (const auto& entry : m) {
            const std::string& k = entry.first;
            if (k.size() <= key.size() || !k.starts_with(key) ||
                k.find('/', key.size()) != std::string::npos)
                continue;
            if (++read > max_entries) {
                out.more = true;
                break;
            }
            std::string name = k.substr(key.size());
            if (!keep || keep(name)) out.names.push_back(std::move(name));
        }
        return out;
    }

    util::Fd make(const std::string& what) {
        int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) throw util::Error(errno, "open", "/dev/null");
        labels_[fd] = what;
        return util::Fd(fd);
    }

    // "root:/usr" + "lib" -> "root:/usr/lib"
    std::string child(int dir, const std::string& name) const {
        std::string l = label(dir);
        if (l.starts_with("root:") || l.starts_with("tmpfs:"))
            return l + (l.ends_with("/") ? "" : "/") + name;
        throw util::Error(EBADF, "not a directory descriptor", l);
    }
    static std::string strip(const std::string& l) { return l.substr(l.find(':') + 1); }
    std::map<std::string, os::FileInfo>& model(const std::string& l) {
        return l.starts_with("tmpfs:") ? tmpfs : root;
    }
    os::FileInfo lookup(const std::string& l) {
        auto& m = model(l);
        auto it = m.find(strip(l));
        return it == m.end() ? os::FileInfo{} : it->second;
    }
    void create(const std::string& l, os::FileInfo info) {
        auto& m = model(l);
        std::string key = strip(l);
        if (m.count(key)) throw util::Error(EEXIST, "create", l);
        m[key] = info;
        if (fs_ids != "0:0") owners[l] = fs_ids;
    }

    std::map<int, std::string> labels_;
    std::map<std::string, unsigned> flags_;
};

}  // namespace gpubind::test
