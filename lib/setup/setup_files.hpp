// What setup.cpp and host.cpp share: reading the files they replace, and
// editing TOML in place. Private to the setup module.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpubind/setup/setup.hpp"
#include "gpubind/util/journal.hpp"
#include "gpubind/util/toml.hpp"

namespace gpubind::setup::detail {

// An engine's config, gpubind's backup of one or a file gpubind installed:
// absent (nullopt), or a regular file owned by root (or this user) that no
// one else may write, opened without following a link. Anything else there
// is an Error naming it: a link at a backup could hand another file's
// content to --remove.
inline constexpr std::size_t kMaxFileSize = 4u << 20;
Text read_text(const std::filesystem::path& path, std::size_t max_size = kMaxFileSize);

std::filesystem::path backup_of(const std::filesystem::path& path);

using Edit = std::function<Text(const Text&)>;
// The change to `path`: `add`, or with remove the backup if there is one,
// else `del` (the file and its backup read up to `max_size`).
Change edit(const std::filesystem::path& path, bool remove, const Edit& add, const Edit& del,
            const std::string& what_add, const std::string& what_remove,
            std::size_t max_size = kMaxFileSize);

void unlink_if_there(const std::filesystem::path& path);

using util::Journal;

// TOML: parsed (an Error naming `what` and the line when it does not parse),
// a basic string's text, and the byte offset of a toml++ position.
toml::table parse_toml(std::string_view text, const std::string& what);
std::string quote(std::string_view s);
std::size_t offset_of(std::string_view text, const toml::source_position& p);

}  // namespace gpubind::setup::detail
