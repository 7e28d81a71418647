// The container's loader cache: its files checked before anything is done,
// then /etc/ld.so.cache written by gpubind's writer or by the host's ldconfig
// (sandboxed) and put in place by descriptor (exec.hpp, step 4).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <vector>

#include "gpubind/ldcache/ldcache.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

#include "context.hpp"

namespace gpubind::exec {

// The files ldconfig reads or writes under fixed names: missing or
// regular files, else the container is refused before anything is done
// (an image's block device named ld.so.cache~, a FIFO for ld.so.conf).
// Each directory is opened once and each name looked at once per start:
// what the cache refresh later needs (/etc's type, the cache's) is kept.
void LoaderCache::check_files() {
    etc_type_ = check_etc();
    static const std::pair<const char*, std::vector<const char*>> kFiles[] = {
        {"/etc", {kCache, kCacheTemp, "ld.so.conf"}},
        {"/var/cache/ldconfig", {"aux-cache", "aux-cache~"}},
    };
    for (const auto& [dir_path, names] : kFiles) {
        if (dir_path == std::string_view("/etc") && etc_type_ == Type::Missing) continue;
        const SharedFd dir = c_.find_dir(dir_path);
        if (!dir) continue;
        for (const char* name : names) {
            const os::FileInfo info = c_.files.stat_at(dir->get(), name);
            if (info.type != Type::Missing && info.type != Type::Regular)
                throw util::Error(util::ErrorKind::Invalid, EINVAL, "refresh the loader cache",
                                  util::join_path(dir_path, name),
                                  "is " + describe(info) + ", not a regular file; refusing");
            if (std::string_view(name) == kCache) cache_type_ = info.type;
            if (std::string_view(name) == kCacheTemp) cache_temp_type_ = info.type;
        }
    }
}

// /etc/ld.so.cache and what ldconfig writes it through are regular files
// or missing, /etc a directory (or missing: the writer creates it,
// ldconfig fails without it): anything else is refused here, before any
// open, whichever method writes the cache.
Type LoaderCache::check_etc() {
    const os::FileInfo etc = c_.files.stat_at(c_.root()->get(), "etc");
    if (etc.type != Type::Directory && etc.type != Type::Missing)
        throw util::Error(
            ENOTDIR, "check", "/etc",
            "is " + describe(etc) + ", not a directory (refusing to write the cache there)");
    return etc.type;
}

// /etc, as check_files() found it; null: no /etc for ldconfig.
SharedFd LoaderCache::cache_dir() {
    if (etc_type_ == Type::Missing && use_ldconfig(c_.plan, c_.target)) return nullptr;
    return c_.resolve_dir("/etc");
}

void LoaderCache::refresh() {
    SharedFd etc = cache_dir();
    if (use_ldconfig(c_.plan, c_.target)) {
        run_ldconfig();
        return;
    }
    c_.mounts.check(etc, "/etc/ld.so.cache");
    // The image's cache, if any: read by descriptor, never following a link.
    std::optional<os::RegularFile> original;
    std::optional<ldcache::Cache> image;
    if (cache_type_ == Type::Regular) {
        original = c_.files.read_regular_at(etc->get(), kCache, ldcache::kMaxCacheSize);
        try {
            image = ldcache::parse(original->data, "/etc/ld.so.cache");
        } catch (const util::Error& e) {
            util::logger().warn("{}; writing a cache of the injected libraries alone", e.what());
        }
    }
    // ldconfig rescans the refreshed directories: an image entry there
    // whose file is gone (an earlier start's driver file, removed above)
    // goes too. One listing per directory (a real image's cache names
    // hundreds of files there), never following anything.
    if (image) drop_gone_entries(*image);
    const std::size_t image_entries = image ? image->entries.size() : 0;
    const std::string bytes = ldcache::serialize(
        ldcache::merge(std::move(image), c_.plan.ldcache_libraries, c_.plan.library_dirs));
    // The new cache is written as ld.so.cache~, as ldconfig does; a leftover
    // there (regular, checked above) is the image's and stays as it is: ours
    // then goes through a name of gpubind's (a failed start leaves both).
    const std::string temp =
        cache_temp_type_ == Type::Missing ? std::string(kCacheTemp) : own_temp_name();
    // The new file is created as the container's root; it keeps the
    // original's owner (set by the host's root where that is someone else)
    // and permissions, or gets 0644 as ldconfig gives it.
    const os::Owner creator = c_.owner();
    const unsigned mode = original ? (original->mode & 0777) : 0644;
    std::optional<os::Owner> chown_to;
    if (original && (os::Owner{original->uid, original->gid} != creator) &&
        !c_.target.join_user_ns && !c_.target.in_place)
        chown_to = os::Owner{original->uid, original->gid};
    util::logger().debug("loader cache: {} entries, {} bytes ({} injected)", image_entries,
                         bytes.size(), c_.plan.ldcache_libraries.size());
    Undo undo{original ? Undo::Kind::RestoreCache : Undo::Kind::RemoveFile, etc, kCache,
              "/etc/ld.so.cache"};
    undo.other = temp;
    if (original) undo.original = std::make_shared<const os::RegularFile>(std::move(*original));
    // Its undo recorded as soon as it is there: as_owner's switch back to
    // root's ids may fail after it (the rollback then removes it).
    auto replace = [&](std::optional<os::Owner> to) {
        c_.files.replace_file_at(etc->get(), temp, kCache, bytes, mode, to);
        c_.undo.push_back(std::move(undo));
    };
    if (chown_to)
        replace(chown_to);
    else
        c_.as_owner([&] { replace(std::nullopt); });
}

// ldconfig, confined (System::run), writes the cache into its own scratch
// and reads the image without writing to it; the cache comes back here
// and is put in place by descriptor.
void LoaderCache::run_ldconfig() {
    const Target& target = c_.target;
    const std::string out =
        std::string(os::kLdconfigScratch) + "/" + std::string(os::kLdconfigOutput);
    std::vector<std::string> args = {"-r", target.rootfs.string(), "-X", "-C", out};
    for (const auto& d : c_.plan.library_dirs) args.push_back(d);
    // The root of ldconfig's user namespace: the container's root where it
    // has a user namespace (its host ids; itself when rootless), else an
    // unprivileged host id (System::run).
    const int exe = c_.host.ldconfig.get();
    const std::string path = target.ldconfig.string();
    std::string cache;
    if (c_.chown())
        cache = c_.processes.run_as(c_.owner(), exe, path, args, target.ldconfig_timeout);
    else if (target.join_user_ns || target.in_place)
        cache = c_.processes.run_as(os::Owner{}, exe, path, args, target.ldconfig_timeout);
    else
        cache = c_.processes.run(exe, path, args, target.ldconfig_timeout);
    install_cache(cache);
}

// /etc/ld.so.cache replaced: written under a new name (O_CREAT|O_EXCL|
// O_NOFOLLOW) in /etc on the root's own mount, then renamed over a missing
// one or exchanged with the image's (whose old contents are removed once
// in place). Undone like the rest until then.
void LoaderCache::install_cache(const std::string& cache) {
    SharedFd etc = c_.resolve_dir("/etc");
    c_.mounts.check(etc, "/etc/ld.so.cache");
    const std::string name = kCache;  // missing or regular (check_files)
    const std::string temp = own_temp_name();
    // The image's cache, read before it is replaced: a failure after its
    // removal below (the way back to the host's namespace) puts it back as
    // it was (its bytes, owner and mode), as the writer's rollback does.
    std::optional<os::RegularFile> original;
    if (cache_type_ == Type::Regular)
        original = c_.files.read_regular_at(etc->get(), name, ldcache::kMaxCacheSize);
    c_.as_owner([&] {
        c_.files.write_file_at(etc->get(), temp, cache, 0644);
        c_.undo.push_back({Undo::Kind::RemoveFile, etc, temp, "/etc/" + temp});
    });
    if (cache_type_ == Type::Missing) {
        c_.files.rename_at(etc->get(), temp, name);
        Undo back{Undo::Kind::RenameBack, etc, temp, "/etc/ld.so.cache"};
        back.other = name;
        c_.undo.push_back(std::move(back));
        return;
    }
    c_.files.exchange_at(etc->get(), temp, name);
    Undo back{Undo::Kind::ExchangeBack, etc, temp, "/etc/ld.so.cache"};
    back.other = name;
    c_.undo.push_back(std::move(back));
    // The image's old cache, now under the temporary name.
    c_.files.remove(etc->get(), temp, false);
    c_.undo.pop_back();
    c_.undo.pop_back();
    Undo restore{Undo::Kind::RestoreCache, etc, name, "/etc/ld.so.cache"};
    restore.other = temp;
    restore.original = std::make_shared<const os::RegularFile>(std::move(*original));
    c_.undo.push_back(std::move(restore));
}

// A name in /etc for a file of gpubind's on its way to ld.so.cache.
std::string LoaderCache::own_temp_name() {
    return "ld.so.cache.gpubind-" + std::to_string(::getpid());
}

// The image's cache entries for files of the refreshed library
// directories that are no longer there, dropped: each name looked up in
// the directory's listing (taken once per start, Context::listing), nothing
// copied.
void LoaderCache::drop_gone_entries(ldcache::Cache& image) {
    std::vector<bool> gone(image.entries.size(), false);
    for (const auto& d : c_.plan.library_dirs) {
        const DirListing* names = nullptr;  // none: the directory is gone
        bool listed = false;
        for (std::size_t i = 0; i < image.entries.size(); ++i) {
            if (util::dir_name(image.entries[i].path) != d) continue;
            if (!listed) {
                listed = true;
                if (const SharedFd dir = c_.find_dir(d)) names = &c_.listing(dir, d);
            }
            gone[i] = !names || !names->contains(util::base_name(image.entries[i].path));
        }
    }
    auto& entries = image.entries;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < entries.size(); ++i)
        if (!gone[i]) {
            if (kept != i) entries[kept] = std::move(entries[i]);
            ++kept;
        }
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(kept), entries.end());
}

}  // namespace gpubind::exec
