// stale_entries(): what an earlier start left at the driver's names in a
// container directory, and what becomes of it (rules in owned.hpp).
#include "gpubind/exec/owned.hpp"

#include <algorithm>
#include <map>
#include <optional>

namespace gpubind::exec {

bool is_driver_version(std::string_view s) {
    if (s.empty() || s.front() < '0' || s.front() > '9' || s.back() < '0' || s.back() > '9')
        return false;
    if (s.find('.') == std::string_view::npos) return false;  // "1" is a soname's, not a driver's
    bool dot = false;
    for (char c : s) {
        if (c == '.') {
            if (dot) return false;  // ".." is no version
            dot = true;
        } else if (c >= '0' && c <= '9') {
            dot = false;
        } else {
            return false;
        }
    }
    return true;
}

namespace {

using Type = os::FileInfo::Type;

// The stem `name` is "<stem><version>" of, if any.
std::optional<std::string> stem_of(const decide::OwnedDir& owned, std::string_view name) {
    if (std::find(owned.links.begin(), owned.links.end(), name) != owned.links.end())
        return std::nullopt;
    for (const auto& stem : owned.stems)
        if (name.size() > stem.size() && name.starts_with(stem) &&
            is_driver_version(std::string_view(name).substr(stem.size())))
            return stem;
    return std::nullopt;
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

bool may_be_owned(const decide::OwnedDir& owned, std::string_view name) {
    return stem_of(owned, name) || contains(owned.links, name) || contains(owned.files, name);
}

std::vector<StaleEntry> stale_entries(const decide::OwnedDir& owned,
                                      const std::vector<DirEntry>& entries,
                                      const std::set<std::string>& planned) {
    using Action = StaleEntry::Action;
    std::vector<StaleEntry> out;
    std::map<std::string, const DirEntry*> by_name;
    for (const auto& e : entries) by_name[e.name] = &e;
    // The planned "<stem><current version>" of each stem mounted here now.
    std::map<std::string, std::string> current;
    for (const auto& name : planned)
        if (auto stem = stem_of(owned, name)) current[*stem] = name;

    std::set<std::string> removed;
    auto remove = [&](const DirEntry& e, std::string why) {
        out.push_back({e.name, Action::Remove, {}, std::move(why)});
        removed.insert(e.name);
    };
    for (const auto& e : entries) {
        if (planned.count(e.name)) continue;
        if (auto stem = stem_of(owned, e.name)) {
            auto now = current.find(*stem);
            if (e.info.type == Type::Regular && e.info.size == 0)
                remove(e, "an empty mount point of an earlier start");
            else if (now != current.end() && e.info.type == Type::Regular)
                out.push_back(
                    {e.name, Action::Cover, now->second,
                     "the image's own driver library, covered by the host's " + now->second});
            else if (now != current.end() && e.info.type == Type::Symlink)
                remove(e, "a link at a driver library's name (to " + e.link + ")");
        } else if (contains(owned.files, e.name) && e.info.type == Type::Regular &&
                   e.info.size == 0) {
            remove(e, "an empty mount point of an earlier start");
        }
    }
    // Links: to a library file, then development links to those links.
    for (int pass = 0; pass < 2; ++pass) {
        for (const auto& e : entries) {
            if (planned.count(e.name) || removed.count(e.name) || e.info.type != Type::Symlink ||
                !contains(owned.links, e.name))
                continue;
            const bool ours =
                pass == 0 ? stem_of(owned, e.link).has_value() : contains(owned.links, e.link);
            if (!ours) continue;
            const bool dangling = !by_name.count(e.link) || removed.count(e.link);
            if (dangling) remove(e, "a link to " + e.link + ", which is not there");
        }
    }
    return out;
}

}  // namespace gpubind::exec
