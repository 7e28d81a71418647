// The entry point of the static programs (gpubind_start_layout in
// CMakeLists.txt), ahead of glibc's _start: two madvise calls map what every
// start touches first, instead of a page fault per page or per 64 KiB.
//   - MADV_POPULATE_WRITE from the page of .init_array to _end: .data.rel.ro,
//     .got, .data, .bss. _start relocates the static PIE by writing a pointer
//     into every page of .data.rel.ro, and each first write to a page of the
//     file's private mapping is a copy-on-write fault (14 in the hook).
//   - MADV_POPULATE_READ over .text.start, the start's code gathered by
//     start_order.ld (gpubind_start_code to gpubind_start_code_end), which
//     faults in 64 KiB at a time otherwise (19 faults in the hook).
// On the virtual machine of docs/benchmarks.md a fault costs 12-15 us, a
// populated page under 2. Best effort: where a call fails (a kernel before
// 5.14, pages larger than the 4 KiB the ranges are aligned to) the pages
// fault in as before.
//
// Assembly, not C++: nothing is relocated yet and there is no thread
// pointer (no stack protector, no TLS). _start's inputs are kept: the stack
// pointer, and the dynamic linker's finalizer (zero for a static program)
// in rdx on x86-64, x0 on arm64. 23 is MADV_POPULATE_WRITE, 22
// MADV_POPULATE_READ; 28 and 233 are madvise's numbers.

#if defined(__x86_64__)
asm(R"(
    .macro gpubind_populate from, to, advice
    lea  \from(%rip), %rdi
    and  $-4096, %rdi
    lea  \to(%rip), %rsi
    sub  %rdi, %rsi
    mov  $\advice, %edx
    mov  $28, %eax
    syscall
    .endm

    .text
    .globl gpubind_entry
    .type gpubind_entry, @function
gpubind_entry:
    .cfi_startproc
    .cfi_undefined rip
    mov  %rdx, %r12
    gpubind_populate __init_array_start, _end, 23
    gpubind_populate gpubind_start_code, gpubind_start_code_end, 22
    mov  %r12, %rdx
    jmp  _start
    .cfi_endproc
    .size gpubind_entry, . - gpubind_entry
)");
#elif defined(__aarch64__)
asm(R"(
    .macro gpubind_populate from, to, advice
    adrp x0, \from
    add  x0, x0, :lo12:\from
    and  x0, x0, #0xfffffffffffff000
    adrp x1, \to
    add  x1, x1, :lo12:\to
    sub  x1, x1, x0
    mov  x2, #\advice
    mov  x8, #233
    svc  #0
    .endm

    .text
    .globl gpubind_entry
    .type gpubind_entry, %function
gpubind_entry:
    .cfi_startproc
    .cfi_undefined x30
    mov  x19, x0
    gpubind_populate __init_array_start, _end, 23
    gpubind_populate gpubind_start_code, gpubind_start_code_end, 22
    mov  x0, x19
    b    _start
    .cfi_endproc
    .size gpubind_entry, . - gpubind_entry
)");
#else
#error "gpubind_entry: x86-64 and arm64 only"
#endif
