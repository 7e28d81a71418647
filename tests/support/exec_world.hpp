// What the executor tests share: a recording world for a sample plan and
// helpers to read the calls it records (tests/unit/exec_*_test.cpp).
#pragma once

#include <unistd.h>

#include <tuple>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_program.hpp"
#include "errors.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/util/error.hpp"
#include "recording_system.hpp"

namespace gpubind::exec_test {

using test::RecordingSystem;
using ::testing::HasSubstr;
using Type = os::FileInfo::Type;

inline constexpr unsigned kLibFlags = util::kMountReadOnly | util::kMountNoSuid | util::kMountNoDev;
inline const std::string kAllow = "cgroup:/sys/fs/cgroup/devices/ctr/devices.allow";
inline const std::string kDeny = "cgroup:/sys/fs/cgroup/devices/ctr/devices.deny";

using test::fake_pid;

// The ldconfig method of the cache refresh: its calls are what most tests
// follow; exec_ldcache_test.cpp has the writer's own target.
inline exec::Target target() {
    return test::recording_target();
}

inline decide::Plan sample_plan() {
    decide::Plan plan;
    plan.devices.push_back(
        {{"/dev/nvidiactl", "/host/dev/nvidiactl", 195, 255, 0666}, "nvidiactl"});
    plan.devices.push_back({{"/dev/nvidia0", "/host/dev/nvidia0", 195, 0, 0666}, "GPU 0"});
    plan.mounts.push_back({"/host/usr/lib/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                           false, kLibFlags, "compute library"});
    plan.mounts.push_back(
        {"/host/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", false, kLibFlags, "utility binary"});
    plan.mounts.push_back({"/host/lib/firmware/nvidia/550.54.15", "/lib/firmware/nvidia/550.54.15",
                           true, kLibFlags | util::kMountNoExec, "firmware"});
    plan.symlinks.push_back({"/usr/lib/x86_64-linux-gnu/libcuda.so", "libcuda.so.1"});
    decide::ProcView view;
    view.version = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n";
    view.params = "ModifyDeviceFiles: 0\n";
    view.gpus.push_back({"0000:3b:00.0", "Model: \t\t Fake GPU\n"});
    view.capability_files.push_back("/host/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access");
    plan.proc = view;
    plan.library_dirs = {"/usr/lib/x86_64-linux-gnu"};
    plan.refresh_ldcache = true;
    return plan;
}

// The host holds every source; the image has /dev, /usr/lib, /usr/bin, /lib,
// /proc/driver but no /usr/lib/x86_64-linux-gnu or /lib/firmware.
inline void setup_world(RecordingSystem& sys, const decide::Plan& plan) {
    for (const auto& d : plan.devices)
        sys.host[d.node.host_path] = {Type::CharDevice, d.node.major, d.node.minor};
    for (const auto& m : plan.mounts)
        sys.host[m.source] = {m.directory ? Type::Directory : Type::Regular, 0, 0};
    if (plan.proc)
        for (const auto& c : plan.proc->capability_files) sys.host[c] = {Type::Regular};
    for (const char* d : {"/dev", "/usr", "/usr/lib", "/usr/bin", "/lib", "/proc", "/proc/driver"})
        sys.root[d] = {Type::Directory, 0, 0};
}

inline std::size_t index_of(const std::vector<std::string>& calls, const std::string& line) {
    auto it = std::find(calls.begin(), calls.end(), line);
    if (it == calls.end()) {
        ADD_FAILURE() << "no call '" << line << "'";
        return calls.size();
    }
    return static_cast<std::size_t>(it - calls.begin());
}

inline bool starts(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

// What undoes a call that changed the container or its cgroup, "" for none.
// Written from the meaning of the calls, not from the executor's code.
inline std::string undo_of(const std::string& line) {
    auto after = [&](const std::string& prefix) { return line.substr(prefix.size()); };
    if (starts(line, "make_dir root:")) return "remove " + after("make_dir ") + " (dir)";
    if (starts(line, "make_file root:")) return "remove " + after("make_file ");
    if (starts(line, "make_symlink root:")) {
        std::string rest = after("make_symlink ");
        return "remove " + rest.substr(0, rest.find(" -> "));
    }
    if (starts(line, "write_file_at root:")) return "remove " + after("write_file_at ");
    if (starts(line, "rename_at root:")) {
        const std::string rest = after("rename_at ");
        const std::size_t arrow = rest.find(" -> ");
        return "rename_at " + rest.substr(arrow + 4) + " -> " + rest.substr(0, arrow);
    }
    if (starts(line, "exchange_at root:")) return line;  // its own inverse
    if (starts(line, "attach ")) return "detach " + line.substr(line.find(" -> ") + 4);
    if (starts(line, "write_rule " + kAllow + " "))
        return "write_rule " + kDeny + line.substr(("write_rule " + kAllow).size());
    return "";
}

inline bool is_undo(const std::string& line) {
    return starts(line, "remove ") || starts(line, "detach ") || starts(line, "rename_at ") ||
           starts(line, "exchange_at ") || starts(line, "write_rule " + kDeny);
}

}  // namespace gpubind::exec_test
