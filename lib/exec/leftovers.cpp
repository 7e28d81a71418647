// What an earlier start or the image left in the container that this plan
// does not put there: gpubind's stale files, and the driver's names in the
// directories it owns (owned.hpp says which).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gpubind/exec/owned.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

#include "context.hpp"

namespace gpubind::exec {

namespace {

// The names the plan itself mounts or links in `dir`: handled by their own steps.
std::set<std::string> planned_names(const decide::Plan& plan, std::string_view dir) {
    std::set<std::string> planned;
    for (const auto& m : plan.mounts)
        if (util::dir_name(m.target) == dir) planned.emplace(util::base_name(m.target));
    for (const auto& l : plan.symlinks)
        if (util::dir_name(l.path) == dir) planned.emplace(util::base_name(l.path));
    return planned;
}

// The image's own copy of a planned library, covered by the host's (at `p`).
void cover(Context& c, const std::string& p, const std::string& with, const std::string& why) {
    std::size_t i = 0;
    while (i < c.plan.mounts.size() && c.plan.mounts[i].target != with) ++i;
    if (i == c.plan.mounts.size()) return;
    util::logger().info("{}: {}", p, why);
    util::Fd copy = c.files.clone_tree(c.host.mount_trees[i].get());
    c.bind(copy, p, Context::PointKind::File, c.plan.mounts[i].flags);
}

}  // namespace

// A file an earlier start wrote that this plan does not: removed where it
// holds exactly what gpubind wrote, left alone otherwise.
void remove_stale_file(Context& c, const decide::PlannedFile& f) {
    check_container_path(f.path, "file");
    SharedFd dir = c.find_dir(util::dir_name(f.path));
    if (!dir || !c.mounts.may_clean(dir, f.path)) return;
    const std::string name(util::base_name(f.path));
    if (c.files.stat_at(dir->get(), name).type != Type::Regular) return;
    std::string old = c.files.read_regular_at(dir->get(), name, kMaxPlannedFile).data;
    if (old != f.content) return;
    util::logger().info("{}: removed ({})", f.path, f.why);
    c.remove_file(dir, f.path, std::move(old));
}

// The driver's names in one directory: what an earlier start or the image
// left there that this plan does not put there itself (owned.hpp).
void bring_up_to_date(Context& c, const decide::OwnedDir& owned) {
    check_container_path(owned.dir, "directory");
    SharedFd dir = c.find_dir(owned.dir);
    if (!dir || !c.mounts.may_clean(dir, owned.dir)) return;
    const std::set<std::string> planned = planned_names(c.plan, owned.dir);
    // Only the names that may be the driver's become strings: an image's
    // library directory holds hundreds of others.
    std::vector<DirEntry> entries;
    c.listing(dir, owned.dir).for_each([&](std::string_view name) {
        if (!may_be_owned(owned, name) || planned.count(std::string(name))) return;
        std::string n(name);
        os::FileInfo info = c.files.stat_at(dir->get(), n);
        std::string target;
        if (info.type == Type::Symlink) target = c.files.read_link_at(dir->get(), n);
        entries.push_back({std::move(n), info, std::move(target)});
    });
    for (const StaleEntry& e : stale_entries(owned, entries, planned)) {
        const std::string p = util::join_path(owned.dir, e.name);
        check_name(e.name, "entry of " + owned.dir);
        if (e.action == StaleEntry::Action::Cover) {
            cover(c, p, util::join_path(owned.dir, e.cover_with), e.why);
            continue;
        }
        const auto it = std::find_if(entries.begin(), entries.end(),
                                     [&](const DirEntry& d) { return d.name == e.name; });
        util::logger().info("{}: removed, {}", p, e.why);
        c.files.remove(dir->get(), e.name, false);
        c.forget(owned.dir, e.name);
        if (it != entries.end() && it->info.type == Type::Symlink)
            c.undo.push_back({Undo::Kind::RestoreLink, dir, e.name, p, it->link});
        else
            c.undo.push_back({Undo::Kind::RestoreFile, dir, e.name, p, {}});
    }
}

}  // namespace gpubind::exec
