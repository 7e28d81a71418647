// A rootfs as a failed start must leave it, for the walks that fail each
// call once (issue 49): test::tree (each entry's mode, a file's bytes, a
// link's target) and each entry's owner; and what differs between two.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "files.hpp"

namespace gpubind::test {

inline std::map<std::string, std::string> state(const std::filesystem::path& root) {
    std::map<std::string, std::string> out = tree(root);
    for (auto& [rel, what] : out) {
        struct stat st {};
        ::lstat((root / rel).c_str(), &st);
        what = std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid) + " " + what;
    }
    return out;
}

// What differs between two states, one line an entry (for a failure message).
inline std::string diff(const std::map<std::string, std::string>& a,
                        const std::map<std::string, std::string>& b) {
    std::string out;
    auto brief = [](const std::string& s) { return s.size() > 60 ? s.substr(0, 60) + "..." : s; };
    for (const auto& [k, v] : a)
        if (!b.count(k))
            out += "  gone: " + k + "\n";
        else if (b.at(k) != v)
            out += "  changed: " + k + " (" + brief(v) + " -> " + brief(b.at(k)) + ")\n";
    for (const auto& [k, v] : b)
        if (!a.count(k)) out += "  new: " + k + " (" + brief(v) + ")\n";
    return out;
}

// The lines of `b` that `a` lacks ("  new: ") and those gone from it
// ("  gone: "): a mount table's change, one mount a line.
inline std::string diff_lines(const std::string& a, const std::string& b) {
    const auto la = lines_of(a), lb = lines_of(b);
    std::string out;
    for (const auto& l : la)
        if (std::find(lb.begin(), lb.end(), l) == lb.end()) out += "  gone: " + l + "\n";
    for (const auto& l : lb)
        if (std::find(la.begin(), la.end(), l) == la.end()) out += "  new: " + l + "\n";
    return out;
}

}  // namespace gpubind::test
