// What gpubind owns in a container's directory and what an earlier start left
// there: the pure part of bringing a restarted container up to date (the rule
// is in docs/design/container-ownership.md). The executor lists the directory and carries
// out what stale_entries() says, through System.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "gpubind/decide/plan.hpp"
#include "gpubind/os/system.hpp"

namespace gpubind::exec {

// One entry of a directory, as lstat and readlink (never following) see it.
struct DirEntry {
    std::string name;
    os::FileInfo info;
    std::string link;  // a symlink's target
};

struct StaleEntry {
    enum class Action {
        Remove,  // unlink it (an empty file, a link): it is ours and of no use now
        Cover,   // the image's own copy of a planned library: the host's is mounted over it
    };
    std::string name;
    Action action = Action::Remove;
    std::string cover_with;  // Cover: the planned file name in the same directory
    std::string why;         // for the log
};

// Whether `s` is a driver version: digits and at least one dot, no two dots
// in a row, starting and ending with a digit ("550.54.15"; not "1").
bool is_driver_version(std::string_view s);

// Whether an entry named `name` of owned.dir can concern stale_entries() (so
// that the executor stats only those).
bool may_be_owned(const decide::OwnedDir& owned, std::string_view name);

// What to do with the entries of `owned.dir`, given the names the plan puts
// there now (`planned`: mount targets and link names, which the executor
// handles itself). Only entries not planned are looked at, and only these:
//  - "<stem><version>" (a stem of owned.stems, any driver version): an empty
//    regular file (a mount point an earlier start left) is removed; when the
//    plan mounts "<stem><current version>" here, a non-empty regular file
//    (the image's own copy) is covered by the host's and a symbolic link is
//    removed;
//  - a name of owned.links that is a symbolic link to "<stem><version>" or to
//    another owned link, where what it points to is missing or removed here
//    (a dangling link an earlier start made): removed;
//  - a name of owned.files that is an empty regular file: removed.
// Anything else, and every directory, is left alone. Nothing is followed.
std::vector<StaleEntry> stale_entries(const decide::OwnedDir& owned,
                                      const std::vector<DirEntry>& entries,
                                      const std::set<std::string>& planned);

}  // namespace gpubind::exec
