// gpubind setup --nvidia-container-cli: the tools' nvidia-container-cli
// pointed at gpubind-nvc, what was there kept beside it and put back by
// --remove (setup.hpp, nvc_link).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "gpubind/os/safe_path.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "setup_files.hpp"

namespace gpubind::setup {

namespace fs = std::filesystem;
using detail::backup_of;

namespace {

// A link's text; nullopt for anything that is not a link.
std::optional<std::string> nvc_link_text(int dir, const std::string& name) {
    char buf[4096];
    const ssize_t n = ::readlinkat(dir, name.c_str(), buf, sizeof buf);
    if (n < 0 || static_cast<std::size_t>(n) == sizeof buf) return std::nullopt;
    return std::string(buf, static_cast<std::size_t>(n));
}

// What a directory entry is, for the report and errors.
std::string nvc_what_is(int dir, const std::string& name, const struct stat& st) {
    if (S_ISLNK(st.st_mode)) {
        const auto text = nvc_link_text(dir, name);
        return text ? "a symbolic link to " + *text : std::string("a symbolic link");
    }
    if (S_ISREG(st.st_mode)) return "a regular file";
    if (S_ISDIR(st.st_mode)) return "a directory";
    return "a special file";
}

// The entry's status without following a link; nullopt when there is none.
std::optional<struct stat> nvc_stat(int dir, const std::string& name, const fs::path& what) {
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return st;
    if (errno != ENOENT) util::throw_errno("stat", what.string());
    return std::nullopt;
}

}  // namespace

std::vector<std::string> nvc_link(const NvcLinkRequest& r, bool dry_run) {
    const fs::path nvc = r.nvc;
    const fs::path rel{kNvcLink};
    const fs::path link = r.prefix / rel;
    const fs::path backup = backup_of(link);
    const std::string name = rel.filename().string();
    const std::string backup_name = name + std::string(kBackupSuffix);
    const std::string op = r.remove ? "remove" : "set up";
    if (!nvc.is_absolute() || nvc.lexically_normal() != nvc || nvc == "/" / rel)
        util::throw_invalid(op, link.string(),
                            "the program to link to, " + r.nvc +
                                ", is not an absolute path without . or .. other than the link");

    // The directory resolved inside the prefix (usr/bin may be a link of that
    // tree); every name in it is then reached through its descriptor.
    const util::Fd root = util::open_or_throw(r.prefix, O_PATH | O_DIRECTORY);
    const util::Fd dir = os::open_in_root(root.get(), rel.parent_path(), O_PATH | O_DIRECTORY);
    if (const std::string bad = util::untrusted_dir(dir.get()); !bad.empty())
        throw util::Error(util::ErrorKind::Refused, EACCES, op, link.string(),
                          "its directory " + bad + "; refusing to change it");
    const auto now = nvc_stat(dir.get(), name, link);
    const auto saved = nvc_stat(dir.get(), backup_name, backup);
    const std::string what = now ? nvc_what_is(dir.get(), name, *now) : "";
    const auto text = now && S_ISLNK(now->st_mode) ? nvc_link_text(dir.get(), name) : std::nullopt;
    const bool ours = text && *text == r.nvc;

    if (saved && !S_ISREG(saved->st_mode) && !S_ISLNK(saved->st_mode))
        throw util::Error(util::ErrorKind::Refused, EEXIST, op, link.string(),
                          backup.string() + " is " + nvc_what_is(dir.get(), backup_name, *saved) +
                              ", not a backup gpubind made; nothing changed");

    if (r.remove) {
        if (now && !ours) {
            if (saved)
                throw util::Error(util::ErrorKind::Refused, EEXIST, op, link.string(),
                                  "is " + what + ", not gpubind's link to " + r.nvc +
                                      "; left it and " + backup.string() +
                                      " (putting the backup back would lose it)");
            return {(dry_run ? "would leave " : "unchanged ") + link.string() + " (" + what +
                    ", not gpubind's link)"};
        }
        if (!saved) {
            if (!now)
                return {(dry_run ? "would leave " : "unchanged ") + link.string() + " (not there)"};
            if (!dry_run && ::unlinkat(dir.get(), name.c_str(), 0) != 0)
                util::throw_errno("unlink", link.string());
            return {(dry_run ? "would remove " : "removed ") + link.string() + " -> " + r.nvc};
        }
        // The backup renamed over gpubind's link (or where nothing is).
        const std::string was = nvc_what_is(dir.get(), backup_name, *saved);
        if (!dry_run && (now ? ::renameat(dir.get(), backup_name.c_str(), dir.get(), name.c_str())
                             : ::renameat2(dir.get(), backup_name.c_str(), dir.get(), name.c_str(),
                                           RENAME_NOREPLACE)) != 0)
            util::throw_errno("rename", backup.string());
        return {(dry_run ? "would restore " : "restored ") + link.string() + " (" + was +
                ") from " + backup.string()};
    }

    // The program must be there: a link to nothing would break every tool that runs it.
    const fs::path program = r.prefix / nvc.relative_path();
    const util::Fd prog = os::try_open_in_root(root.get(), nvc, O_PATH);
    struct stat pst {};
    if (!prog)
        throw util::Error(
            util::ErrorKind::Invalid, ENOENT, op, link.string(),
            program.string() + " is not there: install gpubind-nvc, or name it with --nvc");
    if (::fstat(prog.get(), &pst) != 0) util::throw_errno("stat", program.string());
    if (!S_ISREG(pst.st_mode) || (pst.st_mode & 0111) == 0)
        throw util::Error(util::ErrorKind::Refused, EACCES, op, link.string(),
                          program.string() + " is not an executable file");

    if (ours) return {(dry_run ? "would leave " : "unchanged ") + link.string() + " -> " + r.nvc};
    if (now && S_ISLNK(now->st_mode)) {
        // update-alternatives' link that already leads to gpubind-nvc: left as it is.
        struct stat st {};
        if (const util::Fd to = os::try_open_in_root(root.get(), rel, O_PATH);
            to && ::fstat(to.get(), &st) == 0 && st.st_dev == pst.st_dev && st.st_ino == pst.st_ino)
            return {(dry_run ? "would leave " : "unchanged ") + link.string() + " (" + what +
                    ", which is " + r.nvc + ")"};
    }
    if (!now) {
        if (!dry_run && ::symlinkat(r.nvc.c_str(), dir.get(), name.c_str()) != 0)
            util::throw_errno("create link", link.string());
        return {(dry_run ? "would create " : "created ") + link.string() + " -> " + r.nvc};
    }
    if (!S_ISREG(now->st_mode) && !S_ISLNK(now->st_mode))
        throw util::Error(
            util::ErrorKind::Refused, EEXIST, op, link.string(),
            "is " + what + "; only a regular file or a symbolic link is replaced; nothing changed");
    if (saved)
        throw util::Error(util::ErrorKind::Refused, EEXIST, op, link.string(),
                          "is " + what + " and " + backup.string() +
                              " is there already (a second backup would lose the first): move "
                              "one away; nothing changed");
    const std::string done = link.string() + " (" + what + ") with a link to " + r.nvc +
                             "; the original " + (dry_run ? "kept" : "is") + " in " +
                             backup.string();
    if (dry_run) return {"would replace " + done};

    // The new link under a name made exclusively; the original hard-linked
    // (never followed) as the backup, made exclusively too; then the rename.
    std::string temp;
    for (int attempt = 0;; ++attempt) {
        temp = util::temporary_name(name);
        if (::symlinkat(r.nvc.c_str(), dir.get(), temp.c_str()) == 0) break;
        if (errno != EEXIST || attempt == 8)
            util::throw_errno("create link", (link.parent_path() / temp).string());
    }
    const auto undo = [&](int err, const char* what_op, const fs::path& where, bool drop_backup) {
        ::unlinkat(dir.get(), temp.c_str(), 0);
        if (drop_backup) ::unlinkat(dir.get(), backup_name.c_str(), 0);
        throw util::Error(err, what_op, where.string());
    };
    if (::linkat(dir.get(), name.c_str(), dir.get(), backup_name.c_str(), 0) != 0)
        undo(errno, "create backup", backup, false);
    // The backup is what was judged above, not something swapped in since.
    struct stat kept {};
    if (::fstatat(dir.get(), backup_name.c_str(), &kept, AT_SYMLINK_NOFOLLOW) != 0 ||
        kept.st_dev != now->st_dev || kept.st_ino != now->st_ino)
        undo(EAGAIN, "create backup", backup, true);
    if (::renameat(dir.get(), temp.c_str(), dir.get(), name.c_str()) != 0)
        undo(errno, "rename", link, true);
    return {"replaced " + done};
}

}  // namespace gpubind::setup
