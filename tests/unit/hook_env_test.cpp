// What gpubind-hook keeps of the environment it is started with: the
// config's name only (issue 28), and whether there was more (issue 49: these
// died only in the root suite, which scripts/check does not run).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "gpubind/config/config.hpp"
#include "gpubind/os/harden.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

namespace fs = std::filesystem;

// In a child given exactly `env`: what clear_environment_but(config::kConfigEnv)
// returns, then the environment it leaves ("1:" or "0:" and its entries,
// one a line).
std::string cleared_in_child(const std::vector<std::string>& env) {
    int out[2];
    if (::pipe(out) != 0) return "<pipe failed>";
    const pid_t child = ::fork();
    if (child < 0) return "<fork failed>";
    if (child == 0) {
        ::close(out[0]);
        ::clearenv();
        for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
        std::string text = os::harden::clear_environment_but(config::kConfigEnv) ? "1:" : "0:";
        for (char** e = environ; e && *e; ++e) text += std::string(*e) + "\n";
        const bool ok =
            ::write(out[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
        ::_exit(ok ? 0 : 1);
    }
    ::close(out[1]);
    const std::string text = test::drain(out[0]);
    ::close(out[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "<the child failed>";
    return text;
}

// Only GPUBIND_CONFIG stays; anything else there (the container's
// environment, which runc gives a hook registered without "env") is told.
TEST(HookEnvironment, OnlyTheConfigsNameStaysAndMoreIsTold) {
    const std::string config = std::string(config::kConfigEnv) + "=/etc/gpubind/test.toml";
    EXPECT_EQ(cleared_in_child({"LD_PRELOAD=/tmp/evil.so", config, "TZ=GPB+13:37", "PATH=/tmp"}),
              "1:" + config + "\n");
    EXPECT_EQ(cleared_in_child({config, std::string(config::kConfigEnv) + "X=1"}),
              "1:" + config + "\n");
    EXPECT_EQ(cleared_in_child({"A=1"}), "1:");
    EXPECT_EQ(cleared_in_child({config}), "0:" + config + "\n");
    EXPECT_EQ(cleared_in_child({}), "0:");
}

// This machine's local time now, as a process without TZ has it.
std::string local_now() {
    const char* tz = std::getenv("TZ");
    const std::string saved = tz ? tz : "";
    ::unsetenv("TZ");
    ::tzset();
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    ::localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    if (tz) ::setenv("TZ", saved.c_str(), 1);
    ::tzset();
    return buf;
}

// The hook itself, started with its config's name and a TZ (no real zone:
// 13:37 west of UTC): the TZ does not reach the glibc inside the static
// hook, whose log then stamps this machine's local time. Fails with the
// clearing taken out of hook_main.cpp (issue 28: the library function alone
// was tested).
TEST(HookEnvironment, TheCallersEnvironmentDoesNotReachTheHook) {
    test::TempDir dir("gpubind-hook-env");
    ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
    const fs::path log = dir / "hook.log";
    const fs::path config = dir / "config.toml";
    test::write(config, "[node]\nstate-dir = \"" + (dir / "state").string() +
                            "\"\n[log]\nfile = \"" + log.string() + "\"\nlevel = \"debug\"\n");
    // A container that asks for nothing: the hook reads it, logs, and ends.
    const fs::path bundle = dir / "bundle";
    fs::create_directories(bundle / "rootfs");
    test::write(bundle / "config.json",
                nlohmann::json{{"ociVersion", "1.0.2"},
                               {"root", {{"path", "rootfs"}}},
                               {"process", {{"args", {"/bin/sh"}}, {"env", {"PATH=/bin"}}}}}
                    .dump());
    test::write(dir / "state.json", nlohmann::json{{"ociVersion", "1.0.2"},
                                                   {"id", "env"},
                                                   {"status", "creating"},
                                                   {"pid", ::getpid()},
                                                   {"bundle", bundle.string()}}
                                        .dump());
    const std::string before = local_now();
    const test::Output r =
        test::run("env -i GPUBIND_CONFIG='" + config.string() + "' TZ=GPB+13:37 '" +
                  GPUBIND_HOOK_PATH + "' prestart < '" + (dir / "state.json").string() + "' 2>&1");
    const std::string after = local_now();
    ASSERT_EQ(r.status, 0) << r.text;
    const std::string text = test::slurp(log);
    ASSERT_GE(text.size(), 19u) << "the hook logged nothing";
    const std::string stamp = text.substr(0, 19);
    EXPECT_GE(stamp, before) << text;
    EXPECT_LE(stamp, after) << "the hook's clock followed the caller's TZ: " << text;
}

}  // namespace
}  // namespace gpubind
