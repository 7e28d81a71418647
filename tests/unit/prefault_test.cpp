// prefault(): the heap a start is about to use is mapped before it is
// touched. Run in a child, whose heap is its own from there on.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpubind/os/prefault.hpp"

namespace gpubind {
namespace {

// How many pages of [p, p + size) mincore finds resident, of how many.
std::pair<std::size_t, std::size_t> resident(void* p, std::size_t size) {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t from = (at + page - 1) & ~(page - 1), to = (at + size) & ~(page - 1);
    std::vector<unsigned char> v((to - from) / page);
    if (::mincore(reinterpret_cast<void*>(from), to - from, v.data()) != 0) return {0, 1};
    std::size_t in = 0;
    for (unsigned char c : v) in += c & 1;
    return {in, v.size()};
}

// In a child: `before` (prefault or nothing), then an allocation the size of
// a large image's loader cache; its exit status: 0 when every whole page of
// it was resident before anything wrote to it, 1 when some were not.
int allocation_resident_in_child(bool prefaulted) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (prefaulted) os::prefault({.heap = 1024 * 1024, .stack = 0});
        const std::size_t size = 256 * 1024;
        void* p = std::malloc(size);
        const auto [in, of] = resident(p, size);
        ::_exit(p && in == of ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Prefault, LaterAllocationsFindTheirPagesMapped) {
    EXPECT_EQ(allocation_resident_in_child(true), 0);
    // Without it, the same allocation is a mapping of its own, faulted in page by page.
    EXPECT_EQ(allocation_resident_in_child(false), 1);
}

// Whether the kernel offers transparent huge pages to a region that asks.
bool huge_pages_offered() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode;
    std::getline(in, mode);
    return ::sysconf(_SC_PAGESIZE) == 4096 && (mode.find("[always]") != std::string::npos ||
                                               mode.find("[madvise]") != std::string::npos);
}

// In a child: prefault with or without a huge page, then an allocation of
// 256 KiB; its exit status: 0 when the allocation lies in a region marked
// for huge pages (smaps' VmFlags "hg"), 1 when not, 2 when not found.
int allocation_in_huge_page_region_in_child(bool huge) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        os::prefault({.heap = 512 * 1024, .stack = 0, .huge_page = huge});
        void* p = std::malloc(256 * 1024);
        std::memset(p, 1, 256 * 1024);
        const auto at = reinterpret_cast<std::uintptr_t>(p);
        std::ifstream smaps("/proc/self/smaps");
        bool inside = false;
        for (std::string line; std::getline(smaps, line);) {
            std::uintptr_t from = 0, to = 0;
            char dash = 0;
            std::istringstream range(line);
            if (range >> std::hex >> from >> dash >> to && dash == '-') {
                inside = from <= at && at < to;
            } else if (inside && line.starts_with("VmFlags:")) {
                ::_exit(line.find(" hg") != std::string::npos ? 0 : 1);
            }
        }
        ::_exit(2);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Prefault, TheHeapGoesIntoAHugePageWhereTheKernelOffersThem) {
    if (huge_pages_offered()) {
        EXPECT_EQ(allocation_in_huge_page_region_in_child(true), 0);
    } else {
        // Not offered (or pages not of 4 KiB): the heap is mapped as without.
        EXPECT_EQ(allocation_in_huge_page_region_in_child(true), 1);
        EXPECT_EQ(allocation_resident_in_child(true), 0);
    }
    EXPECT_EQ(allocation_in_huge_page_region_in_child(false), 1);
}

}  // namespace
}  // namespace gpubind
