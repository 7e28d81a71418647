// prefault(): the heap a start is about to use is mapped before it is
// touched. Run in a child, whose heap is its own from there on.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
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
        if (prefaulted) prefault({.heap = 1024 * 1024, .stack = 0});
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

}  // namespace
}  // namespace gpubind
