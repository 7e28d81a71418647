// The simulated node's driver files: the libraries (the compiled fake NVML
// and CUDA, ELF stubs for the rest), the programs, the daemons' sockets, the
// firmware, and etc/ld.so.cache made by ldconfig.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/fd.hpp"
#include "gpubind/util/log.hpp"
#include "gpubind/util/strings.hpp"
#include "sim_writer.hpp"

// The fake driver's files, embedded by lib/fake/CMakeLists.txt (gpubind_sim_blobs).
extern "C" {
extern const unsigned char gpubind_blob_nvml_start[], gpubind_blob_nvml_end[];
extern const unsigned char gpubind_blob_cuda_start[], gpubind_blob_cuda_end[];
extern const unsigned char gpubind_blob_smi_start[], gpubind_blob_smi_end[];
extern const unsigned char gpubind_blob_tool_start[], gpubind_blob_tool_end[];
extern const unsigned char gpubind_blob_mps_start[], gpubind_blob_mps_end[];
}

namespace gpubind::sim::detail {

namespace {

// The bytes between two of those symbols (distinct objects to the compiler,
// hence the address arithmetic).
std::string_view blob(const unsigned char* start, const unsigned char* end) {
    auto size = reinterpret_cast<std::uintptr_t>(end) - reinterpret_cast<std::uintptr_t>(start);
    return {reinterpret_cast<const char*>(start), static_cast<std::size_t>(size)};
}

enum class Real { None, Nvml, Cuda };

// One library of the driver. Its file is <stem>.<version>; its soname is
// <stem>.<soname_suffix>, or the file name itself when the suffix is empty.
struct LibraryDef {
    std::string_view stem;
    std::string_view soname_suffix;
    std::string_view capability;
    bool compat32;            // also installed as a 32-bit copy
    std::string_view subdir;  // below the library directory
    Real real;                // the compiled fake (64-bit only), else an ELF stub
};

constexpr LibraryDef kLibraries[] = {
    {"libnvidia-ml.so", "1", "utility", true, "", Real::Nvml},
    {"libnvidia-cfg.so", "1", "utility", false, "", Real::None},
    {"libcuda.so", "1", "compute", true, "", Real::Cuda},
    {"libcudadebugger.so", "1", "compute", false, "", Real::None},
    {"libnvidia-opencl.so", "1", "compute", true, "", Real::None},
    {"libnvidia-ptxjitcompiler.so", "1", "compute", true, "", Real::None},
    {"libnvidia-nvvm.so", "4", "compute", false, "", Real::None},
    {"libnvidia-gpucomp.so", "", "compute", false, "", Real::None},
    {"libnvidia-allocator.so", "1", "compute", false, "", Real::None},
    {"libnvcuvid.so", "1", "video", false, "", Real::None},
    {"libnvidia-encode.so", "1", "video", false, "", Real::None},
    {"libnvidia-opticalflow.so", "1", "video", false, "", Real::None},
    {"libvdpau_nvidia.so", "1", "video", false, "vdpau", Real::None},
    {"libnvidia-eglcore.so", "", "graphics", true, "", Real::None},
    {"libnvidia-glcore.so", "", "graphics", true, "", Real::None},
    {"libnvidia-tls.so", "", "graphics", true, "", Real::None},
    {"libnvidia-glsi.so", "", "graphics", true, "", Real::None},
    {"libnvidia-fbc.so", "1", "graphics", true, "", Real::None},
    {"libnvidia-rtcore.so", "", "graphics", false, "", Real::None},
    {"libnvoptix.so", "1", "graphics", false, "", Real::None},
    {"libGLX_nvidia.so", "0", "graphics", true, "", Real::None},
    {"libEGL_nvidia.so", "0", "graphics", true, "", Real::None},
    {"libGLESv2_nvidia.so", "2", "graphics", true, "", Real::None},
    {"libGLESv1_CM_nvidia.so", "1", "graphics", true, "", Real::None},
    {"libnvidia-glvkspirv.so", "", "graphics", true, "", Real::None},
    {"libnvidia-ngx.so", "1", "ngx", false, "", Real::None},
};

bool graphics_only(std::string_view capability) {
    return capability == "video" || capability == "graphics" || capability == "ngx";
}

struct BinaryDef {
    std::string_view name;
    std::string_view capability;
    bool smi;          // the fake nvidia-smi, else the stand-in tool
    bool mps = false;  // the fake MPS control daemon
};

constexpr BinaryDef kBinaries[] = {
    {"nvidia-smi", "utility", true},
    {"nvidia-debugdump", "utility", false},
    {"nvidia-persistenced", "utility", false},
    {"nvidia-cuda-mps-control", "compute", false, true},
    {"nvidia-cuda-mps-server", "compute", false},
};

}  // namespace

void Writer::libraries() {
    const Spec& spec = manifest_.spec;
    const std::string& version = spec.driver_version;
    for (bool compat32 : {false, true}) {
        if (compat32 && !spec.compat32) continue;
        const std::string libdir = lib_dir(compat32);
        for (const auto& lib : kLibraries) {
            if (compat32 && !lib.compat32) continue;
            if (!spec.graphics && graphics_only(lib.capability)) continue;
            std::string stem(lib.stem);
            std::string file = stem + "." + version;
            std::string soname =
                lib.soname_suffix.empty() ? file : stem + "." + std::string(lib.soname_suffix);
            std::string rel_dir(libdir);
            if (!lib.subdir.empty()) rel_dir += "/" + std::string(lib.subdir);
            fs::path dir = at(rel_dir);
            std::string data;
            if (!compat32 && lib.real == Real::Nvml)
                data = std::string(blob(gpubind_blob_nvml_start, gpubind_blob_nvml_end));
            else if (!compat32 && lib.real == Real::Cuda)
                data = std::string(blob(gpubind_blob_cuda_start, gpubind_blob_cuda_end));
            else
                data = elf::make_shared_object(
                    compat32 ? elf::kCompat32Machine : elf::kNativeMachine, soname);
            write(dir / file, data, 0755);
            // The soname link, and the development link for libraries with a
            // short soname (the installer makes none for "libX.so.<version>").
            if (soname != file) {
                symlink(file, dir / soname);
                symlink(soname, dir / stem);
            }
            record("library", soname, "/" + rel_dir + "/" + soname, "/" + rel_dir + "/" + file,
                   lib.capability, compat32);
        }
    }
}

void Writer::binaries() {
    const std::string& prefix = manifest_.spec.prefix;
    for (const auto& bin : kBinaries) {
        if (!manifest_.spec.mps && bin.name.starts_with("nvidia-cuda-mps")) continue;
        std::string_view data = bin.smi   ? blob(gpubind_blob_smi_start, gpubind_blob_smi_end)
                                : bin.mps ? blob(gpubind_blob_mps_start, gpubind_blob_mps_end)
                                          : blob(gpubind_blob_tool_start, gpubind_blob_tool_end);
        const std::string name(bin.name);
        std::string rel = (prefix.empty() ? "usr" : prefix) + "/bin/" + name;
        write(at(rel), data, 0755);
        if (!prefix.empty())  // the sandbox's wrapper: a path only the host has
            write(at("usr/bin/" + name), fmt::format("#!/bin/sh\nexec /{} \"$@\"\n", rel), 0755);
        record("binary", name, "/" + rel, "/" + rel, bin.capability, false);
    }
}

void Writer::ipcs() {
    // nvidia-container-cli gives both daemons' sockets with the utility
    // capability and the MPS pipe directory with compute.
    for (std::string_view daemon : {"nvidia-persistenced", "nvidia-fabricmanager"}) {
        std::string rel = "run/" + std::string(daemon) + "/socket";
        socket(rel);
        record("ipc", std::string(daemon), "/" + rel, "/" + rel, "utility", false);
    }
    mkdirs(at("tmp/nvidia-mps"));
    record("ipc", "nvidia-mps", "/tmp/nvidia-mps", "/tmp/nvidia-mps", "compute", false);
}

void Writer::firmware() {
    const std::string& version = manifest_.spec.driver_version;
    for (std::string_view name : {"gsp_ga10x.bin", "gsp_tu10x.bin"}) {
        std::string rel = fmt::format("lib/firmware/nvidia/{}/{}", version, name);
        write(at(rel), fmt::format("gpubind simulated GSP firmware {} {}\n", name, version), 0644);
        record("firmware", std::string(name), "/" + rel, "/" + rel, "utility", false);
    }
}

// Builds etc/ld.so.cache with the system's ldconfig, chrooted into the node
// (-r), leaving the links as written (-X), with an empty environment.
void Writer::ldconfig() const {
    const Spec& spec = manifest_.spec;
    std::string conf = fmt::format("/{}\n", lib_dir(false));
    if (spec.graphics) conf += fmt::format("/{}/vdpau\n", lib_dir(false));
    if (spec.compat32) conf += fmt::format("/{}\n", lib_dir(true));
    write(at("etc/ld.so.conf"), conf, 0644);

    std::string program = spec.ldconfig.empty() ? "/sbin/ldconfig" : spec.ldconfig;
    if (spec.ldconfig.empty() && ::access(program.c_str(), X_OK) != 0)
        program = "/usr/sbin/ldconfig";
    std::string root = dir_.string();
    std::vector<std::string> args = {"ldconfig", "-X", "-i", "-r", root};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    char* envp[] = {nullptr};

    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) util::throw_errno("pipe", program);
    util::Fd out(pipefd[0]);
    util::Fd in(pipefd[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in.get(), 1);
    posix_spawn_file_actions_adddup2(&actions, in.get(), 2);
    pid_t pid = 0;
    int err = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv.data(), envp);
    posix_spawn_file_actions_destroy(&actions);
    if (err != 0) throw util::Error(err, "run", program);
    in.reset();

    std::string output;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(out.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (output.size() < 4096) output.append(buf, static_cast<std::size_t>(n));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) util::throw_errno("wait", program);
    std::string said(util::trim(output));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::string how = WIFEXITED(status) ? fmt::format("exited with {}", WEXITSTATUS(status))
                                            : fmt::format("killed by signal {}", WTERMSIG(status));
        throw util::Error(ECHILD, "simulate", (dir_ / "etc/ld.so.cache").string(),
                          fmt::format("{} -X -i -r {} {}{}{}", program, root, how,
                                      said.empty() ? "" : ": ", said));
    }
    if (!said.empty()) util::logger().debug("simulate: ldconfig said: {}", said);
}

}  // namespace gpubind::sim::detail
