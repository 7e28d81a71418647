// The node description (description.hpp): fingerprint, file format, trust
// checks, recomputation.
#include "gpubind/node/description.hpp"
#include "gpubind/node/families.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/compile.h>
#include <fmt/format.h>

#include "gpubind/node/node_read.hpp"
#include "gpubind/util/digest.hpp"
#include "gpubind/util/dir_entries.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/timing.hpp"

#include "description_fields.hpp"

namespace gpubind::node {

namespace fs = std::filesystem;

namespace {

using detail::kMaxProcFile;
using detail::program_dirs;
using detail::under;

constexpr std::string_view kSchema = "gpubind.node/8";
// A listing deeper than this (capabilities/gpu<N>/mig/gi<G>/ci<C>) is not the driver's.
constexpr int kMaxDepth = 5;

std::string hex(std::uint64_t v) {
    return fmt::format("{:016x}", v);
}

std::int64_t now_seconds() {
    return static_cast<std::int64_t>(std::time(nullptr));
}

// ---- the fingerprint -------------------------------------------------------------------------

// What kept a directory from opening, as the fingerprint holds it.
const char* failure(int err) {
    return err == ENOENT ? "missing" : "error";
}

// A small file's content (at most kMaxProcFile bytes), or what kept it from
// being read.
std::string content_of(int at, const char* name) {
    util::Fd fd(::openat(at, name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) return fmt::format("unreadable: {}", std::strerror(errno));
    try {
        return util::read_stream(fd.get(), kMaxProcFile, name);
    } catch (const util::Error& e) {
        return std::string("unreadable: ") + e.what();
    }
}

// An owner as the fingerprint records it: the host's root as 0, and so an
// Unknown one (host_owner), so that enroot's gpubind-nvc matches the
// description root wrote: a key, not a trust (what such an owner holds is
// given only as that description vouches: vouches()).
unsigned owner_key(uid_t uid) {
    return util::host_owner(uid) == util::HostOwner::Other ? uid : 0u;
}

// lstat identity: what changes when the entry is replaced, written, renamed
// into or out of (a directory), or its owner or mode change (ctime).
// (The format is compiled: every start writes one per watched entry.)
std::string identity(const struct stat& st) {
    return fmt::format(FMT_COMPILE("{}:{}:{:o}:{}:{}:{}.{}:{}.{}:{}:{}"), major(st.st_dev),
                       minor(st.st_dev), st.st_mode, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                       st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec,
                       owner_key(st.st_uid), st.st_rdev);
}

std::string identity(int at, const char* path) {
    struct stat st {};
    if (::fstatat(at, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return failure(errno);
    return identity(st);
}

// The entries of the open directory `fd` (not "." and ".."), those whose
// name starts with `prefix`, sorted by name: name, inode, type. False when
// the directory cannot be read.
using Entries = std::vector<std::pair<std::string, std::pair<ino_t, unsigned char>>>;
bool read_entries(int fd, Entries& out, const std::vector<std::string>& prefixes = {""}) {
    const bool ok = util::detail::for_each_entry(fd, [&](std::string_view name, const dirent64& e) {
        for (const auto& prefix : prefixes)
            if (name.starts_with(prefix)) {
                out.push_back({std::string(name), {e.d_ino, e.d_type}});
                break;
            }
        return true;
    });
    std::sort(out.begin(), out.end());
    return ok;
}

// Appends "<rel>/<name>:<inode>;" for each entry of the directory `name`
// (relative to `at`), sorted, and of its subdirectories down to kMaxDepth.
void listing(std::string& out, int at, const char* name, const std::string& rel, int depth) {
    util::Fd fd(::openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
        (out += rel) += errno == ENOENT ? ":missing;" : ":error;";
        return;
    }
    Entries entries;
    if (!read_entries(fd.get(), entries)) {
        (out += rel) += ":error;";
        return;
    }
    for (const auto& [entry, info] : entries) {
        ((((out += rel) += '/') += entry) += ':') += std::to_string(info.first);
        out += ';';
        if (info.second == DT_DIR && depth < kMaxDepth)
            listing(out, fd.get(), entry.c_str(), rel + "/" + entry, depth + 1);
    }
}

// The dev root's NVIDIA entries (nvidia*): names and inodes, and for the
// nodes their identity (type, numbers, mode, owner: what discovery reads with
// stat).
std::string dev_entries(const util::Fd& fd, const std::vector<std::string>& prefixes) {
    if (!fd) return failure(errno);
    Entries entries;
    if (!read_entries(fd.get(), entries, prefixes)) return "error";
    std::string out;
    for (const auto& [entry, info] : entries) {
        ((out += entry) += ':') += std::to_string(info.first);
        if (info.second != DT_DIR) (out += '=') += identity(fd.get(), entry.c_str());
        out += ';';
    }
    return out;
}

// lstat identity that a new entry in a directory leaves alone: the entry
// itself replaced, its type, owner or mode changed.
std::string owner_identity(const char* path) {
    struct stat st {};
    if (::lstat(path, &st) != 0) return failure(errno);
    return fmt::format("{}:{}:{}:{:o}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino,
                       st.st_mode, owner_key(st.st_uid));
}

// Paths whose identity counts beside the fixed parts, by the prefix of their
// fingerprint key: "watch:" where discovery found the driver's files (the
// binaries' directories, the firmware's, the libraries' and their links'),
// "owner:" each IPC and every directory above it, whose owners and modes
// decide whether it is given (discover's unsafe_ipc).
constexpr std::string_view kWatch = "watch:";
constexpr std::string_view kOwner = "owner:";

std::set<std::string> watched_keys(const config::Config& config, const Node& node) {
    std::set<std::string> keys;
    auto watch = [&](const fs::path& p) { keys.insert(std::string(kWatch) + p.string()); };
    for (const auto& dir : program_dirs(node)) watch(under(config.roots.driver, dir));
    for (const auto& entry : config.catalog.ipcs)
        for (fs::path p = under(config.roots.driver, entry.name);; p = p.parent_path()) {
            keys.insert(std::string(kOwner) + p.string());
            if (p == p.parent_path()) break;
        }
    for (const auto& entry : config.catalog.firmware) {
        std::string pattern = entry.name;
        if (auto v = pattern.find("{version}"); v != std::string::npos)
            pattern.replace(v, 9, node.driver_version);
        watch(under(config.roots.driver, fs::path(pattern).parent_path()));
    }
    for (const auto& f : node.files) {
        if (f.kind != FileKind::Library) continue;
        watch(fs::path(f.host_path).parent_path());
        watch(fs::path(f.real_path).parent_path());
    }
    return keys;
}

// Adds the identity of a watched key's path (a key of another part: nothing).
void add_watched(Fingerprint& fp, const std::string& key) {
    if (key.rfind(kWatch, 0) == 0)
        fp[key] = identity(AT_FDCWD, key.c_str() + kWatch.size());
    else if (key.rfind(kOwner, 0) == 0)
        fp[key] = owner_identity(key.c_str() + kOwner.size());
}

// The first part of `now` that `stored` lacks or holds otherwise, "" when none.
std::string changed_part(const Fingerprint& stored, const Fingerprint& now) {
    for (const auto& [key, value] : now) {
        auto it = stored.find(key);
        if (it == stored.end()) return key + " is new";
        if (it->second != value) return key + " changed";
    }
    return "";
}

// The first part where two fingerprints differ, "" when they are equal.
std::string difference(const Fingerprint& stored, const Fingerprint& now) {
    if (std::string changed = changed_part(stored, now); !changed.empty()) return changed;
    for (const auto& [key, value] : stored)
        if (!now.count(key)) return key + " is gone";
    return {};
}

// ---- the file's encoding ---------------------------------------------------------------------
//
// A compact binary encoding read straight into the structs (no document
// tree): integers little-endian at their own width, bools one byte,
// strings and paths a u32 length and the bytes, vectors and maps a u32
// count and the elements. Each struct's fields are listed once, in
// fields(), for writing and reading alike, so the two cannot disagree.

// (fields(): description_fields.hpp.)
using description_fields::fields;

// The enums' largest values: a byte beyond them is corruption.
constexpr auto kLastFileKind = FileKind::Firmware;
constexpr auto kLastNvmlStatus = NvmlStatus::Failed;

template <class E>
constexpr E last_of() {
    if constexpr (std::is_same_v<E, FileKind>)
        return kLastFileKind;
    else
        return kLastNvmlStatus;
}

class Writer {
  public:
    template <class... T>
    void operator()(const T&... v) {
        (item(v), ...);
    }
    std::string& out() { return out_; }

  private:
    void item(bool v) { out_.push_back(v ? '\1' : '\0'); }
    template <std::integral T>
    void item(const T& v) {
        auto u = static_cast<std::make_unsigned_t<T>>(v);
        for (std::size_t i = 0; i < sizeof(T); ++i)
            out_.push_back(static_cast<char>(static_cast<unsigned char>(u >> (8 * i))));
    }
    template <class E>
    requires std::is_enum_v<E>
    void item(const E& v) { item(static_cast<std::uint8_t>(v)); }
    void count(std::size_t n) { item(static_cast<std::uint32_t>(n)); }
    void item(const std::string& s) {
        count(s.size());
        out_ += s;
    }
    void item(const fs::path& p) { item(p.native()); }
    template <class T>
    void item(const std::vector<T>& v) {
        count(v.size());
        for (const auto& e : v) item(e);
    }
    template <class T>
    void item(const std::optional<T>& v) {
        item(v.has_value());
        if (v) item(*v);
    }
    template <class A, class B>
    void item(const std::pair<A, B>& v) {
        (*this)(v.first, v.second);
    }
    template <class K, class V, class C>
    void item(const std::map<K, V, C>& m) {
        count(m.size());
        for (const auto& [k, v] : m) (*this)(k, v);
    }
    template <class T>
    void item(const T& v) {
        fields(*this, v);
    }

    std::string out_;
};

class Reader {
  public:
    Reader(std::string_view in, const std::string& what) : in_(in), what_(what) {}
    template <class... T>
    void operator()(T&... v) {
        (item(v), ...);
    }
    // Throws unless every byte was read.
    void finish() const {
        if (at_ != in_.size()) corrupt("bytes after the end");
    }

  private:
    [[noreturn]] void corrupt(const char* why) const {
        util::throw_invalid("read node description", what_, std::string("corrupt: ") + why);
    }
    std::string_view take(std::size_t n) {
        if (n > in_.size() - at_) corrupt("ends early");
        std::string_view s = in_.substr(at_, n);
        at_ += n;
        return s;
    }
    template <std::integral T>
    void item(T& v) {
        const std::string_view b = take(sizeof(T));
        std::make_unsigned_t<T> u = 0;
        for (std::size_t i = 0; i < sizeof(T); ++i)
            u = static_cast<std::make_unsigned_t<T>>(
                u | static_cast<std::make_unsigned_t<T>>(static_cast<unsigned char>(b[i]))
                        << (8 * i));
        v = static_cast<T>(u);
    }
    void item(bool& v) {
        const auto b = static_cast<unsigned char>(take(1)[0]);
        if (b > 1) corrupt("not a boolean");
        v = b == 1;
    }
    template <class E>
    requires std::is_enum_v<E>
    void item(E& v) {
        std::uint8_t u = 0;
        item(u);
        if (u > static_cast<std::uint8_t>(last_of<E>())) corrupt("unknown enumerator");
        v = static_cast<E>(u);
    }
    std::size_t count() {
        std::uint32_t n = 0;
        item(n);
        return n;
    }
    void item(std::string& s) { s.assign(take(count())); }
    void item(fs::path& p) { p.assign(take(count())); }
    template <class T>
    void item(std::vector<T>& v) {
        // Each element takes at least a byte: the count cannot outgrow the
        // file. Grown as elements are read, so memory follows the bytes read.
        const std::size_t n = count();
        if (n > in_.size() - at_) corrupt("count beyond the end");
        v.clear();
        v.reserve(std::min<std::size_t>(n, 256));
        for (std::size_t i = 0; i < n; ++i) item(v.emplace_back());
    }
    template <class T>
    void item(std::optional<T>& v) {
        bool has = false;
        item(has);
        if (has)
            item(v.emplace());
        else
            v.reset();
    }
    template <class A, class B>
    void item(std::pair<A, B>& v) {
        (*this)(v.first, v.second);
    }
    template <class K, class V, class C>
    void item(std::map<K, V, C>& m) {
        const std::size_t n = count();
        if (n > in_.size() - at_) corrupt("count beyond the end");
        m.clear();
        for (std::size_t i = 0; i < n; ++i) {
            K k;
            V v;
            (*this)(k, v);
            m.emplace_hint(m.end(), std::move(k), std::move(v));
        }
    }
    template <class T>
    void item(T& v) {
        fields(*this, v);
    }

    std::string_view in_;
    std::size_t at_ = 0;
    const std::string& what_;
};

// ---- the file --------------------------------------------------------------------------------

// "<schema>\n", the body's digest (8 bytes, little-endian), the body: the
// digest is checked before the body is decoded.
constexpr std::string_view kMagic = "gpubind.node/8\n";
static_assert(kMagic.size() == kSchema.size() + 1 && kMagic.substr(0, kSchema.size()) == kSchema);
constexpr std::size_t kDigestSize = 8;

std::string serialize(const NodeKnowledge& k) {
    Writer w;
    w(k);
    return seal_description(w.out());
}

// The stored description, or nullopt with `why` saying what was wrong with it.
std::optional<NodeKnowledge> read_description(const config::Config& config, std::string& why) {
    const fs::path dir = config.state_dir;
    const fs::path path = description_path(config);
    util::Fd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dirfd) {
        why = errno == ENOENT ? "no description yet" : dir.string() + ": " + std::strerror(errno);
        return std::nullopt;
    }
    // An Unknown owner passes (root's, in enroot's namespace): matching needs
    // it, and its directory is the trusted config's.
    struct stat st {};
    const bool unknown = ::fstat(dirfd.get(), &st) == 0 && S_ISDIR(st.st_mode) &&
                         util::host_owner(st.st_uid) == util::HostOwner::Unknown &&
                         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
    if (std::string bad = util::untrusted_dir(dirfd.get()); !bad.empty() && !unknown) {
        why = dir.string() + " " + bad;
        return std::nullopt;
    }
    util::Fd fd(::openat(dirfd.get(), kNodeDescriptionName,
                         O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd) {
        why = errno == ENOENT  ? "no description yet"
              : errno == ELOOP ? path.string() + " is a symbolic link"
                               : path.string() + ": " + std::strerror(errno);
        return std::nullopt;
    }
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        why = path.string() + " is not a regular file";
        return std::nullopt;
    }
    if (util::host_owner(st.st_uid) == util::HostOwner::Other) {
        why = path.string() + " is not owned by root";
        return std::nullopt;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        why = path.string() + " is writable by others than root";
        return std::nullopt;
    }
    if (static_cast<std::size_t>(st.st_size) > kMaxDescriptionSize) {
        why = path.string() + " is larger than " + std::to_string(kMaxDescriptionSize) + " bytes";
        return std::nullopt;
    }
    std::string text;
    try {
        // Its type and size are checked above: read it as it is.
        text = util::read_sized(fd.get(), static_cast<std::size_t>(st.st_size), kMaxDescriptionSize,
                                path.string());
    } catch (const util::Error& e) {
        why = e.what();
        return std::nullopt;
    }
    if (text.size() < kMagic.size() + kDigestSize) {
        why = path.string() + " is not a description (truncated or corrupt)";
        return std::nullopt;
    }
    if (text.compare(0, kMagic.size(), kMagic) != 0) {
        why =
            path.string() + " is not a description of this schema (another gpubind's, or corrupt)";
        return std::nullopt;
    }
    std::uint64_t stored_digest = 0;
    for (std::size_t i = 0; i < kDigestSize; ++i)
        stored_digest |= std::uint64_t{static_cast<unsigned char>(text[kMagic.size() + i])}
                         << (8 * i);
    const std::string_view body = std::string_view(text).substr(kMagic.size() + kDigestSize);
    if (util::digest(body) != stored_digest) {
        why = path.string() + " does not match its digest (truncated or changed since written)";
        return std::nullopt;
    }
    try {
        const std::string what = path.string();
        Reader r(body, what);
        NodeKnowledge k;
        k.path = path;
        r(k);
        r.finish();
        k.stored = true;
        return k;
    } catch (const util::Error& e) {
        why = e.what();
        return std::nullopt;
    }
}

// Writes the description atomically: a new file (O_EXCL, never through a
// link) in the state directory, 0644, renamed over the description. Root only.
void write_description(const config::Config& config, const NodeKnowledge& k) {
    const fs::path dir = config.state_dir;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        util::throw_errno("create directory", dir);
    util::Fd dirfd = util::open_or_throw(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (std::string bad = util::untrusted_dir(dirfd.get()); !bad.empty())
        throw util::Error(EACCES, "write node description", dir.string(), bad);
    const std::string tmp =
        std::string(kNodeDescriptionName) + ".tmp-" + std::to_string(::getpid());
    const std::string what = (dir / tmp).string();
    ::unlinkat(dirfd.get(), tmp.c_str(), 0);
    util::Fd fd = util::openat_or_throw(dirfd.get(), tmp.c_str(),
                                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, what, 0644);
    auto fail = [&](const char* op) {
        const int err = errno;
        ::unlinkat(dirfd.get(), tmp.c_str(), 0);
        throw util::Error(err, op, what);
    };
    if (::fchmod(fd.get(), 0644) != 0) fail("chmod");
    const std::string data = serialize(k);
    for (std::size_t done = 0; done < data.size();) {
        ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += static_cast<std::size_t>(n);
    }
    if (::renameat(dirfd.get(), tmp.c_str(), dirfd.get(), kNodeDescriptionName) != 0)
        fail("rename");
}

void ask_nvml(NodeKnowledge& k, std::chrono::milliseconds timeout) {
    const auto start = std::chrono::steady_clock::now();
    k.nvml.asked_at = now_seconds();
    k.nvml.error = k.node.gpus.empty() ? std::string() : apply_nvml(k.node, timeout);
    k.nvml.status = k.nvml.error.empty() ? NvmlStatus::Answered : NvmlStatus::Failed;
    k.nvml.took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    k.nvml_asked = true;
    util::logger().debug("node description: NVML {} in {} ms{}{}",
                         k.nvml.error.empty() ? "answered" : "failed", k.nvml.took_ms,
                         k.nvml.error.empty() ? "" : ": ", k.nvml.error);
}

// discover's Vouch: root's description gave that IPC, which and every
// directory above which have the `owner:` identity it recorded (inode, mode,
// an owner it saw as root's), or it gave a family that file.
bool vouches(const NodeKnowledge& stored, const std::string& host_path) {
    const auto same = [&](const fs::path& p) {
        const auto it = stored.fingerprint.find(std::string(kOwner) + p.string());
        return it != stored.fingerprint.end() && it->second == owner_identity(p.c_str());
    };
    for (const auto& f : stored.node.files) {
        if (f.kind != FileKind::Ipc || f.host_path != host_path) continue;
        for (fs::path p = host_path; same(p); p = p.parent_path())
            if (p == p.parent_path()) return true;
        return false;
    }
    for (const auto& family : stored.node.families)
        for (const auto& file : family.files)
            if (under(stored.node.roots.driver, file).string() == host_path) return true;
    return false;
}

}  // namespace

std::string seal_description(std::string_view body) {
    const std::uint64_t d = util::digest(body);
    std::string out(kMagic);
    out.reserve(kMagic.size() + kDigestSize + body.size());
    for (std::size_t i = 0; i < kDigestSize; ++i)
        out.push_back(static_cast<char>(static_cast<unsigned char>(d >> (8 * i))));
    return out += body;
}

std::filesystem::path description_path(const config::Config& config) {
    return config.state_dir / kNodeDescriptionName;
}

std::string config_digest(const config::Config& c) {
    // Every field that can change what the node is, in order; a field added to
    // Config belongs here too. Not [log] nor bpf-dir: the log's level and file
    // and where device programs are kept change no fact of the node, so
    // changing them does not cost a rediscovery. Each
    // piece goes in with its length (Digest::add), so no separator is needed.
    util::Digest d;
    d.add(c.roots.driver.native()).add(c.roots.dev.native()).add(c.roots.proc.native());
    d.add(c.roots.sys.native());
    d.add(c.ldcache_path().native()).add(c.ldconfig.native()).add(c.state_dir.native());
    d.add(c.runtimes.size());
    for (const auto& r : c.runtimes) d.add(r);
    const config::Policy& p = c.policy;
    for (const bool b : {p.accept_envvar_unprivileged, p.accept_cdi_annotations_unprivileged,
                         p.accept_volume_mounts, p.disable_require, p.cgroups, p.cuda_compat})
        d.add(b);
    d.add(p.cdi_vendors.size());
    for (const auto& v : p.cdi_vendors) d.add(v);
    d.add(p.supported).add(static_cast<std::uint64_t>(p.on_refused));
    d.add(static_cast<std::uint64_t>(p.ldcache)).add(p.ipc_owners.size());
    for (const unsigned uid : p.ipc_owners) d.add(uid);
    for (const auto* list :
         {&c.catalog.libraries, &c.catalog.binaries, &c.catalog.ipcs, &c.catalog.firmware}) {
        d.add(list->size());
        for (const auto& e : *list) d.add(e.name).add(e.caps);
    }
    // What the node's CDI specs hold and where they are: a change recomputes
    // the description, and know_node then rewrites the specs.
    d.add(c.cdi.dir.native()).add(c.cdi.kind).add(static_cast<std::uint64_t>(c.cdi.caps));
    d.add(c.cdi.hook.native());
    d.add(c.families.size());
    for (const auto& f : c.families) {
        d.add(f.name).add(static_cast<std::uint64_t>(f.source)).add(f.major).add(f.select);
        d.add(f.extras).add(static_cast<std::uint64_t>(f.caps)).add(f.cdi_kind);
        for (const auto* list : {&f.nodes, &f.variables, &f.files}) {
            d.add(list->size());
            for (const auto& e : *list) d.add(e);
        }
    }
    return hex(d.value());
}

Fingerprint node_fingerprint(const config::Config& config) {
    Fingerprint fp;
    fp["schema"] = kSchema;
    fp["config"] = config_digest(config);
    // Every part read relative to a directory opened once: no path walked twice.
    const util::Fd proc(::open(config.roots.proc.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    const util::Fd nv(::openat(proc.get(), "driver/nvidia", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    fp["version"] = content_of(nv.get(), "version");
    fp["params"] = hex(util::digest(content_of(nv.get(), "params")));
    fp["devices"] = hex(util::digest(content_of(proc.get(), "devices")));
    std::string listed;
    // gpus/: its entries alone. The driver makes a GPU's directory and its
    // files together and removes them together, so the directory's inode
    // says what listing it would (4 system calls a GPU at every start).
    listing(listed, nv.get(), "gpus", "gpus", kMaxDepth);
    listing(listed, nv.get(), "capabilities", "capabilities", 1);
    fp["proc"] = hex(util::digest(listed));
    const fs::path dev = under(config.roots.dev, "/dev");
    const util::Fd devfd(::open(dev.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto family_dirs = family_dev_entries(config);
    std::vector<std::string> dev_prefixes = {"nvidia"};
    if (auto it = family_dirs.find("/dev"); it != family_dirs.end()) {
        dev_prefixes.insert(dev_prefixes.end(), it->second.begin(), it->second.end());
        family_dirs.erase(it);
    }
    std::string nodes = dev_entries(devfd, dev_prefixes);
    listing(nodes, devfd.get(), "nvidia-caps", "nvidia-caps", kMaxDepth);
    listing(nodes, devfd.get(), "nvidia-caps-imex-channels", "imex", kMaxDepth);
    fp["dev"] = hex(util::digest(nodes));
    if (!config.families.empty()) {
        // The families' nodes (names, inodes, numbers), /proc/misc (rdma_cm's
        // minor) and the GPUs' PCI placement are learned with the node: a
        // module loaded, an HCA added or a node replaced changes these.
        std::string families = content_of(proc.get(), "misc");
        for (const auto& [dir, prefixes] : family_dirs) {
            if (!dir.starts_with("/dev/")) continue;  // the config allows no other
            const util::Fd fd(
                ::openat(devfd.get(), dir.c_str() + 5, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
            ((families += dir) += ':') += dev_entries(fd, prefixes);
            if (dir == "/dev/dri" && fd)
                listing(families, fd.get(), "by-path", "by-path", kMaxDepth);
        }
        fp["families"] = hex(util::digest(families));
    }
    fp["ldcache"] = identity(AT_FDCWD, config.ldcache_path().c_str());
    return fp;
}

NodeKnowledge load_node(const config::Config& config, const LoadOptions& options) {
    const auto started = std::chrono::steady_clock::now();
    Fingerprint now = node_fingerprint(config);
    const auto fingerprinted = std::chrono::steady_clock::now();
    std::string why = "refresh asked";
    std::optional<NodeKnowledge> stored;
    if (!options.refresh) stored = read_description(config, why);
    const auto read = std::chrono::steady_clock::now();
    if (stored) {
        // The fixed parts first: where one differs (another config, a driver
        // upgrade) the stored paths need no look.
        why = changed_part(stored->fingerprint, now);
        if (why.empty()) {
            for (const auto& [key, value] : stored->fingerprint) add_watched(now, key);
            why = difference(stored->fingerprint, now);
        }
        if (!why.empty()) why = "the driver state changed (" + why + ")";
    }
    NodeKnowledge k;
    bool dirty = false;
    if (stored && why.empty()) {
        k = std::move(*stored);
        util::logger().debug(
            "node description {}: computed {} s ago, checked and read in {} us (fingerprint "
            "{} us, reading and parsing {} us)",
            k.path.string(), now_seconds() - k.computed_at,
            util::micros(started, std::chrono::steady_clock::now()),
            util::micros(started, fingerprinted), util::micros(fingerprinted, read));
    } else {
        util::logger().debug("node description: discovering the node: {}", why);
        k.path = description_path(config);
        k.why = why;
        k.recomputed = true;
        k.computed_at = now_seconds();
        DiscoverOptions discover_options;
        discover_options.nvml = false;
        if (stored)
            discover_options.vouched = [&](const std::string& p) { return vouches(*stored, p); };
        k.node = discover(config, discover_options);
        k.proc = read_proc_files(k.node);
        // The fixed parts and the identities of paths this node still
        // watches, taken before discovery: a change meanwhile makes the next
        // check recompute. What only the stored node watched goes (an earlier
        // driver's firmware directory, another root's): kept, every start
        // would stat it for ever.
        const std::set<std::string> keys = watched_keys(config, k.node);
        std::erase_if(now, [&](const auto& part) {
            return (part.first.starts_with(kWatch) || part.first.starts_with(kOwner)) &&
                   !keys.contains(part.first);
        });
        k.fingerprint = std::move(now);
        for (const auto& key : keys)
            if (!k.fingerprint.contains(key)) add_watched(k.fingerprint, key);
        dirty = true;
    }
    if (options.need_nvml && k.nvml.status == NvmlStatus::NotAsked) {
        ask_nvml(k, options.nvml_timeout);
        dirty = true;
    }
    if (dirty) {
        k.stored = false;
        if (options.write && ::geteuid() == 0) {
            try {
                write_description(config, k);
                k.stored = true;
            } catch (const util::Error& e) {
                util::logger().debug("node description not stored: {}", e.what());
            }
        }
    }
    return k;
}

}  // namespace gpubind::node
