// The hardened hook (needs root): gpubind-hook is a static program that
// ignores LD_PRELOAD and keeps nothing of its environment; inputs have caps;
// ldconfig runs in a sandbox (namespaces, no capabilities, seccomp, limits,
// a deadline) that a hostile ld.so.conf cannot lead outside the root.
#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "built.hpp"
#include "command.hpp"
#include "files.hpp"
#include "gpubind/decide/oci.hpp"
#include "gpubind/exec/exec.hpp"
#include "gpubind/os/harden.hpp"
#include "gpubind/os/sandbox.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "gpubind/util/strings.hpp"
#include "temp_dir.hpp"

extern char** environ;

namespace gpubind {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using test::slurp;
using test::write;

std::string run_command(const std::string& cmd) {
    return test::run(cmd).text;
}

std::set<std::string> lines_of(const std::string& text) {
    std::set<std::string> out;
    for (auto l : util::split(text, '\n'))
        if (!l.empty()) out.insert(std::string(l));
    return out;
}

std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        std::string rel = fs::relative(e.path(), dir).string();
        if (e.is_symlink())
            out[rel] = "-> " + fs::read_symlink(e.path()).string();
        else if (e.is_regular_file())
            out[rel] = slurp(e.path());
        else
            out[rel] = "dir";
    }
    return out;
}

struct Result {
    int status = -1;  // exit status, or 128 + signal
    std::string err;  // stderr
};

// Runs `argv` with exactly `env` as its environment and `input` on stdin.
Result run_program(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   const std::string& input = {}) {
    int in[2], err[2];
    if (::pipe(in) != 0 || ::pipe(err) != 0) throw util::Error(errno, "pipe");
    pid_t pid = ::fork();
    if (pid < 0) throw util::Error(errno, "fork");
    if (pid == 0) {
        ::dup2(in[0], STDIN_FILENO);
        ::dup2(err[1], STDERR_FILENO);
        ::close(in[0]);
        ::close(in[1]);
        ::close(err[0]);
        ::close(err[1]);
        std::vector<char*> a, e;
        for (const auto& s : args) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
        e.push_back(nullptr);
        ::execve(a[0], a.data(), e.data());
        ::_exit(127);
    }
    ::close(in[0]);
    ::close(err[1]);
    std::size_t done = 0;
    while (done < input.size()) {
        ssize_t n = ::write(in[1], input.data() + done, input.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
    }
    ::close(in[1]);
    Result r;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(err[0], buf, sizeof buf)) > 0)
        r.err.append(buf, static_cast<std::size_t>(n));
    ::close(err[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

// --- The hook itself ---

TEST(HardenedHook, IsNotADynamicExecutable) {
    // ldd tells a dynamic program by its libraries (this test is one) ...
    EXPECT_THAT(run_command("ldd /proc/" + std::to_string(::getpid()) + "/exe 2>&1"),
                HasSubstr("libc.so.6"));
#ifdef GPUBIND_HOOK_STATIC
    // ... and says so of a static one (-static-pie: "statically linked").
    EXPECT_THAT(
        run_command(std::string("ldd ") + GPUBIND_HOOK_PATH + " 2>&1"),
        ::testing::AnyOf(HasSubstr("not a dynamic executable"), HasSubstr("statically linked")));
#else
    // A sanitizer build links the hook dynamically (the sanitizers need it).
    EXPECT_THAT(run_command(std::string("ldd ") + GPUBIND_HOOK_PATH + " 2>&1"),
                HasSubstr("libasan"));
#endif
}

#ifdef GPUBIND_HOOK_STATIC

TEST(HardenedHook, LdPreloadHasNoEffect) {
    test::TempDir dir("gpubind-harden");
    const fs::path marker = dir / "marker";
    const std::vector<std::string> env = {std::string("LD_PRELOAD=") + GPUBIND_TEST_PRELOAD,
                                          "GPUBIND_TEST_MARKER=" + marker.string()};
    // The shared object marks a dynamic program it is loaded into.
    Result control = run_program({"/bin/true"}, env);
    EXPECT_EQ(control.status, 0);
    ASSERT_TRUE(fs::exists(marker)) << "the preload object did not load into /bin/true";
    fs::remove(marker);
    // Not the hook, whatever the stage.
    Result poststop = run_program({GPUBIND_HOOK_PATH, "poststop"}, env);
    EXPECT_EQ(poststop.status, 0) << poststop.err;
    Result bad = run_program({GPUBIND_HOOK_PATH, "prestart"}, env, "not json");
    EXPECT_EQ(bad.status, util::kExitInvalid) << bad.err;
    EXPECT_FALSE(fs::exists(marker));
}

#endif

// A bundle whose spec's process.env is `env`, and the state naming it.
std::string make_bundle(const fs::path& bundle, const std::vector<std::string>& env) {
    fs::create_directories(bundle / "rootfs");
    nlohmann::json spec = {{"ociVersion", "1.0.2"},
                           {"root", {{"path", "rootfs"}}},
                           {"process", {{"args", {"/bin/sh"}}, {"env", env}}}};
    write(bundle / "config.json", spec.dump());
    nlohmann::json state = {{"ociVersion", "1.0.2"},
                            {"id", "junk"},
                            {"status", "creating"},
                            {"pid", ::getpid()},
                            {"bundle", bundle.string()}};
    return state.dump();
}

TEST(HardenedHook, ImageEnvironmentFullOfJunkIsFine) {
    test::TempDir dir("gpubind-harden");
    std::vector<std::string> env;
    for (int i = 0; i < 2000; ++i)
        env.push_back("JUNK" + std::to_string(i) + "=" + std::string(i % 97, '\x01'));
    env.push_back("=");
    env.push_back("==");
    env.push_back("NVIDIA_VISIBLE_DEVICES_X=all");  // not the variable
    env.push_back("LONG=" + std::string(decide::oci::kMaxEnvEntrySize - 5, 'x'));
    env.push_back(std::string("BIN=\xc3\xa9\t\n\r"));
    const std::string state = make_bundle(dir / "bundle", env);
    Result r = run_program({GPUBIND_HOOK_PATH, "prestart"}, {}, state);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");

    // Past the caps (issue 44, F7): a container that asks for no GPU is left
    // alone, as runc starts it; one that asks is refused, naming the entry.
    env.push_back("HUGE=" + std::string(decide::oci::kMaxEnvEntrySize, 'x'));
    const std::size_t huge_at = env.size() - 1;
    r = run_program({GPUBIND_HOOK_PATH, "prestart"}, {}, make_bundle(dir / "huge", env));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    env.push_back("NVIDIA_VISIBLE_DEVICES=all");
    r = run_program({GPUBIND_HOOK_PATH, "prestart"}, {}, make_bundle(dir / "huge-gpu", env));
    EXPECT_EQ(r.status, util::kExitInvalid) << r.err;
    EXPECT_THAT(r.err, HasSubstr("process.env[" + std::to_string(huge_at) + "] (HUGE)"));
    std::vector<std::string> many(decide::oci::kMaxEnvEntries + 1, "A=1");
    r = run_program({GPUBIND_HOOK_PATH, "prestart"}, {}, make_bundle(dir / "crowded", many));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    many.push_back("NVIDIA_VISIBLE_DEVICES=0");
    r = run_program({GPUBIND_HOOK_PATH, "prestart"}, {}, make_bundle(dir / "crowded-gpu", many));
    EXPECT_EQ(r.status, util::kExitInvalid) << r.err;
    EXPECT_THAT(r.err, HasSubstr("process.env: " + std::to_string(many.size()) + " entries"));
}

// Issue 28's TheCallersEnvironmentDoesNotReachTheHook: in hook_env_test.cpp
// (unit: scripts/check runs it).

// --- The pieces ---

TEST(Harden, ClearEnvironmentKeepsOnlyTheNamedVariables) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        ::setenv("LD_PRELOAD", "/tmp/evil.so", 1);
        ::setenv("LD_LIBRARY_PATH", "/tmp", 1);
        ::setenv("GPUBIND_CONFIG", "/etc/gpubind/test.toml", 1);
        ::setenv("GPUBIND_OTHER", std::string(10, 'y').c_str(), 1);
        ::setenv("GPUBIND_HUGE", std::string(os::harden::kMaxKeptValue + 1, 'z').c_str(), 1);
        os::harden::clear_environment({"GPUBIND_CONFIG", "GPUBIND_HUGE", "NOT_SET"});
        int n = 0;
        for (char** e = environ; e && *e; ++e) ++n;
        const char* config = ::getenv("GPUBIND_CONFIG");
        bool ok = n == 1 && config && std::string(config) == "/etc/gpubind/test.toml";
        ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(Harden, ReadStreamHasADeadlineAndACap) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    util::Fd r(p[0]), w(p[1]);
    // A writer that never finishes.
    ASSERT_EQ(::write(w.get(), "{", 1), 1);
    auto start = std::chrono::steady_clock::now();
    try {
        os::harden::read_stream(r.get(), 1024, "stdin",
                                os::harden::Deadline(std::chrono::milliseconds(200)));
        FAIL() << "no timeout";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ETIMEDOUT) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    // Past the cap.
    ASSERT_EQ(::write(w.get(), "0123456789", 10), 10);
    w.reset();
    try {
        os::harden::read_stream(r.get(), 4, "stdin", os::harden::Deadline(std::chrono::seconds(5)));
        FAIL() << "no cap";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), EFBIG) << e.what();
    }
    // A spent deadline stops the next step.
    os::harden::Deadline spent(std::chrono::milliseconds(0));
    EXPECT_THROW(spent.check("configure the container"), util::Error);
    EXPECT_NO_THROW(os::harden::Deadline(std::chrono::seconds(5)).check("x"));
}

TEST(Harden, ThePidMustBeAContainersOtherThanOneOrOurs) {
    decide::Plan plan;
    exec::Target t;
    t.rootfs = "/tmp/gpubind-no-such-rootfs";
    t.cgroups = false;
    for (pid_t pid : {1, ::getpid()}) {
        t.pid = pid;
        EXPECT_THROW(execute(plan, t), util::Error) << pid;
    }
    // A process that shares our mount namespace is no container.
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    t.pid = child;
    try {
        execute(plan, t);
        ADD_FAILURE() << "not refused";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("mount namespace"));
    }
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
}

// --- The sandbox, looked at from inside with a static busybox ---

class Sandbox : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
        ASSERT_TRUE(fs::exists("/bin/busybox")) << "busybox-static is needed";
        for (const char* d : {"bin", "out", "proc", "hostproc", "dev", "sys"})
            fs::create_directories(root_ / d);
        fs::copy_file("/bin/busybox", root_ / "bin/busybox");
        busybox_ = os::sandbox::seal_executable(root_ / "bin/busybox");
    }
    void TearDown() override {
        for (const auto& m : mounted_) ::umount2(m.c_str(), MNT_DETACH);
    }
    // The host's proc at `where` in the root (the sandbox hides the root's
    // /proc: tests read the sandboxed process's status from /hostproc).
    void mount_proc(const char* where = "hostproc") {
        const fs::path at = root_ / where;
        ASSERT_EQ(::mount("proc", at.c_str(), "proc", 0, nullptr), 0) << std::strerror(errno);
        mounted_.push_back(at);
    }
    os::sandbox::Options options(os::sandbox::Filter filter,
                                 os::sandbox::Limits limits = {}) const {
        os::sandbox::Options o;
        o.root = root_;
        o.timeout = std::chrono::seconds(20);
        o.filter = filter;
        o.limits = limits;
        o.scratch = "/out";
        o.output = "result";
        return o;
    }
    // What a shell script wrote to /out/result (the scratch).
    std::string capture(const std::string& script,
                        os::sandbox::Filter filter = os::sandbox::Filter::None) {
        os::sandbox::Limits limits;
        limits.processes = 1u << 20;  // the shell forks
        return os::sandbox::run(busybox_.get(), "busybox", {"sh", "-c", script + " > /out/result"},
                                options(filter, limits));
    }
    void run(const std::vector<std::string>& args, os::sandbox::Filter filter,
             os::sandbox::Limits limits = {}) {
        os::sandbox::Options o = options(filter, limits);
        o.output.clear();
        os::sandbox::run(busybox_.get(), "busybox", args, o);
    }

    test::TempDir dir_{"gpubind-sandbox"};
    fs::path root_ = dir_ / "root";
    util::Fd busybox_;
    std::vector<fs::path> mounted_;
};

TEST_F(Sandbox, NoEnvironmentCapabilitiesHostOrNetwork) {
    mount_proc();  // the host's proc, to read the sandboxed process's status
    ::setenv("GPUBIND_SANDBOX_SENTINEL", "inherited", 1);  // would show if passed on
    std::set<std::string> env;
    ASSERT_NO_THROW(env = lines_of(capture("busybox env")));
    ::unsetenv("GPUBIND_SANDBOX_SENTINEL");
    for (const char* own : {"PWD=/", "SHLVL=1", "PATH=/sbin:/usr/sbin:/bin:/usr/bin"})
        env.erase(own);  // the shell's own defaults
    EXPECT_TRUE(env.empty()) << *env.begin();
    EXPECT_EQ(capture("echo $$"), "1\n");  // a pid namespace of its own
    EXPECT_EQ(capture("busybox hostname"), "gpubind-sandbox\n");
    // Its user namespace's root, an unprivileged id outside, nothing else mapped.
    EXPECT_EQ(capture("busybox id -u"), "0\n");
    EXPECT_EQ(lines_of(capture("busybox cat /hostproc/self/uid_map")),
              std::set<std::string>{"         0      65534          1"});
    const std::string status = capture("busybox cat /hostproc/self/status");
    for (const char* line :
         {"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
          "CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"})
        EXPECT_THAT(status, HasSubstr(line));
    // Only a loopback interface: a network namespace of its own.
    std::set<std::string> ifaces;
    for (const auto& l : lines_of(capture("busybox cat /hostproc/net/dev")))
        if (auto colon = l.find(':'); colon != std::string::npos)
            ifaces.insert(std::string(util::trim(std::string_view(l).substr(0, colon))));
    EXPECT_EQ(ifaces, std::set<std::string>{"lo"});
    // "/" is the root.
    EXPECT_EQ(lines_of(capture("busybox ls /")),
              (std::set<std::string>{"bin", "dev", "hostproc", "out", "proc", "sys"}));
}

// The root is read-only, nosuid and nodev everywhere; what the root's /proc,
// /sys and /dev had mounted is gone; the scratch is the one writable place.
TEST_F(Sandbox, TheRootIsReadOnlyWithoutDevicesProcOrSys) {
    mount_proc("proc");
    ASSERT_EQ(::mount("tmpfs", (root_ / "dev").c_str(), "tmpfs", 0, "mode=0755"), 0);
    mounted_.push_back(root_ / "dev");
    ASSERT_EQ(::mknod((root_ / "dev/zero").c_str(), S_IFCHR | 0666, ::makedev(1, 5)), 0);
    ASSERT_EQ(::mknod((root_ / "bin/zero").c_str(), S_IFCHR | 0666, ::makedev(1, 5)), 0);
    const std::string seen = capture(
        "busybox ls /proc /dev; busybox head -c 1 /bin/zero && echo read-a-device;"
        "busybox mkdir /made && echo wrote-the-root; echo x > /out/ok && echo wrote-scratch");
    EXPECT_THAT(seen, Not(HasSubstr("self")));  // no procfs at /proc
    EXPECT_THAT(seen, Not(HasSubstr("zero")));  // the root's /dev mount is gone
    EXPECT_THAT(seen, Not(HasSubstr("read-a-device")));
    EXPECT_THAT(seen, Not(HasSubstr("wrote-the-root")));
    EXPECT_THAT(seen, HasSubstr("wrote-scratch"));
    EXPECT_FALSE(fs::exists(root_ / "made"));
}

TEST_F(Sandbox, SeccompAllowListRefusesWhatLdconfigDoesNotDo) {
    // Files and directories: allowed.
    ASSERT_NO_THROW(run({"mkdir", "/out/made"}, os::sandbox::Filter::Ldconfig));
    // mknod (of a FIFO: no capability needed) is not on the list ...
    try {
        run({"mkfifo", "/out/fifo"}, os::sandbox::Filter::Ldconfig);
        ADD_FAILURE() << "mkfifo ran";
    } catch (const util::Error& e) {
        EXPECT_THAT(e.what(), HasSubstr("Operation not permitted"));
    }
    // ... and works without the filter.
    ASSERT_NO_THROW(run({"mkfifo", "/out/fifo"}, os::sandbox::Filter::None));
    // Nor can it fork (the shell runs two commands).
    EXPECT_THROW(run({"sh", "-c", "busybox true; busybox true"}, os::sandbox::Filter::Ldconfig),
                 util::Error);
}

// As a user namespace's root mapped to host 100000:100001 (Options::uid, gid):
// its files are theirs, it has no capability and no supplementary group, and
// it writes nothing in the root, not even in a directory of theirs.
TEST_F(Sandbox, RunsAsTheIdsItIsGiven) {
    mount_proc();
    fs::create_directories(root_ / "mine");
    ASSERT_EQ(::chown((root_ / "mine").c_str(), 100000, 100001), 0) << std::strerror(errno);
    os::sandbox::Options o = options(os::sandbox::Filter::None);
    o.limits.processes = 1u << 20;  // the shell forks
    o.uid = 100000;
    o.gid = 100001;
    std::string out;
    ASSERT_NO_THROW(
        out = os::sandbox::run(busybox_.get(), "busybox",
                               {"sh", "-c",
                                "{ busybox cat /hostproc/self/uid_map /hostproc/self/gid_map;"
                                "busybox id -G; busybox stat -c %u:%g /out;"
                                "busybox cat /hostproc/self/status; } > /out/result"},
                               o));
    EXPECT_THAT(out, HasSubstr("         0     100000          1\n"
                               "         0     100001          1\n0\n0:0\n"));
    for (const char* line : {"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
                             "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"})
        EXPECT_THAT(out, HasSubstr(line));
    o.filter = os::sandbox::Filter::Ldconfig;
    o.output.clear();
    EXPECT_THROW(os::sandbox::run(busybox_.get(), "busybox", {"mkdir", "/mine/made"}, o),
                 util::Error);
    EXPECT_FALSE(fs::exists(root_ / "mine/made"));
}

TEST_F(Sandbox, TheProgramIsASealedCopy) {
    const int seals = ::fcntl(busybox_.get(), F_GET_SEALS);
    EXPECT_EQ(seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
              F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    // Replacing the file after it was opened changes nothing that runs.
    write(root_ / "bin/busybox", "#!/bin/false\n", fs::perms(0755));
    EXPECT_NO_THROW(run({"true"}, os::sandbox::Filter::Ldconfig));
    EXPECT_THROW(run({"false"}, os::sandbox::Filter::Ldconfig), util::Error);
}

// A program stuck opening a FIFO (an image's ld.so.conf, say) is killed at
// its deadline, and the error says which file held it.
TEST_F(Sandbox, TimeoutSaysWhichFileTheProgramWasBlockedOpening) {
    ASSERT_EQ(::mkfifo((root_ / "bin/fifo\nname").c_str(), 0644), 0) << std::strerror(errno);
    os::sandbox::Options o;
    o.root = root_;
    o.timeout = std::chrono::milliseconds(500);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        os::sandbox::run(busybox_.get(), "busybox", {"cat", "/bin/fifo\nname"}, o);
        ADD_FAILURE() << "returned";
    } catch (const util::Error& e) {
        EXPECT_EQ(e.code().value(), ETIMEDOUT);
        EXPECT_THAT(e.what(), HasSubstr("killed after 500 ms; it was blocked opening "
                                        "/bin/fifo\\nname"));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// --- ldconfig over a hostile root, as the executor runs it ---

TEST(HostileLdconfig, ConfigurationCannotLeadOutsideTheRoot) {
    ASSERT_EQ(::geteuid(), 0u) << "this test needs root (label root)";
    test::TempDir dir("gpubind-ldconfig");
    const fs::path host = dir / "host";  // the tripwire: a library dir on the host
    const fs::path root = dir / "root";
    fs::create_directories(host);
    write(host / "libgpubindhost.so.1.0",
          sim::elf::make_shared_object(sim::elf::Machine::X86_64, "libgpubindhost.so.1"));
    write(host / "evil.conf", host.string() + "\n");
    const auto host_before = snapshot(host);

    for (const char* d : {"etc", "usr/lib/x86_64-linux-gnu"}) fs::create_directories(root / d);
    write(root / "usr/lib/x86_64-linux-gnu/libgpubindinside.so.1.0",
          sim::elf::make_shared_object(sim::elf::Machine::X86_64, "libgpubindinside.so.1"));
    fs::create_symlink("/", root / "usr/lib/slash");
    fs::create_symlink("../../../../../../../..", root / "usr/lib/up");
    fs::create_symlink(host, root / "usr/lib/hostlink");
    write(root / "etc/ld.so.conf", "include /../../../.." + host.string() + "/*.conf\n" +
                                       host.string() + "\n/../../../.." + host.string() +
                                       "\n/usr/lib/up" + host.string() + "\n/usr/lib/hostlink\n");

    // The configuration does lead to the host library when not confined.
    const fs::path control = dir / "control.cache";
    run_command("/sbin/ldconfig -X -f " + (root / "etc/ld.so.conf").string() + " -C " +
                control.string() + " 2>/dev/null");
    ASSERT_THAT(run_command("/sbin/ldconfig -p -C " + control.string()),
                HasSubstr("libgpubindhost.so.1"));

    const std::string host_cache = slurp("/etc/ld.so.cache");
    fs::create_directories(root / "dev");  // the sandbox's scratch goes there
    os::LinuxSystem sys;
    util::Fd ldconfig = sys.open_executable("/sbin/ldconfig");
    std::string cache;
    ASSERT_NO_THROW(cache = sys.run(ldconfig.get(), "/sbin/ldconfig",
                                    {"-r", root.string(), "-X", "-C", "/dev/ld.so.cache",
                                     "/usr/lib/x86_64-linux-gnu", "/usr/lib/slash"},
                                    std::chrono::seconds(30)));
    write(dir / "result.cache", cache);
    const std::string listing =
        run_command("/sbin/ldconfig -p -C " + (dir / "result.cache").string());
    EXPECT_THAT(listing, HasSubstr("libgpubindinside.so.1 (libc6,x86-64) => "
                                   "/usr/lib/x86_64-linux-gnu/libgpubindinside.so.1"));
    EXPECT_THAT(listing, Not(HasSubstr("libgpubindhost")));
    // Nothing was written in the root.
    EXPECT_FALSE(fs::exists(root / "etc/ld.so.cache"));
    EXPECT_FALSE(fs::exists(root / "dev/ld.so.cache"));
    EXPECT_EQ(snapshot(host), host_before);
    EXPECT_EQ(slurp("/etc/ld.so.cache"), host_cache);
}

}  // namespace
}  // namespace gpubind
