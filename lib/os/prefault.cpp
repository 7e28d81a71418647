#include "gpubind/os/prefault.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace gpubind {

namespace {

// Beyond this a process would not want its heap mapped ahead (and malloc's
// thresholds are ints).
constexpr std::size_t kMaxHeap = 64u << 20;

std::uintptr_t page_down(std::uintptr_t a, std::uintptr_t page) {
    return a & ~(page - 1);
}

std::uintptr_t page_up(std::uintptr_t a, std::uintptr_t page) {
    return page_down(a + page - 1, page);
}

void populate(std::uintptr_t from, std::uintptr_t to) {
    if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE);
}

}  // namespace

void prefault(const Prefault& sizes) noexcept {
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    if (page == 0 || (page & (page - 1)) != 0) return;

    // Below this frame, inside the stack mapping the kernel made at exec
    // (128 KiB and more below the arguments): a range outside it is refused
    // (ENOMEM) and nothing is lost.
    const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    if (sizes.stack < here) populate(page_down(here - sizes.stack, page), page_down(here, page));

    // One block from the top of the heap, mapped and handed back: later
    // allocations carve the same pages. Without the thresholds the block,
    // and any allocation as large, would be a mapping of its own (faulting
    // page by page, unmapped when freed), and freeing it would shrink the heap.
    if (sizes.heap == 0 || sizes.heap > kMaxHeap) return;
    ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(2 * sizes.heap));
    ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(4 * sizes.heap));
    void* block = std::malloc(sizes.heap);
    if (!block) return;
    const auto at = reinterpret_cast<std::uintptr_t>(block);
    populate(page_up(at, page), page_down(at + sizes.heap, page));
    std::free(block);
}

}  // namespace gpubind
