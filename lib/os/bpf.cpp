// Building cgroup v2 device programs: gpubind's rules in front of a runtime's
// program, and the check that a dumped program can be loaded again.
#include "gpubind/os/bpf.hpp"

#include <linux/bpf.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "gpubind/util/error.hpp"

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

std::uint64_t run_device_program(const std::vector<Insn>& prog, DeviceRequest req) {
    constexpr std::uint64_t kCtxBase = 0x100000, kStackTop = 0x200000;
    std::uint8_t ctx[12];
    const std::uint32_t words[3] = {(req.access << 16) | req.type, req.major, req.minor};
    std::memcpy(ctx, words, sizeof ctx);
    std::uint8_t stack[512] = {};
    std::uint64_t r[11] = {};
    r[1] = kCtxBase;
    r[10] = kStackTop;
    auto mem = [&](std::uint64_t addr, unsigned size, bool write) -> std::uint8_t* {
        if (addr >= kCtxBase && addr + size <= kCtxBase + sizeof ctx && !write)
            return ctx + (addr - kCtxBase);
        if (addr >= kStackTop - sizeof stack && addr + size <= kStackTop)
            return stack + (addr - (kStackTop - sizeof stack));
        throw Error(ENOTSUP, "run device program", "", "memory access out of bounds");
    };
    auto size_of = [](unsigned code) -> unsigned {
        switch (BPF_SIZE(code)) {
            case BPF_B:
                return 1;
            case BPF_H:
                return 2;
            case BPF_W:
                return 4;
            default:
                return 8;
        }
    };
    std::size_t pc = 0;
    for (int steps = 0; steps < 100000; ++steps) {
        if (pc >= prog.size()) throw Error(ENOTSUP, "run device program", "", "fell off the end");
        const Insn& in = prog[pc];
        const unsigned cls = BPF_CLASS(in.code);
        const unsigned dst = in.dst(), src = in.src();
        const std::uint64_t imm = static_cast<std::uint64_t>(static_cast<std::int64_t>(in.imm));
        if (cls == BPF_ALU || cls == BPF_ALU64) {
            const bool is64 = cls == BPF_ALU64;
            std::uint64_t a = r[dst], b = BPF_SRC(in.code) == BPF_X ? r[src] : imm;
            if (!is64) {
                a &= 0xffffffffu;
                b &= 0xffffffffu;
            }
            std::uint64_t v;
            switch (BPF_OP(in.code)) {
                case BPF_ADD:
                    v = a + b;
                    break;
                case BPF_SUB:
                    v = a - b;
                    break;
                case BPF_MUL:
                    v = a * b;
                    break;
                case BPF_DIV:
                    v = b ? a / b : 0;
                    break;
                case BPF_MOD:
                    v = b ? a % b : a;
                    break;
                case BPF_OR:
                    v = a | b;
                    break;
                case BPF_AND:
                    v = a & b;
                    break;
                case BPF_XOR:
                    v = a ^ b;
                    break;
                case BPF_LSH:
                    v = a << (b & (is64 ? 63 : 31));
                    break;
                case BPF_RSH:
                    v = a >> (b & (is64 ? 63 : 31));
                    break;
                case BPF_NEG:
                    v = 0 - a;
                    break;
                case BPF_MOV:
                    v = b;
                    break;
                default:
                    throw Error(ENOTSUP, "run device program", "", "unsupported ALU operation");
            }
            r[dst] = is64 ? v : (v & 0xffffffffu);
            ++pc;
        } else if (cls == BPF_JMP || cls == BPF_JMP32) {
            const unsigned op = BPF_OP(in.code);
            if (op == BPF_EXIT && cls == BPF_JMP) return r[0];
            if (op == BPF_CALL)
                throw Error(ENOTSUP, "run device program", "", "calls are not supported");
            std::uint64_t a = r[dst], b = BPF_SRC(in.code) == BPF_X ? r[src] : imm;
            if (cls == BPF_JMP32) {
                a &= 0xffffffffu;
                b &= 0xffffffffu;
            }
            const auto sa = cls == BPF_JMP32
                                ? static_cast<std::int64_t>(static_cast<std::int32_t>(a))
                                : static_cast<std::int64_t>(a);
            const auto sb = cls == BPF_JMP32
                                ? static_cast<std::int64_t>(static_cast<std::int32_t>(b))
                                : static_cast<std::int64_t>(b);
            bool take;
            switch (op) {
                case BPF_JA:
                    take = true;
                    break;
                case BPF_JEQ:
                    take = a == b;
                    break;
                case BPF_JNE:
                    take = a != b;
                    break;
                case BPF_JGT:
                    take = a > b;
                    break;
                case BPF_JGE:
                    take = a >= b;
                    break;
                case BPF_JLT:
                    take = a < b;
                    break;
                case BPF_JLE:
                    take = a <= b;
                    break;
                case BPF_JSET:
                    take = (a & b) != 0;
                    break;
                case BPF_JSGT:
                    take = sa > sb;
                    break;
                case BPF_JSGE:
                    take = sa >= sb;
                    break;
                case BPF_JSLT:
                    take = sa < sb;
                    break;
                case BPF_JSLE:
                    take = sa <= sb;
                    break;
                default:
                    throw Error(ENOTSUP, "run device program", "", "unsupported jump");
            }
            pc = take ? static_cast<std::size_t>(static_cast<std::int64_t>(pc) + 1 + in.off)
                      : pc + 1;
        } else if (cls == BPF_LDX && BPF_MODE(in.code) == BPF_MEM) {
            const unsigned n = size_of(in.code);
            std::uint64_t v = 0;
            std::memcpy(&v, mem(r[src] + static_cast<std::uint64_t>(in.off), n, false), n);
            r[dst] = v;
            ++pc;
        } else if ((cls == BPF_ST || cls == BPF_STX) && BPF_MODE(in.code) == BPF_MEM) {
            const unsigned n = size_of(in.code);
            std::uint64_t v = cls == BPF_STX ? r[src] : imm;
            std::memcpy(mem(r[dst] + static_cast<std::uint64_t>(in.off), n, true), &v, n);
            ++pc;
        } else if (in.code == (BPF_LD | BPF_IMM | BPF_DW) && pc + 1 < prog.size()) {
            r[dst] =
                static_cast<std::uint32_t>(in.imm) |
                (static_cast<std::uint64_t>(static_cast<std::uint32_t>(prog[pc + 1].imm)) << 32);
            pc += 2;
        } else {
            throw Error(ENOTSUP, "run device program", "", "unsupported instruction");
        }
    }
    throw Error(ENOTSUP, "run device program", "", "runaway program");
}

}  // namespace gpubind::bpf
