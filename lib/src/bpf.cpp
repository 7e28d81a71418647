// Building cgroup v2 device programs: gpubind's rules in front of a runtime's
// program, and the check that a dumped program can be loaded again.
#include "gpubind/bpf.hpp"

#include <linux/bpf.h>

#include <cerrno>
#include <limits>
#include <string>

#include "gpubind/error.hpp"

namespace gpubind::bpf {

namespace {

constexpr unsigned kCtx = 1;     // r1: the context, kept for the original program
constexpr unsigned kType = 2;    // r2: device type
constexpr unsigned kAccess = 3;  // r3: access bits
constexpr unsigned kMajor = 4;   // r4
constexpr unsigned kMinor = 5;   // r5
constexpr unsigned kScratch = 0;

bool little_endian() {
    return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
}

Insn load_ctx_word(unsigned dst, int offset) {
    return Insn::make(BPF_LDX | BPF_MEM | BPF_W, dst, kCtx, offset, 0);
}

Insn alu32_imm(unsigned op, unsigned dst, std::int32_t imm) {
    return Insn::make(BPF_ALU | op | BPF_K, dst, 0, 0, imm);
}

Insn jne_imm(unsigned dst, std::int32_t imm, int off) {
    return Insn::make(BPF_JMP | BPF_JNE | BPF_K, dst, 0, off, imm);
}

std::int32_t as_imm(unsigned v) {
    if (v > static_cast<unsigned>(std::numeric_limits<std::int32_t>::max()))
        throw_invalid("build device program", std::to_string(v), "number out of range");
    return static_cast<std::int32_t>(v);
}

}  // namespace

unsigned Insn::dst() const {
    return little_endian() ? (regs & 0x0fu) : (regs >> 4u);
}

unsigned Insn::src() const {
    return little_endian() ? (regs >> 4u) : (regs & 0x0fu);
}

Insn Insn::make(unsigned code, unsigned dst, unsigned src, int off, std::int32_t imm) {
    Insn i;
    i.code = static_cast<std::uint8_t>(code);
    const unsigned lo = little_endian() ? dst : src, hi = little_endian() ? src : dst;
    i.regs = static_cast<std::uint8_t>((lo & 0x0fu) | ((hi & 0x0fu) << 4u));
    i.off = static_cast<std::int16_t>(off);
    i.imm = imm;
    return i;
}

std::vector<Insn> extend_device_program(const std::vector<DeviceRule>& rules,
                                        const std::vector<Insn>& original) {
    std::vector<Insn> out;
    // The context, read without touching r1.
    out.push_back(load_ctx_word(kType, 0));
    out.push_back(Insn::make(BPF_ALU | BPF_MOV | BPF_X, kAccess, kType, 0, 0));
    out.push_back(alu32_imm(BPF_RSH, kAccess, 16));
    out.push_back(alu32_imm(BPF_AND, kType, 0xffff));
    out.push_back(load_ctx_word(kMajor, 4));
    out.push_back(load_ctx_word(kMinor, 8));
    // Per rule: type, major, minor equal and no access bit beyond the rule's,
    // then allow; any mismatch skips to the next rule (8 instructions each).
    constexpr int kRuleLength = 8;
    for (const auto& r : rules) {
        out.push_back(jne_imm(kType, as_imm(r.type), kRuleLength - 1));
        out.push_back(jne_imm(kMajor, as_imm(r.major), kRuleLength - 2));
        out.push_back(jne_imm(kMinor, as_imm(r.minor), kRuleLength - 3));
        out.push_back(Insn::make(BPF_ALU | BPF_MOV | BPF_X, kScratch, kAccess, 0, 0));
        out.push_back(alu32_imm(BPF_AND, kScratch, static_cast<std::int32_t>(~r.access & 0xffffu)));
        out.push_back(jne_imm(kScratch, 0, kRuleLength - 6));
        out.push_back(Insn::make(BPF_ALU64 | BPF_MOV | BPF_K, kScratch, 0, 0, 1));
        out.push_back(Insn::make(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
    }
    out.insert(out.end(), original.begin(), original.end());
    return out;
}

void check_reloadable(const std::vector<Insn>& insns, const std::string& what) {
    auto refuse = [&](std::size_t i, const std::string& why) {
        throw Error(ENOTSUP, "extend device program", what,
                    "instruction " + std::to_string(i) + " " + why +
                        "; only self-contained device programs can be extended");
    };
    if (insns.empty()) throw Error(ENOTSUP, "extend device program", what, "no instructions");
    for (std::size_t i = 0; i < insns.size(); ++i) {
        const Insn& in = insns[i];
        const unsigned cls = BPF_CLASS(in.code);
        const unsigned mode = BPF_MODE(in.code);
        switch (cls) {
            case BPF_ALU:
            case BPF_ALU64:
                break;
            case BPF_JMP:
            case BPF_JMP32:
                if (BPF_OP(in.code) == BPF_CALL) refuse(i, "calls a function");
                if (BPF_OP(in.code) == BPF_EXIT && cls != BPF_JMP) refuse(i, "is not valid");
                break;
            case BPF_LDX:
                if (mode != BPF_MEM) refuse(i, "is not a plain memory load");
                break;
            case BPF_ST:
            case BPF_STX:
                if (mode != BPF_MEM) refuse(i, "is not a plain memory store");
                break;
            case BPF_LD:
                if (in.code != (BPF_LD | BPF_IMM | BPF_DW)) refuse(i, "reads packet data");
                if (in.src() != 0) refuse(i, "refers to a map or another object");
                if (i + 1 >= insns.size() || insns[i + 1].code != 0)
                    refuse(i, "is a truncated 64-bit immediate");
                ++i;  // the second half
                break;
            default:
                refuse(i, "has an unknown class");
        }
    }
}

}  // namespace gpubind::bpf
