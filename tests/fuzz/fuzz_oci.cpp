// libFuzzer target: the OCI state, the spec and the GPU request read from it.
// Whatever the bytes, each parser returns or throws gpubind::Error; a spec
// that parses is read as a request under both policies.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpubind/decide/oci.hpp"
#include "gpubind/decide/request.hpp"
#include "gpubind/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace gpubind;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    try {
        const decide::oci::State state = decide::oci::parse_state(bytes, "fuzz");
        if (state.pid <= 0 || !state.bundle.is_absolute()) std::abort();
    } catch (const util::Error&) {
    }
    try {
        const decide::oci::Spec spec = decide::oci::parse_spec(bytes, "/bundle");
        if (!spec.rootfs.is_absolute()) std::abort();
        for (bool strict : {false, true}) {
            config::Policy policy;
            policy.accept_volume_mounts = strict;
            policy.accept_envvar_unprivileged = !strict;
            try {
                const decide::Request request = decide::read_request(spec, policy);
                if (request.caps & ~policy.supported) std::abort();
            } catch (const util::Error&) {
            }
        }
    } catch (const util::Error&) {
    }
    return 0;
}
