#include "gpubind/cdi/yaml.hpp"

#include <yaml.h>

#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpubind/util/error.hpp"

namespace gpubind::cdi::yaml {

namespace {

using nlohmann::json;

bool plain_key(const std::string& key) {
    if (key.empty() || !((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' && key[0] <= 'Z')))
        return false;
    for (char c : key)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    return true;
}

// Whether code point `c` may stand as it is in a quoted scalar: YAML's
// printable set (libyaml refuses the rest raw: C0 and C1 controls, DEL, the
// BOM, FFFE/F) less YAML 1.1's line breaks (NEL, U+2028, U+2029), which a
// reader folds.
bool printable(char32_t c) {
    return (c >= 0x20 && c <= 0x7E) || (c >= 0xA0 && c <= 0xD7FF && c != 0x2028 && c != 0x2029) ||
           (c >= 0xE000 && c <= 0xFFFD && c != 0xFEFF) || (c >= 0x10000 && c <= 0x10FFFF);
}

// A double-quoted scalar: printable characters as they are (UTF-8), '"' and
// '\\' escaped, every other character as \xHH, \uHHHH or \UHHHHHHHH. The
// text is valid UTF-8 (a JSON string); a stray byte is escaped as \xHH.
std::string double_quoted(std::string_view s) {
    std::string out = "\"";
    for (std::size_t i = 0; i < s.size();) {
        const auto lead = static_cast<unsigned char>(s[i]);
        std::size_t len = lead < 0x80    ? 1
                          : lead >= 0xF0 ? 4
                          : lead >= 0xE0 ? 3
                          : lead >= 0xC0 ? 2
                                         : 0;
        char32_t c = len == 1   ? lead
                     : len == 2 ? lead & 0x1Fu
                     : len == 3 ? lead & 0x0Fu
                                : lead & 0x07u;
        for (std::size_t k = 1; k < len; ++k) {
            const auto b = i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u;
            if ((b & 0xC0u) != 0x80u) len = 0;  // not a continuation byte
            c = (c << 6) | (b & 0x3Fu);
        }
        if (len == 0) {  // not UTF-8
            out += fmt::format("\\x{:02X}", lead);
            ++i;
            continue;
        }
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (printable(c)) {
            out.append(s.substr(i, len));
        } else if (c <= 0xFF) {
            out += fmt::format("\\x{:02X}", static_cast<unsigned>(c));
        } else if (c <= 0xFFFF) {
            out += fmt::format("\\u{:04X}", static_cast<unsigned>(c));
        } else {
            out += fmt::format("\\U{:08X}", static_cast<unsigned>(c));
        }
        i += len;
    }
    return out + '"';
}

std::string key_text(const std::string& key) {
    return plain_key(key) ? key : double_quoted(key);
}

bool scalar(const json& v) {
    return !v.is_structured() || v.empty();
}

std::string scalar_text(const json& v) {
    if (v.is_array()) return "[]";
    if (v.is_object()) return "{}";
    if (v.is_string()) return double_quoted(v.get_ref<const std::string&>());
    return v.dump();  // numbers, booleans, null as JSON writes them
}

void emit(const json& v, std::size_t indent, std::string& out);

// A mapping's entries, the first one continuing the current line when
// `inline_first` (a sequence item "- key: ...").
void emit_object(const json& v, std::size_t indent, bool inline_first, std::string& out) {
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (!(first && inline_first)) out.append(indent, ' ');
        first = false;
        out += key_text(it.key());
        out += ':';
        if (scalar(*it)) {
            out += ' ' + scalar_text(*it) + '\n';
        } else if (it->is_array()) {
            out += '\n';
            emit(*it, indent, out);  // a mapping's sequence at the key's indentation
        } else {
            out += '\n';
            emit(*it, indent + 2, out);
        }
    }
}

void emit(const json& v, std::size_t indent, std::string& out) {
    if (v.is_object()) {
        emit_object(v, indent, false, out);
        return;
    }
    for (const auto& item : v) {
        out.append(indent, ' ');
        out += '-';
        if (scalar(item)) {
            out += ' ' + scalar_text(item) + '\n';
        } else if (item.is_object()) {
            out += ' ';
            emit_object(item, indent + 2, true, out);
        } else {
            out += '\n';
            emit(item, indent + 2, out);
        }
    }
}

// The parser and its current event, freed on every path.
class Parser {
  public:
    Parser(std::string_view text, std::string what) : what_(std::move(what)) {
        if (!yaml_parser_initialize(&parser_)) throw util::Error(ENOMEM, "parse YAML", what_);
        yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                     text.size());
    }
    ~Parser() {
        if (have_event_) yaml_event_delete(&event_);
        yaml_parser_delete(&parser_);
    }
    Parser(const Parser&) = delete;
    Parser& operator=(const Parser&) = delete;

    const yaml_event_t& next() {
        if (have_event_) yaml_event_delete(&event_);
        have_event_ = false;
        if (!yaml_parser_parse(&parser_, &event_))
            fail(parser_.problem_mark.line, parser_.problem ? parser_.problem : "malformed");
        have_event_ = true;
        return event_;
    }

    [[noreturn]] void fail(std::size_t line, std::string_view why) const {
        util::throw_invalid("parse YAML", what_, fmt::format("line {}: {}", line + 1, why));
    }
    [[noreturn]] void fail(std::string_view why) const { fail(event_.start_mark.line, why); }

    json node(unsigned depth) {
        if (depth > kMaxDepth) fail(fmt::format("nested deeper than {} levels", kMaxDepth));
        if (++nodes_ > kMaxNodes) fail(fmt::format("more than {} nodes", kMaxNodes));
        const yaml_event_t& e = event_;
        switch (e.type) {
            case YAML_ALIAS_EVENT:
                fail("aliases are not accepted");
            case YAML_SCALAR_EVENT: {
                check_plain(e.data.scalar.anchor, e.data.scalar.tag);
                std::string value(reinterpret_cast<const char*>(e.data.scalar.value),
                                  e.data.scalar.length);
                if (e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return value;
                return resolve(value);
            }
            case YAML_SEQUENCE_START_EVENT: {
                check_plain(e.data.sequence_start.anchor, e.data.sequence_start.tag);
                json out = json::array();
                while (next().type != YAML_SEQUENCE_END_EVENT) out.push_back(node(depth + 1));
                return out;
            }
            case YAML_MAPPING_START_EVENT: {
                check_plain(e.data.mapping_start.anchor, e.data.mapping_start.tag);
                json out = json::object();
                while (next().type != YAML_MAPPING_END_EVENT) {
                    if (event_.type != YAML_SCALAR_EVENT)
                        fail("a mapping key that is not a string");
                    check_plain(event_.data.scalar.anchor, event_.data.scalar.tag);
                    std::string key(reinterpret_cast<const char*>(event_.data.scalar.value),
                                    event_.data.scalar.length);
                    if (key == "<<" && event_.data.scalar.style == YAML_PLAIN_SCALAR_STYLE)
                        fail("merge keys are not accepted");
                    if (out.contains(key)) fail("duplicate key \"" + key + "\"");
                    next();
                    out[key] = node(depth + 1);
                }
                return out;
            }
            default:
                fail("unexpected YAML event");
        }
    }

  private:
    void check_plain(const yaml_char_t* anchor, const yaml_char_t* tag) const {
        if (anchor) fail("anchors are not accepted");
        if (tag) fail("tags are not accepted");
    }

    static json resolve(const std::string& s) {
        if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
        if (s == "true" || s == "True" || s == "TRUE") return true;
        if (s == "false" || s == "False" || s == "FALSE") return false;
        std::string_view digits = s;
        bool negative = false;
        if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
            negative = digits[0] == '-';
            digits.remove_prefix(1);
        }
        int base = 10;
        if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
            base = 16;
            digits.remove_prefix(2);
        } else if (digits.size() > 1 && digits[0] == '0') {
            base = 8;
            digits.remove_prefix(1);
        }
        if (!digits.empty() && digits.size() <= 18) {
            std::string d(digits);
            char* end = nullptr;
            const long long n = std::strtoll(d.c_str(), &end, base);
            if (end && *end == '\0' && d.find_first_of("+- ") == std::string::npos) {
                if (negative) return -n;
                return static_cast<unsigned long long>(n);
            }
        }
        if (s.find_first_not_of("0123456789.eE+-") == std::string::npos &&
            s.find_first_of("0123456789") != std::string::npos) {
            char* end = nullptr;
            const double d = std::strtod(s.c_str(), &end);
            if (end && *end == '\0') return d;
        }
        return s;
    }

    std::string what_;
    yaml_parser_t parser_{};
    yaml_event_t event_{};
    bool have_event_ = false;
    std::size_t nodes_ = 0;
};

}  // namespace

std::string dump(const json& doc) {
    std::string out;
    if (scalar(doc)) return scalar_text(doc) + "\n";
    emit(doc, 0, out);
    return out;
}

json parse(std::string_view text, const std::string& what) {
    Parser p(text, what);
    if (p.next().type != YAML_STREAM_START_EVENT) p.fail("no YAML stream");
    if (p.next().type != YAML_DOCUMENT_START_EVENT) p.fail("no YAML document");
    p.next();
    json doc = p.node(0);
    if (p.next().type != YAML_DOCUMENT_END_EVENT) p.fail("the document does not end");
    if (p.next().type != YAML_STREAM_END_EVENT) p.fail("more than one document");
    return doc;
}

}  // namespace gpubind::cdi::yaml
