// Linked into test_crun only: what crun needs on a cgroup v1 ("hybrid") host.
//
// crun 1.8 refuses to run on a hybrid host while the cgroup2 hierarchy (here
// /sys/fs/cgroup/unified) still holds a controller ("cgroups in hybrid mode
// not supported, drop all controllers from cgroupv2"). The Debian hosts these
// suites run on have hugetlb there. For the suite, this environment:
//  1. enters a private mount namespace (mounts made here stay in this process
//     and its children: crun, the hook, the containers);
//  2. disables each controller of the cgroup2 root in cgroup.subtree_control
//     (deepest cgroups first), so the controller can leave the hierarchy;
//  3. mounts it as a cgroup v1 hierarchy at /sys/fs/cgroup/<name> (the mount
//     rebinds the controller; crun then sees a plain v1 host);
// and afterwards undoes all of it: once the runtime's cgroups under the v1
// hierarchy are gone, unmounts it (a v1 hierarchy whose last mount goes while
// a removed child cgroup is still being released stays alive, unbound, so
// the unmount is repeated by remounting until the controller is back on
// cgroup2), removes the directory it made, returns to the host's mount
// namespace and re-enables the controllers where they were enabled.
// Nothing changes on a host whose cgroup2 holds no controller.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace gpubind::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::string> words(const std::string& text) {
    std::istringstream in(text);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

// Writes `text` to a cgroup control file; "" or the error.
std::string write_control(const fs::path& file, const std::string& text) {
    int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return file.string() + ": " + std::strerror(errno);
    ssize_t n = ::write(fd, text.data(), text.size());
    int err = errno;
    ::close(fd);
    if (n < 0) return "write '" + text + "' to " + file.string() + ": " + std::strerror(err);
    return "";
}

// The cgroup2 mount point of this namespace when it is not /sys/fs/cgroup
// itself (a hybrid host); empty otherwise.
fs::path hybrid_unified_mount() {
    std::istringstream in(read_text("/proc/self/mountinfo"));
    for (std::string line; std::getline(in, line);) {
        auto dash = line.find(" - ");
        if (dash == std::string::npos) continue;
        auto f = words(line.substr(0, dash));
        auto t = words(line.substr(dash + 3));
        if (f.size() > 4 && !t.empty() && t[0] == "cgroup2" && f[4] != "/sys/fs/cgroup")
            return f[4];
    }
    return {};
}

// The hierarchy id and cgroup count /proc/cgroups shows for a controller.
std::pair<int, int> hierarchy_of(const std::string& controller) {
    std::istringstream in(read_text("/proc/cgroups"));
    for (std::string line; std::getline(in, line);) {
        auto w = words(line);
        if (w.size() >= 3 && w[0] == controller) return {std::stoi(w[1]), std::stoi(w[2])};
    }
    return {-1, -1};
}

class CrunHybridCgroups : public ::testing::Environment {
  public:
    void SetUp() override {
        unified_ = hybrid_unified_mount();
        if (unified_.empty()) return;
        const auto controllers = words(read_text(unified_ / "cgroup.controllers"));
        if (controllers.empty()) return;

        own_ns_ = ::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
        cwd_ = ::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(own_ns_, 0) << std::strerror(errno);
        ASSERT_EQ(::unshare(CLONE_NEWNS), 0) << "unshare(CLONE_NEWNS): " << std::strerror(errno);
        entered_ = true;
        ASSERT_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
            << std::strerror(errno);

        // Every cgroup2 directory, deepest first: a controller leaves the
        // children's subtree_control before its parent's.
        std::vector<fs::path> dirs = {unified_};
        for (const auto& e : fs::recursive_directory_iterator(unified_))
            if (e.is_directory() && !e.is_symlink()) dirs.push_back(e.path());
        std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) {
            return std::distance(a.begin(), a.end()) > std::distance(b.begin(), b.end());
        });
        for (const auto& dir : dirs) {
            for (const auto& c : words(read_text(dir / "cgroup.subtree_control"))) {
                ASSERT_EQ(write_control(dir / "cgroup.subtree_control", "-" + c), "");
                disabled_.push_back({dir, c});
            }
        }
        for (const auto& c : controllers) {
            const fs::path point = fs::path("/sys/fs/cgroup") / c;
            if (!fs::exists(point)) {
                fs::create_directory(point);
                made_dirs_.push_back(point);
            }
            // The controller's css in the cgroup2 children die asynchronously:
            // the rebind is refused (EBUSY) until they are gone.
            int rc = -1;
            for (int i = 0; i < 100 && rc != 0; ++i) {
                rc = ::mount("cgroup", point.c_str(), "cgroup", 0, c.c_str());
                if (rc != 0 && errno != EBUSY) break;
                if (rc != 0) std::this_thread::sleep_for(20ms);
            }
            ASSERT_EQ(rc, 0) << "mount -t cgroup -o " << c << " " << point << ": "
                             << std::strerror(errno);
            mounted_.push_back({point, c});
        }
        ASSERT_EQ(words(read_text(unified_ / "cgroup.controllers")), std::vector<std::string>{})
            << "cgroup2 still holds controllers; crun would refuse to run";
    }

    void TearDown() override {
        for (auto it = mounted_.rbegin(); it != mounted_.rend(); ++it) {
            const auto& [point, c] = *it;
            // The runtime removed its cgroups; their release is asynchronous.
            for (int i = 0; i < 250 && hierarchy_of(c).second > 1; ++i)
                std::this_thread::sleep_for(20ms);
            bool back = false;
            for (int i = 0; i < 50 && !back; ++i) {
                if (i > 0 && ::mount("cgroup", point.c_str(), "cgroup", 0, c.c_str()) != 0) {
                    ADD_FAILURE() << "remount " << c << ": " << std::strerror(errno);
                    break;
                }
                if (::umount2(point.c_str(), 0) != 0) {
                    ADD_FAILURE() << "umount " << point << ": " << std::strerror(errno);
                    break;
                }
                for (int k = 0; k < 10 && !back; ++k) {
                    back = hierarchy_of(c).first == 0;
                    if (!back) std::this_thread::sleep_for(20ms);
                }
            }
            EXPECT_TRUE(back) << c << " did not return to cgroup2";
        }
        mounted_.clear();
        for (const auto& d : made_dirs_) ::rmdir(d.c_str());
        made_dirs_.clear();
        if (entered_) {
            if (::setns(own_ns_, CLONE_NEWNS) != 0 || ::fchdir(cwd_) != 0) std::abort();
            entered_ = false;
        }
        if (own_ns_ >= 0) ::close(own_ns_);
        if (cwd_ >= 0) ::close(cwd_);
        own_ns_ = cwd_ = -1;
        for (auto it = disabled_.rbegin(); it != disabled_.rend(); ++it)
            EXPECT_EQ(write_control(it->first / "cgroup.subtree_control", "+" + it->second), "");
        disabled_.clear();
    }

  private:
    fs::path unified_;
    int own_ns_ = -1, cwd_ = -1;
    bool entered_ = false;
    std::vector<std::pair<fs::path, std::string>> disabled_;  // (cgroup, controller)
    std::vector<std::pair<fs::path, std::string>> mounted_;   // (mount point, controller)
    std::vector<fs::path> made_dirs_;
};

// gtest owns the environment; registered before main runs the tests.
[[maybe_unused]] ::testing::Environment* const kCrunHybridCgroups =
    ::testing::AddGlobalTestEnvironment(new CrunHybridCgroups);

}  // namespace
}  // namespace gpubind::test
