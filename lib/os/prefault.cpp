#include "gpubind/os/prefault.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace gpubind::os {

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

// A transparent huge page's size where pages are 4 KiB (x86-64, most arm64
// kernels); larger pages make huge ones too large to fill with a heap.
constexpr std::uintptr_t kHugePage = 2u << 20;

// Whether the kernel gives a region marked MADV_HUGEPAGE huge pages.
bool huge_pages_offered(std::uintptr_t page) {
    if (page != 4096) return false;
    const int fd =
        ::open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    char text[64];
    const ssize_t n = ::read(fd, text, sizeof text);
    ::close(fd);
    if (n <= 0) return false;
    const std::string_view mode(text, static_cast<std::size_t>(n));
    return mode.find("[always]") != std::string_view::npos ||
           mode.find("[madvise]") != std::string_view::npos;
}

// Moves the heap's top to a huge page boundary and marks the huge page
// above it, so that the next allocations are carved from it: a block from
// the top fills the space below the boundary (its pages never touched, it
// is never freed); a second, the huge page's size, extends the heap over
// it and is given back to the top. Each block is checked to be where the
// top chunk (from its end, the break, less its size, mallinfo2's keepcost)
// puts it: anything else (a block from a free list, a heap not grown by
// sbrk) and the huge page is not used. Its first `populated` bytes are then
// mapped: the huge page where the kernel has one to give, else those bytes'
// small pages, as without it (so too where the mark itself was refused).
// Thresholds set by the caller.
bool heap_into_huge_page(std::size_t populated) {
    constexpr std::uintptr_t kHeader = 2 * sizeof(std::size_t);  // a chunk's, before its block
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(::sbrk(0));
    const std::uintptr_t top = end - ::mallinfo2().keepcost;
    std::uintptr_t huge = page_up(top + kHeader, kHugePage);
    if (huge - kHeader - top < 4 * kHeader) huge += kHugePage;  // room for the smallest chunk
    // A chunk of the filler's size: its block, plus the next chunk's first
    // word, which an allocated chunk's block extends over.
    const std::size_t filler_size = huge - kHeader - top - kHeader / 2;
    void* filler = std::malloc(filler_size);
    if (reinterpret_cast<std::uintptr_t>(filler) != top + kHeader) {
        std::free(filler);
        return false;
    }
    void* block = std::malloc(kHugePage);
    const bool placed = reinterpret_cast<std::uintptr_t>(block) == huge;
    if (placed) {
        ::madvise(block, kHugePage, MADV_HUGEPAGE);
        populate(huge, huge + std::min<std::uintptr_t>(populated, kHugePage));
    }
    std::free(block);
    return placed;
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

    // The thresholds keep a block as large as the one mapped in the heap:
    // without them it, and any allocation as large, would be a mapping of its
    // own (faulting page by page, unmapped when freed), and freeing it would
    // shrink the heap.
    if (sizes.huge_page && huge_pages_offered(page)) {
        ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(2 * kHugePage));
        ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(4 * kHugePage));
        if (heap_into_huge_page(sizes.heap)) return;
    }
    // One block from the top of the heap, mapped and handed back: later
    // allocations carve the same pages.
    if (sizes.heap == 0 || sizes.heap > kMaxHeap) return;
    ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(2 * sizes.heap));
    ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(4 * sizes.heap));
    void* block = std::malloc(sizes.heap);
    if (!block) return;
    const auto at = reinterpret_cast<std::uintptr_t>(block);
    populate(page_up(at, page), page_down(at + sizes.heap, page));
    std::free(block);
}

}  // namespace gpubind::os
