// `gpubind setup --dev-char-links`: see setup.hpp.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include <fmt/format.h>

#include "gpubind/node/node_read.hpp"
#include "gpubind/setup/setup.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind::setup {

namespace fs = std::filesystem;

std::vector<std::string> dev_char_links(const fs::path& dev_root, const fs::path& proc_root,
                                        bool dry_run) {
    const fs::path dev = dev_root / "dev";
    // The majors NVIDIA's drivers registered ("nvidia-frontend", "nvidia-uvm",
    // "nvidia-caps", ...; 195 is always theirs): a node named like theirs with
    // another major (a disk's) must not get the link a system device has.
    std::set<unsigned> nvidia_majors = {195};
    for (const auto& [driver, major] : gpubind::node::detail::read_majors(proc_root / "devices"))
        if (driver.starts_with("nvidia")) nvidia_majors.insert(major);
    // NVIDIA's character devices, as paths relative to dev/.
    std::vector<std::pair<std::string, struct stat>> nodes;
    auto add = [&](const std::string& rel) {
        struct stat st {};
        if (::lstat((dev / rel).c_str(), &st) == 0 && S_ISCHR(st.st_mode))
            nodes.emplace_back(rel, st);
    };
    for (const auto& name : gpubind::node::detail::list_dir(dev))
        if (name.rfind("nvidia", 0) == 0) add(name);
    for (const char* sub : {"nvidia-caps", "nvidia-caps-imex-channels"})
        for (const auto& name : gpubind::node::detail::list_dir(dev / sub))
            add(std::string(sub) + "/" + name);

    std::vector<std::string> report;
    std::erase_if(nodes, [&](const auto& node) {
        const unsigned major = ::major(node.second.st_rdev);
        if (nvidia_majors.contains(major)) return false;
        report.push_back(fmt::format("skipped {}: major {} is not an NVIDIA driver's ({})",
                                     (dev / node.first).string(), major,
                                     (proc_root / "devices").string()));
        return true;
    });
    const fs::path dir = dev / "char";
    if (!nodes.empty() && !dry_run && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        util::throw_errno("mkdir", dir.string());
    for (const auto& [rel, st] : nodes) {
        const std::string name = fmt::format("{}:{}", ::major(st.st_rdev), ::minor(st.st_rdev));
        const fs::path link = dir / name;
        const std::string target = "../" + rel;
        char buf[4096];
        const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
        const bool exists = n >= 0 || errno != ENOENT;
        if (n >= 0 && std::string_view(buf, static_cast<std::size_t>(n)) == target) {
            report.push_back("unchanged " + link.string() + " -> " + target);
            continue;
        }
        struct stat lst {};
        if (exists && ::lstat(link.c_str(), &lst) == 0 && !S_ISLNK(lst.st_mode))
            throw util::Error(EEXIST, "link", link.string(),
                              "exists and is not a symbolic link; left alone");
        const std::string verb = exists ? "replace" : "create";
        if (dry_run) {
            report.push_back("would " + verb + " " + link.string() + " -> " + target);
            continue;
        }
        const fs::path temp = dir / (name + ".gpubind-new");
        ::unlink(temp.c_str());
        if (::symlink(target.c_str(), temp.c_str()) != 0)
            util::throw_errno("symlink", temp.string());
        if (::rename(temp.c_str(), link.c_str()) != 0) {
            const int err = errno;
            ::unlink(temp.c_str());
            throw util::Error(err, "rename", link.string());
        }
        report.push_back((exists ? "replaced " : "created ") + link.string() + " -> " + target);
    }
    if (nodes.empty()) report.push_back("no NVIDIA device node under " + dev.string());
    return report;
}

}  // namespace gpubind::setup
