// What a run changed, undone when it fails: each file as it was before its
// first change (its bytes and mode, or its absence) and each directory made
// or removed, by path. `gpubind setup` (an install, a registration, a
// --remove) and `gpubind cdi refresh` either complete or leave the files as
// they found them (issue 49: every step fails once).
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpubind::util {

class Journal {
  public:
    Journal() = default;
    Journal(const Journal&) = delete;
    Journal& operator=(const Journal&) = delete;
    // A journal neither committed nor undone is undone: the run threw.
    ~Journal() { undo(); }

    // `path` is about to change: on undo it gets back `content` with `mode`
    // (nullopt: it was not there). Only its state before the first change
    // counts.
    void file(const std::filesystem::path& path, const std::optional<std::string>& content,
              unsigned mode);
    // The directories above `file` that do not exist yet, about to be made.
    void dirs_for(const std::filesystem::path& file);
    // The empty directory `dir`, of `mode`, about to be removed.
    void dir_removed(const std::filesystem::path& dir, unsigned mode);

    // Everything done stays.
    void commit() noexcept { entries_.clear(); }
    // Everything done is undone, latest first; what cannot be is logged.
    void undo() noexcept;

  private:
    enum class Kind { File, MadeDir, RemovedDir };
    struct Entry {
        Kind kind;
        std::filesystem::path path;
        std::optional<std::string> content;
        unsigned mode = 0;
    };
    std::vector<Entry> entries_;
    std::set<std::filesystem::path> files_;
};

}  // namespace gpubind::util
