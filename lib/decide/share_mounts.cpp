// A share carried by /dev/null mounts the pod cannot make: see decide/share.hpp.
#include <filesystem>

#include <fmt/format.h>

#include "gpubind/decide/share.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"

namespace gpubind::decide {

namespace {

// Sets `field` from the mount `dest`, or checks it agrees with the one before.
template <class T>
void from_mount(T& field, T value, std::string& set_by, const std::string& dest,
                const std::string& where) {
    if (!set_by.empty() && field != value)
        util::throw_invalid("read request", where,
                            fmt::format("share mounts {} and {} disagree", set_by, dest));
    field = value;
    set_by = dest;
}

}  // namespace

ShareRequest read_container_share(const oci::Spec& spec, const config::Policy& /*policy*/,
                                  const std::string& container, const std::string& where) {
    ShareRequest share;
    std::string memory_by, compute_by;
    for (const auto& m : spec.mounts) {
        if (m.source != "/dev/null") continue;  // an emptyDir at the path is the pod's own
        const auto rel = std::filesystem::path(m.destination)
                             .lexically_normal()
                             .lexically_relative(kShareMountDir);
        std::vector<std::string> parts;
        for (const auto& part : rel)
            if (!part.empty()) parts.push_back(part.string());
        if (parts.empty() || parts[0] == "." || parts[0] == "..") continue;
        // 0: not a number (digits only), or none.
        std::uint64_t n = 0;
        if (parts.size() == 2 && parts[1].find_first_not_of("0123456789") == std::string::npos)
            n = util::parse_unsigned(parts[1]).value_or(0);
        if (parts[0] == "memory" && n > 0)
            from_mount(share.memory, n, memory_by, m.destination, where);
        else if (parts[0] == "compute" && n >= 1 && n <= 100)
            from_mount(share.compute, static_cast<unsigned>(n), compute_by, m.destination, where);
        else
            util::throw_invalid("read request", where,
                                fmt::format("{}: not a share mount ({}/memory/<bytes> or "
                                            "{}/compute/<percent>)",
                                            m.destination, kShareMountDir, kShareMountDir));
    }
    if (!share.asked()) return read_share(spec, where);
    share.asked_by = memory_by.empty() ? compute_by : memory_by;
    // The variables ask nothing where the mounts are; one asking otherwise is said.
    try {
        const ShareRequest env = read_share(spec, where);
        if (env.asked() && (env.memory != share.memory || env.compute != share.compute ||
                            !env.device_memory.empty()))
            util::logger().warn("{}: {} is not obeyed: the share is the device plugin's mount {}",
                                container, env.asked_by, share.asked_by);
    } catch (const util::Error& e) {
        util::logger().warn("{}: share variables not obeyed ({}): the share is {}", container,
                            e.what(), share.asked_by);
    }
    return share;
}

}  // namespace gpubind::decide
