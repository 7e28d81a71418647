// The undo journal of a run: see util/journal.hpp.
#include "gpubind/util/journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gpubind/util/error.hpp"
#include "gpubind/util/file.hpp"
#include "gpubind/util/log.hpp"

namespace gpubind::util {

namespace fs = std::filesystem;

void Journal::file(const fs::path& path, const std::optional<std::string>& content, unsigned mode) {
    if (!files_.insert(path).second) return;
    entries_.push_back({Kind::File, path, content, mode});
}

void Journal::dirs_for(const fs::path& file) {
    std::vector<fs::path> missing;
    for (fs::path d = file.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path()) {
        struct stat st {};
        if (::lstat(d.c_str(), &st) == 0) break;
        if (errno != ENOENT) break;  // making it will say why
        missing.push_back(d);
    }
    for (auto d = missing.rbegin(); d != missing.rend(); ++d)
        entries_.push_back({Kind::MadeDir, *d, std::nullopt, 0});
}

void Journal::dir_removed(const fs::path& dir, unsigned mode) {
    entries_.push_back({Kind::RemovedDir, dir, std::nullopt, mode});
}

void Journal::undo() noexcept {
    for (auto e = entries_.rbegin(); e != entries_.rend(); ++e) {
        const std::string p = e->path.string();
        try {
            switch (e->kind) {
                case Kind::File:
                    if (e->content)
                        write_file_atomic(e->path, *e->content, {.mode = e->mode});
                    else if (::unlink(e->path.c_str()) != 0 && errno != ENOENT)
                        throw_errno("unlink", p);
                    break;
                case Kind::MadeDir:
                    if (::rmdir(e->path.c_str()) != 0 && errno != ENOENT)
                        throw_errno("remove directory", p);
                    break;
                case Kind::RemovedDir:
                    if (::mkdir(e->path.c_str(), e->mode) != 0 && errno != EEXIST)
                        throw_errno("make directory", p);
                    else if (::chmod(e->path.c_str(), e->mode) != 0)
                        throw_errno("chmod", p);
                    break;
            }
        } catch (const std::exception& err) {
            logger().error("undoing: {}; that change stays", err.what());
        }
    }
    entries_.clear();
}

}  // namespace gpubind::util
