// Each stage of each way in, through the recording System
// (tests/support/recording_system.hpp): gpubind-hook's prestart,
// createRuntime, finish and cdi stages and poststop, gpubind-runtime's bundle
// edit, and configure (`gpubind configure` and `gpubind-nvc configure` both
// call start::configure). The node is a simulated one, the image and the
// container the recording System's model; what a stage did is read from the
// calls it recorded and what it wrote. The same starts run end to end with
// runc in the other suites.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "container.hpp"
#include "exec_world.hpp"
#include "files.hpp"
#include "gpubind/cdi/cdi.hpp"
#include "gpubind/cdi/runtime.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/start/configure.hpp"
#include "gpubind/start/hook.hpp"
#include "gpubind/start/shim.hpp"
#include "gpubind/start/start.hpp"
#include "recording_system.hpp"
#include "temp_dir.hpp"

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

class Stages : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        sim::Spec spec;
        spec.gpus = 2;
        node_ = std::make_unique<SimNode>(spec);
        // The hook reads its config as a runtime gives it: from its environment.
        ::setenv(std::string(config::kConfigEnv).c_str(), node_->config().c_str(), 1);
    }
    static void TearDownTestSuite() {
        ::unsetenv(std::string(config::kConfigEnv).c_str());
        node_.reset();
    }

    Stages()
        : bundle_(dir_.path() / "bundle"), config_(config::load_trusted_config(node_->config())) {
        bundle_.env("NVIDIA_VISIBLE_DEVICES=1");
        bundle_.write_spec();
    }

    // The node's device node `name` ("nvidia1") as the manifest has it.
    static const sim::ManifestNode& device(const std::string& name) {
        const auto& nodes = node_->manifest().nodes;
        auto it = std::find_if(nodes.begin(), nodes.end(), [&](const sim::ManifestNode& n) {
            return fs::path(n.path).filename() == name;
        });
        if (it == nodes.end()) throw std::runtime_error("no device node " + name);
        return *it;
    }
    static std::string rule(const std::string& name) {
        return "c " + std::to_string(device(name).major) + ":" +
               std::to_string(device(name).minor) + " rw";
    }

    // A recording world where the bundle's container can start: the host
    // holds every source of the plan for `request`, the image the usual
    // directories, and the image is read from the host's side.
    RecordingSystem world(const decide::Request& request) {
        RecordingSystem probe;
        probe.image_from_host = true;
        start::Start s{.config = config_, .sys = &probe, .rootfs = bundle_.rootfs()};
        const decide::Plan plan = start::run(s, request, start::Act::Decide).plan;
        RecordingSystem sys;
        sys.image_from_host = true;
        exec_test::setup_world(sys, plan);
        return sys;
    }
    RecordingSystem world() {
        return world(decide::read_request(decide::oci::load_spec(bundle_.dir()), config_.policy,
                                          config_.families));
    }

    // The hook at `stage` through `sys`, the state on a pipe as a runtime
    // gives it; its exit code.
    int hook(const std::string& stage, RecordingSystem& sys) {
        const json state = {{"ociVersion", "1.0.2"},
                            {"id", "stages"},
                            {"status", "creating"},
                            {"pid", fake_pid()},
                            {"bundle", bundle_.dir().string()}};
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error("pipe");
        const std::string text = state.dump();
        const bool written =
            ::write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
        ::close(fds[1]);
        EXPECT_TRUE(written);
        int code = -1;
        try {
            code = start::run_hook({.stage = stage, .state_fd = fds[0], .sys = &sys},
                                   [](const config::Config&, const std::string&) {});
        } catch (...) {
            ::close(fds[0]);
            throw;
        }
        ::close(fds[0]);
        return code;
    }

    // The bundle as an engine leaves it once it applied a CDI device: no
    // variable, `gpu`'s node in linux.devices. What the CDI stage then asks
    // for (`index`: gpu's), for world().
    decide::Request engine_gave(const sim::ManifestNode& gpu, const std::string& index) {
        bundle_.env("NVIDIA_VISIBLE_DEVICES=void");
        bundle_.spec()["linux"]["devices"] = json::array(
            {{{"path", gpu.path}, {"type", "c"}, {"major", gpu.major}, {"minor", gpu.minor}}});
        bundle_.write_spec();
        decide::Request asked;
        asked.source = decide::RequestSource::Explicit;
        asked.caps = config_.cdi.caps;
        asked.devices = node::parse_device_ids(index);
        return asked;
    }

    // Whether a call attached something at the container's `path`.
    static bool attached(const RecordingSystem& sys, const std::string& path) {
        return std::any_of(sys.calls.begin(), sys.calls.end(), [&](const std::string& c) {
            return c.starts_with("attach ") && c.ends_with(" -> root:" + path);
        });
    }
    static bool any_call(const RecordingSystem& sys, const std::string& prefix) {
        return std::any_of(sys.calls.begin(), sys.calls.end(),
                           [&](const std::string& c) { return c.starts_with(prefix); });
    }
    // A driver library every GPU container gets (utility), as the container
    // sees it: a file of that name attached in its library directory.
    static bool library_attached(const RecordingSystem& sys) {
        std::string name;
        for (const auto& f : node_->manifest().files)
            if (f.kind == "library" && !f.compat32 && f.capability == "utility" && name.empty())
                name = fs::path(f.real_path).filename().string();
        if (name.empty()) throw std::runtime_error("no utility library in the manifest");
        return std::any_of(sys.calls.begin(), sys.calls.end(), [&](const std::string& c) {
            return c.starts_with("attach ") && c.find(" -> root:") != std::string::npos &&
                   c.ends_with("/" + name);
        });
    }

    static inline std::unique_ptr<SimNode> node_;
    TempDir dir_{"gpubind-stages"};
    Bundle bundle_;
    config::Config config_;
};

TEST_F(Stages, PrestartMakesTheSelectedDeviceAndTheDriverFilesThroughTheSystem) {
    RecordingSystem sys = world();
    ASSERT_EQ(hook("prestart", sys), util::kExitOk);
    EXPECT_TRUE(attached(sys, "/dev/nvidia1"));
    EXPECT_FALSE(attached(sys, "/dev/nvidia0"));
    EXPECT_TRUE(library_attached(sys));
    EXPECT_THAT(sys.allowed, Contains(rule("nvidia1")));
    EXPECT_THAT(sys.allowed, Not(Contains(rule("nvidia0"))));
}

TEST_F(Stages, CreateRuntimeIsThePrestartPath) {
    RecordingSystem prestart = world(), create_runtime = world();
    ASSERT_EQ(hook("prestart", prestart), util::kExitOk);
    ASSERT_EQ(hook("createRuntime", create_runtime), util::kExitOk);
    EXPECT_FALSE(prestart.calls.empty());
    EXPECT_EQ(create_runtime.calls, prestart.calls);
}

TEST_F(Stages, PoststopAndAContainerWithoutGpusTouchNothing) {
    RecordingSystem sys = world();
    EXPECT_EQ(start::run_hook({.stage = "poststop", .state_fd = -1, .sys = &sys},
                              [](const config::Config&, const std::string&) {}),
              util::kExitOk);
    bundle_.env("NVIDIA_VISIBLE_DEVICES=void");
    bundle_.write_spec();
    ASSERT_EQ(hook("prestart", sys), util::kExitOk);
    EXPECT_EQ(sys.calls, std::vector<std::string>{});
}

// The shim's edit reads the image and changes nothing in the container; the
// runtime makes the device from the spec, the finish hook the rest.
TEST_F(Stages, TheShimsEditThenTheFinishHookMakeTheRestWithoutTheDevice) {
    RecordingSystem sys = world();
    start::edit_bundle(bundle_.dir(), "stages", config_, "/bin/true", &sys);
    EXPECT_TRUE(any_call(sys, "open_root ")) << "the image was not read through the System";
    EXPECT_FALSE(any_call(sys, "attach ") || any_call(sys, "write_rule ") ||
                 any_call(sys, "make_"));
    json edited;
    std::ifstream(bundle_.dir() / "config.json") >> edited;
    EXPECT_TRUE(cdi::marked(edited));
    EXPECT_THAT(edited["linux"]["devices"].dump(), HasSubstr("\"" + device("nvidia1").path + "\""));

    RecordingSystem other = world();
    ASSERT_EQ(hook("prestart", other), util::kExitOk);  // left to the finish hook
    EXPECT_EQ(other.calls, std::vector<std::string>{});

    RecordingSystem finish = world();
    ASSERT_EQ(hook("finish", finish), util::kExitOk);
    EXPECT_TRUE(library_attached(finish));
    EXPECT_FALSE(attached(finish, "/dev/nvidia1"));
    EXPECT_FALSE(any_call(finish, "write_rule "));
}

// The CDI stage: the engine applied the spec's devices and mounts; the hook
// makes links and the rest, nothing the engine made.
TEST_F(Stages, TheCdiStageMakesNeitherTheDevicesNorTheMountsTheEngineMade) {
    const sim::ManifestNode& gpu = device("nvidia1");
    const decide::Request asked = engine_gave(gpu, "1");
    RecordingSystem sys = world(asked);
    ASSERT_EQ(hook(std::string(cdi::kHookStage), sys), util::kExitOk);
    EXPECT_TRUE(any_call(sys, "make_symlink ")) << "no soname link made";
    EXPECT_FALSE(attached(sys, gpu.path));
    EXPECT_FALSE(library_attached(sys));
    EXPECT_FALSE(any_call(sys, "write_rule "));

    bundle_.spec()["linux"]["devices"] = json::array();
    bundle_.write_spec();
    RecordingSystem none = world(asked);
    ASSERT_EQ(hook(std::string(cdi::kHookStage), none), util::kExitOk);
    EXPECT_EQ(none.calls, std::vector<std::string>{});
}

// gpubind configure and gpubind-nvc configure: a running container given a
// device by hand, through the same path.
TEST_F(Stages, ConfigureGivesTheRequestedDeviceThroughTheSystem) {
    decide::Request asked;
    asked.source = decide::RequestSource::Explicit;
    asked.caps = config::kCapDefault;
    asked.devices = node::parse_device_ids("0");
    RecordingSystem sys = world(asked);
    start::configure(
        config_,
        {.request = asked, .rootfs = bundle_.rootfs().string(), .pid = ::getppid(), .sys = &sys});
    EXPECT_TRUE(attached(sys, "/dev/nvidia0"));
    EXPECT_FALSE(attached(sys, "/dev/nvidia1"));
    EXPECT_THAT(sys.allowed, Contains(rule("nvidia0")));

    RecordingSystem devbind = world(asked);
    start::configure(config_, {.request = asked,
                               .rootfs = bundle_.rootfs().string(),
                               .pid = ::getppid(),
                               .no_devbind = true,
                               .sys = &devbind});
    EXPECT_FALSE(attached(devbind, "/dev/nvidia0"));
    EXPECT_THAT(devbind.allowed, Contains(rule("nvidia0")));
}

// Every call of every way in failing once (issue 49): the start fails with
// that call's errno, and the container is left as it was (nothing mounted,
// made, linked or allowed; back in the host's namespace), whichever errno.
class StagesFailing : public Stages {
  protected:
    // What a way in changed in the model.
    struct Changes {
        std::map<std::string, os::FileInfo> root;
        std::map<std::string, std::string> links;
        std::set<std::string> mounted;  // where something is attached
        std::set<std::string> allowed;
        bool in_container = false;
        bool operator==(const Changes&) const = default;
    };
    static Changes changes(const RecordingSystem& sys) {
        std::set<std::string> mounted;
        for (const auto& [at, mount] : sys.mounted) mounted.insert(at);
        return {sys.root, sys.links, mounted, sys.allowed, sys.in_container};
    }

    // Runs `way` on a fresh world once whole, then once for each of its
    // calls failing; `make` builds the world.
    void walk(const std::function<RecordingSystem()>& make,
              const std::function<void(RecordingSystem&)>& way) {
        RecordingSystem whole = make();
        way(whole);
        ASSERT_FALSE(whole.calls.empty());
        static constexpr int kErrnos[] = {EIO, ENOSPC, EPERM, EMFILE};
        for (std::size_t k = 0; k < whole.calls.size(); ++k) {
            const int err = kErrnos[k % std::size(kErrnos)];
            SCOPED_TRACE("call " + std::to_string(k) + " failing with " + std::to_string(err) +
                         ": " + whole.calls[k]);
            RecordingSystem sys = make();
            const Changes before = changes(sys);
            sys.fail_at(k);
            sys.fail_errno = err;
            try {
                way(sys);
                ADD_FAILURE() << "the start went on past the failure";
            } catch (const std::system_error& e) {
                EXPECT_EQ(e.code().value(), err) << e.what();
                EXPECT_THAT(e.what(), HasSubstr(whole.calls[k]));
            }
            EXPECT_TRUE(changes(sys) == before) << "the container was changed";
        }
    }
};

TEST_F(StagesFailing, EveryCallOfThePrestartHook) {
    walk([this] { return world(); },
         [this](RecordingSystem& sys) { ASSERT_EQ(hook("prestart", sys), util::kExitOk); });
}

TEST_F(StagesFailing, EveryCallOfTheFinishHook) {
    RecordingSystem edit = world();
    start::edit_bundle(bundle_.dir(), "stages", config_, "/bin/true", &edit);
    walk([this] { return world(); },
         [this](RecordingSystem& sys) { ASSERT_EQ(hook("finish", sys), util::kExitOk); });
}

TEST_F(StagesFailing, EveryCallOfTheCdiStage) {
    const sim::ManifestNode& gpu = device("nvidia0");
    const decide::Request asked = engine_gave(gpu, "0");
    walk([this, asked] { return world(asked); },
         [this](RecordingSystem& sys) {
             ASSERT_EQ(hook(std::string(cdi::kHookStage), sys), util::kExitOk);
         });
}

TEST_F(StagesFailing, EveryCallOfTheShimsEdit) {
    const std::string spec_before = slurp(bundle_.dir() / "config.json");
    walk([this] { return world(); },
         [this, &spec_before](RecordingSystem& sys) {
             // Each run edits the bundle as the runtime gives it, unedited.
             std::ofstream(bundle_.dir() / "config.json") << spec_before;
             start::edit_bundle(bundle_.dir(), "stages", config_, "/bin/true", &sys);
         });
    // A failed edit writes nothing: the last run failed at its last call.
    EXPECT_EQ(slurp(bundle_.dir() / "config.json"), spec_before);
}

TEST_F(StagesFailing, EveryCallOfConfigure) {
    decide::Request asked;
    asked.source = decide::RequestSource::Explicit;
    asked.caps = config::kCapDefault;
    asked.devices = node::parse_device_ids("1");
    walk([this, asked] { return world(asked); },
         [this, asked](RecordingSystem& sys) {
             start::configure(config_, {.request = asked,
                                        .rootfs = bundle_.rootfs().string(),
                                        .pid = ::getppid(),
                                        .sys = &sys});
         });
}

}  // namespace
}  // namespace gpubind::test
