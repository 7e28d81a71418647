// gpubind_config_gen CONFIG_TOML OUTPUT_CPP: the build-time step that turns
// config/config.toml into the built-in defaults (default_config.cpp), read
// by the library's own config reader. A bad file fails the build with the
// reader's message ("line N: ...", or the key and why).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "config_builtin.hpp"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: gpubind_config_gen CONFIG_TOML OUTPUT_CPP\n");
        return 2;
    }
    const std::filesystem::path in = argv[1], out = argv[2];
    try {
        std::ifstream file(in, std::ios::binary);
        if (!file) throw std::runtime_error("cannot read " + in.string());
        const std::string text{std::istreambuf_iterator<char>(file),
                               std::istreambuf_iterator<char>()};
        const std::string source = gpubind::config::detail::builtin_config_source(
            gpubind::config::detail::parse_builtin_config(text, in.string()), text);
        // Written beside, then renamed: an interrupted build leaves no half file.
        const std::filesystem::path tmp = out.string() + ".tmp";
        {
            std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
            o << source;
            if (!o.flush()) throw std::runtime_error("cannot write " + tmp.string());
        }
        std::filesystem::rename(tmp, out);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpubind_config_gen: %s\n", e.what());
        return 1;
    }
    return 0;
}
