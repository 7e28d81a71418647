// cgroup v2 device programs (BPF_PROG_TYPE_CGROUP_DEVICE): the instructions
// that extend a runtime's program with gpubind's rules. Pure functions; the
// system calls that load and attach them are System's (system.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpubind::os::bpf {

// One instruction, laid out as the kernel's struct bpf_insn (8 bytes; the
// registers are the low (dst) and high (src) nibble of the second byte on a
// little-endian machine).
struct Insn {
    std::uint8_t code = 0;
    std::uint8_t regs = 0;
    std::int16_t off = 0;
    std::int32_t imm = 0;

    unsigned dst() const;
    unsigned src() const;
    static Insn make(unsigned code, unsigned dst, unsigned src, int off, std::int32_t imm);
    bool operator==(const Insn&) const = default;
};
static_assert(sizeof(Insn) == 8);

// struct bpf_cgroup_dev_ctx: access_type (u32 at 0) holds the device type in
// its low 16 bits and the access bits in its high 16; major at 4, minor at 8.
inline constexpr unsigned kDevBlock = 1;  // BPF_DEVCG_DEV_BLOCK
inline constexpr unsigned kDevChar = 2;   // BPF_DEVCG_DEV_CHAR
inline constexpr unsigned kAccMknod = 1;  // BPF_DEVCG_ACC_MKNOD
inline constexpr unsigned kAccRead = 2;   // BPF_DEVCG_ACC_READ
inline constexpr unsigned kAccWrite = 4;  // BPF_DEVCG_ACC_WRITE

// A device the program must allow: `access` a set of kAcc* bits (a request
// asking for no more than these is allowed).
struct DeviceRule {
    unsigned type = kDevChar;
    unsigned major = 0;
    unsigned minor = 0;
    unsigned access = kAccRead | kAccWrite;
    bool operator==(const DeviceRule&) const = default;
};

// The name gpubind's programs carry (BPF_OBJ_NAME_LEN: at most 15 characters).
inline constexpr const char* kProgramName = "gpubind_dev";

// A program that returns 1 (allow) for a request matching one of `rules`, and
// otherwise runs `original` exactly as it was: a prologue that reads the
// context without touching r1 (the context pointer the original starts
// from), then the original instructions unchanged (their jumps are relative).
std::vector<Insn> extend_device_program(const std::vector<DeviceRule>& rules,
                                        const std::vector<Insn>& original);

// Throws Error(ENOTSUP, "extend device program", what, ...) unless `insns` (a
// program as the kernel dumps it, BPF_OBJ_GET_INFO_BY_FD's xlated
// instructions) can be loaded again as it is: only ALU, jumps without calls,
// loads and stores to memory and plain 64-bit immediates (no helper calls,
// maps, packet access or instructions the kernel adds for itself). Empty is
// refused too.
void check_reloadable(const std::vector<Insn>& insns, const std::string& what);

// One device access, as the kernel gives it to a device program.
struct DeviceRequest {
    unsigned type;    // kDevChar or kDevBlock
    unsigned access;  // kAcc* bits
    unsigned major, minor;
};

// Runs a device program (as the kernel dumps it) on one request, the way the
// kernel would: the value of r0 at exit (non-zero: allowed). A small
// interpreter of what such programs use (ALU, jumps, loads from the context
// and the stack, stores to the stack, 64-bit immediates); anything else (an
// unknown instruction, memory outside the context or the stack, a runaway
// program) throws Error(ENOTSUP, "run device program", ...).
std::uint64_t run_device_program(const std::vector<Insn>& prog, DeviceRequest req);

}  // namespace gpubind::os::bpf
