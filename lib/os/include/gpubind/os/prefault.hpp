// Memory a short-lived process is about to touch, mapped up front in one
// system call instead of one page fault per page. A fault is a trap into the
// kernel each time: on the virtual machine measured in docs/benchmarks.md,
// 12-15 us, twenty times what populating the same page in a batch costs; a
// start on an image with a large loader cache touches a hundred pages of heap
// (the image's cache read, parsed, merged and written again). There even a
// populated page costs some 8 us when first touched (the hypervisor maps it
// then), and a transparent huge page costs one fault for 2 MiB: the heap of
// a start that touches many pages is best put in one.
#pragma once

#include <cstddef>

namespace gpubind::os {

struct Prefault {
    std::size_t heap = 512 * 1024;  // bytes of heap mapped writable, zeroed
    std::size_t stack = 64 * 1024;  // bytes of stack below the caller's frame
    // The heap's next allocations in one transparent huge page instead, where
    // the kernel offers them (/sys/kernel/mm/transparent_hugepage/enabled not
    // "never") and pages are 4 KiB (huge ones 2 MiB); `heap` mapped as above
    // where not. The huge page is the kernel's to give when the first `heap`
    // bytes are mapped: under its "defrag" setting it may compact memory for
    // one, or map those bytes' small pages instead.
    bool huge_page = false;
};

// Best effort, never fails: on a kernel without MADV_POPULATE_WRITE (before
// 5.14) nothing is mapped ahead and each page faults in as before. Sets
// malloc's mmap threshold to twice the heap size and its trim threshold to
// four times (a huge page: 4 and 8 MiB), so that the mapped heap is what
// later allocations use and is not given back early. Single-threaded callers
// only (mallopt).
void prefault(const Prefault& sizes = {}) noexcept;

}  // namespace gpubind::os
