#include "gpubind/sim/elf_stub.hpp"

#include <elf.h>

#include <cstdint>
#include <cstring>

#include "gpubind/util/error.hpp"

namespace gpubind::sim::elf {

namespace {

struct Elf64 {
    using Ehdr = Elf64_Ehdr;
    using Phdr = Elf64_Phdr;
    using Dyn = Elf64_Dyn;
    using Sym = Elf64_Sym;
    static constexpr unsigned char kClass = ELFCLASS64;
};

struct Elf32 {
    using Ehdr = Elf32_Ehdr;
    using Phdr = Elf32_Phdr;
    using Dyn = Elf32_Dyn;
    using Sym = Elf32_Sym;
    static constexpr unsigned char kClass = ELFCLASS32;
};

constexpr std::size_t align_up(std::size_t n, std::size_t a) {
    return (n + a - 1) / a * a;
}

// DT_NEEDED libc.so.6 is what makes ldconfig file a 32-bit library as libc6
// rather than plain ELF; 64-bit x86 libraries are libc6 regardless.
constexpr std::string_view kLibc = "libc.so.6";

// A dynamic section entry.
template <class E>
typename E::Dyn dyn(decltype(E::Dyn::d_tag) tag, std::size_t val) {
    using Addr = decltype(E::Phdr::p_vaddr);
    typename E::Dyn d{};
    d.d_tag = tag;
    d.d_un.d_val = static_cast<Addr>(val);
    return d;
}

// A read-write segment of `len` bytes at `at`, in the file and in memory alike.
template <class E>
typename E::Phdr segment(Elf32_Word type, std::size_t at, std::size_t len, std::size_t align) {
    using Addr = decltype(E::Phdr::p_vaddr);
    typename E::Phdr ph{};
    ph.p_type = type;
    ph.p_flags = PF_R | PF_W;
    ph.p_offset = static_cast<Addr>(at);
    ph.p_vaddr = static_cast<Addr>(at);
    ph.p_paddr = static_cast<Addr>(at);
    ph.p_filesz = static_cast<Addr>(len);
    ph.p_memsz = static_cast<Addr>(len);
    ph.p_align = static_cast<Addr>(align);
    return ph;
}

// The ELF header of a shared object with `phnum` program headers at
// `phdr_at` and no section headers.
template <class E>
typename E::Ehdr elf_header(std::uint16_t machine, std::size_t phdr_at, std::size_t phnum) {
    typename E::Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = E::kClass;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_ident[EI_OSABI] = ELFOSABI_SYSV;
    eh.e_type = ET_DYN;
    eh.e_machine = machine;
    eh.e_version = EV_CURRENT;
    eh.e_phoff = static_cast<decltype(eh.e_phoff)>(phdr_at);
    eh.e_ehsize = sizeof eh;
    eh.e_phentsize = sizeof(typename E::Phdr);
    eh.e_phnum = static_cast<decltype(eh.e_phnum)>(phnum);
    eh.e_shentsize = 0;
    eh.e_shnum = 0;
    eh.e_shstrndx = SHN_UNDEF;
    return eh;
}

// One read-write PT_LOAD maps the whole file at address 0, so file offsets are
// addresses. Contents: ELF header, program headers, the null symbol, a SysV
// hash table with one bucket and no symbols, the string table, the dynamic
// section. The segment is aligned to the largest page the architecture's
// kernels use (64 KiB on arm64), as the loader requires.
template <class E>
std::string build(std::uint16_t machine, std::size_t page, std::string_view soname) {
    constexpr std::size_t kPhnum = 3;  // PT_LOAD, PT_DYNAMIC, PT_GNU_STACK

    std::string dynstr(1, '\0');
    const std::size_t needed_name = dynstr.size();
    dynstr.append(kLibc).push_back('\0');
    const std::size_t soname_name = dynstr.size();
    dynstr.append(soname).push_back('\0');

    const std::size_t phdr_at = sizeof(typename E::Ehdr);
    const std::size_t sym_at = align_up(phdr_at + kPhnum * sizeof(typename E::Phdr), 8);
    const std::size_t hash_at = align_up(sym_at + sizeof(typename E::Sym), 8);
    const Elf32_Word hash[] = {1, 1, 0, 0};  // nbucket, nchain, bucket[0], chain[0]
    const std::size_t str_at = hash_at + sizeof hash;
    const std::size_t dyn_at = align_up(str_at + dynstr.size(), 8);

    const typename E::Dyn dynamic[] = {
        dyn<E>(DT_NEEDED, needed_name),
        dyn<E>(DT_SONAME, soname_name),
        dyn<E>(DT_HASH, hash_at),
        dyn<E>(DT_STRTAB, str_at),
        dyn<E>(DT_SYMTAB, sym_at),
        dyn<E>(DT_STRSZ, dynstr.size()),
        dyn<E>(DT_SYMENT, sizeof(typename E::Sym)),
        dyn<E>(DT_NULL, 0),
    };
    const std::size_t size = dyn_at + sizeof dynamic;

    const typename E::Ehdr eh = elf_header<E>(machine, phdr_at, kPhnum);
    const typename E::Phdr phdrs[kPhnum] = {
        segment<E>(PT_LOAD, 0, size, page), segment<E>(PT_DYNAMIC, dyn_at, sizeof dynamic, 8),
        segment<E>(PT_GNU_STACK, 0, 0, 16),  // non-executable stack
    };

    std::string out(size, '\0');
    auto put = [&out](std::size_t at, const void* p, std::size_t n) {
        std::memcpy(out.data() + at, p, n);
    };
    put(0, &eh, sizeof eh);
    put(phdr_at, phdrs, sizeof phdrs);
    // The symbol table holds only the null symbol, already zero.
    put(hash_at, hash, sizeof hash);
    put(str_at, dynstr.data(), dynstr.size());
    put(dyn_at, dynamic, sizeof dynamic);
    return out;
}

}  // namespace

std::string make_shared_object(Machine machine, std::string_view soname) {
    if (soname.empty() || soname.find('\0') != std::string_view::npos ||
        soname.find('/') != std::string_view::npos)
        util::throw_invalid("make shared object", std::string(soname),
                            "a soname is a non-empty file name");
    switch (machine) {
        case Machine::X86_64:
            return build<Elf64>(EM_X86_64, 0x1000, soname);
        case Machine::I386:
            return build<Elf32>(EM_386, 0x1000, soname);
        case Machine::Aarch64:
            return build<Elf64>(EM_AARCH64, 0x10000, soname);
    }
    util::throw_invalid("make shared object", std::string(soname), "unknown machine");
}

}  // namespace gpubind::sim::elf
