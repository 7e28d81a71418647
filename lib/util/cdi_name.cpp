#include "gpubind/util/cdi_name.hpp"

namespace gpubind::util {

namespace {

bool letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool alnum(char c) {
    return letter(c) || (c >= '0' && c <= '9');
}

std::optional<std::string> label_error(std::string_view what, std::string_view s) {
    if (s.empty()) return std::string(what) + " is empty";
    if (!letter(s.front())) return std::string(what) + " must start with a letter";
    if (!alnum(s.back())) return std::string(what) + " must end with a letter or digit";
    for (char c : s)
        if (!alnum(c) && c != '_' && c != '-' && c != '.')
            return std::string(what) +
                   " holds a character other than letters, digits, '_', '-', '.'";
    return std::nullopt;
}

}  // namespace

std::optional<std::string> kind_error(std::string_view kind) {
    const auto slash = kind.find('/');
    if (slash == std::string_view::npos) return "no '/' between vendor and class";
    if (auto e = label_error("the vendor", kind.substr(0, slash))) return e;
    return label_error("the class", kind.substr(slash + 1));
}

std::optional<std::string> vendor_error(std::string_view vendor) {
    return label_error("the vendor", vendor);
}

std::string_view vendor_of(std::string_view kind) {
    return kind.substr(0, kind.find('/'));
}

std::optional<std::string> device_name_error(std::string_view name) {
    if (name.empty()) return "the device name is empty";
    if (!alnum(name.front()) || !alnum(name.back()))
        return "the device name must start and end with a letter or digit";
    for (char c : name)
        if (!alnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
            return "the device name holds a character other than letters, digits, '_', '-', "
                   "'.', ':'";
    return std::nullopt;
}

bool looks_qualified(std::string_view device) {
    const auto eq = device.find('=');
    const auto slash = device.find('/');
    return eq != std::string_view::npos && slash != std::string_view::npos && slash < eq &&
           !device.starts_with('/');
}

std::optional<QualifiedName> parse_qualified(std::string_view device) {
    if (!looks_qualified(device)) return std::nullopt;
    const auto eq = device.find('=');
    QualifiedName q{std::string(device.substr(0, eq)), std::string(device.substr(eq + 1))};
    if (kind_error(q.kind) || device_name_error(q.name)) return std::nullopt;
    return q;
}

}  // namespace gpubind::util
