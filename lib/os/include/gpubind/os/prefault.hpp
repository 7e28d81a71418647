// Memory a short-lived process is about to touch, mapped up front in one
// system call instead of one page fault per page. A fault is a trap into the
// kernel each time: on the virtual machine measured in docs/benchmarks.md,
// 12-15 us, twenty times what populating the same page in a batch costs; a
// start on an image with a large loader cache touches a hundred pages of heap
// (the image's cache read, parsed, merged and written again).
#pragma once

#include <cstddef>

namespace gpubind {

struct Prefault {
    std::size_t heap = 512 * 1024;  // bytes of heap mapped writable, zeroed
    std::size_t stack = 64 * 1024;  // bytes of stack below the caller's frame
};

// Best effort, never fails: on a kernel without MADV_POPULATE_WRITE (before
// 5.14) nothing is mapped ahead and each page faults in as before. Sets
// malloc's mmap threshold to twice the heap size and its trim threshold to
// four times, so that the mapped heap is what later allocations use and is
// not given back early. Single-threaded callers only (mallopt).
void prefault(const Prefault& sizes = {}) noexcept;

}  // namespace gpubind
