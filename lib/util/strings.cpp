#include "gpubind/util/strings.hpp"

#include <algorithm>
#include <charconv>

namespace gpubind::util {

std::string_view trim(std::string_view s) noexcept {
    constexpr std::string_view kSpace = " \t\r\n\v\f";
    auto b = s.find_first_not_of(kSpace);
    if (b == std::string_view::npos) return {};
    auto e = s.find_last_not_of(kSpace);
    return s.substr(b, e - b + 1);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    for (;;) {
        auto pos = s.find(sep, start);
        if (pos == std::string_view::npos) {
            out.push_back(s.substr(start));
            return out;
        }
        out.push_back(s.substr(start, pos - start));
        start = pos + 1;
    }
}

std::optional<unsigned long> parse_unsigned(std::string_view s) noexcept {
    if (s.empty()) return std::nullopt;
    unsigned long v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
}

std::string to_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
}

std::string escape_control(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c == 0x7f) {
            static constexpr char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 0xf];
        } else {
            out += ch;
        }
    }
    return out;
}

std::string join_path(std::string_view dir, std::string_view name) {
    while (!name.empty() && name.front() == '/') name.remove_prefix(1);
    while (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
    std::string out;
    out.reserve(dir.size() + 1 + name.size());
    out.append(dir).append(1, '/').append(name);
    return out;
}

namespace {

// Whether `path` is already what normal_path() makes of it: no empty part
// (no "//", no trailing '/'), no "." and no "..".
bool is_normal_path(std::string_view path) noexcept {
    if (path == "/") return true;
    if (path.empty() || path.back() == '/') return false;
    std::size_t start = path.front() == '/' ? 1 : 0;
    for (;;) {
        const std::size_t end = std::min(path.find('/', start), path.size());
        const std::string_view part = path.substr(start, end - start);
        if (part.empty() || part == "." || part == "..") return false;
        if (end == path.size()) return true;
        start = end + 1;
    }
}

}  // namespace

std::string normal_path(std::string_view path) {
    if (path.empty()) return {};
    if (is_normal_path(path)) return std::string(path);
    const bool absolute = path.front() == '/';
    std::vector<std::string_view> parts;
    for (std::string_view part : split(path, '/')) {
        if (part.empty() || part == ".") continue;
        if (part != "..") {
            parts.push_back(part);
        } else if (!parts.empty() && parts.back() != "..") {
            parts.pop_back();
        } else if (!absolute) {
            parts.push_back(part);  // above a relative path's start; "/.." is "/"
        }
    }
    std::string out(absolute ? "/" : "");
    for (std::size_t i = 0; i < parts.size(); ++i) out.append(i > 0 ? "/" : "").append(parts[i]);
    return out.empty() ? "." : out;
}

std::string_view base_name(std::string_view path) noexcept {
    const std::size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view dir_name(std::string_view path) noexcept {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string_view::npos) return {};
    return slash == 0 ? path.substr(0, 1) : path.substr(0, slash);
}

bool json_depth_within(std::string_view text, std::size_t max_depth) noexcept {
    std::size_t depth = 0;
    bool in_string = false, escaped = false;
    for (const char c : text) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return false;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return true;
}

}  // namespace gpubind::util
