// libFuzzer target: whatever the bytes, parse_config returns a config over
// the defaults or throws gpubind::Error(EINVAL) naming the key.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpubind/config/config.hpp"
#include "gpubind/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace gpubind;
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const config::Config config = config::parse_config(text, "fuzz.toml");
        if (!config.roots.driver.is_absolute() || !config.roots.proc.is_absolute()) std::abort();
        if (config.runtimes.empty()) std::abort();
    } catch (const util::Error& e) {
        if (e.code().value() != EINVAL) std::abort();
    }
    return 0;
}
