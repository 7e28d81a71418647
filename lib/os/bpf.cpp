// Building cgroup v2 device programs: gpubind's rules in front of a runtime's
// program, and the check that a dumped program can be loaded again.
#include "gpubind/os/bpf.hpp"

#include <linux/bpf.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "gpubind/util/error.hpp"

namespace gpubind::os::bpf {

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
        util::throw_invalid("build device program", std::to_string(v), "number out of range");
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
        throw util::Error(ENOTSUP, "extend device program", what,
                          "instruction " + std::to_string(i) + " " + why +
                              "; only self-contained device programs can be extended");
    };
    if (insns.empty()) throw util::Error(ENOTSUP, "extend device program", what, "no instructions");
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

namespace {

// The memory and registers a device program runs with: its context (the
// request, read-only) and a stack of 512 bytes, at made-up addresses.
struct Machine {
    static constexpr std::uint64_t kCtxBase = 0x100000, kStackTop = 0x200000;
    std::uint8_t ctx[12];
    std::uint8_t stack[512] = {};
    std::uint64_t r[11] = {};

    explicit Machine(const DeviceRequest& req) {
        const std::uint32_t words[3] = {(req.access << 16) | req.type, req.major, req.minor};
        std::memcpy(ctx, words, sizeof ctx);
        r[1] = kCtxBase;
        r[10] = kStackTop;
    }

    std::uint8_t* mem(std::uint64_t addr, unsigned size, bool write) {
        if (addr >= kCtxBase && addr + size <= kCtxBase + sizeof ctx && !write)
            return ctx + (addr - kCtxBase);
        if (addr >= kStackTop - sizeof stack && addr + size <= kStackTop)
            return stack + (addr - (kStackTop - sizeof stack));
        throw util::Error(ENOTSUP, "run device program", "", "memory access out of bounds");
    }

    // An instruction's operands: its destination register and its source
    // register or immediate, cut to 32 bits for a 32-bit operation.
    std::pair<std::uint64_t, std::uint64_t> operands(const Insn& in, bool is32) const {
        const std::uint64_t imm = static_cast<std::uint64_t>(static_cast<std::int64_t>(in.imm));
        std::uint64_t a = r[in.dst()], b = BPF_SRC(in.code) == BPF_X ? r[in.src()] : imm;
        if (is32) {
            a &= 0xffffffffu;
            b &= 0xffffffffu;
        }
        return {a, b};
    }
};

unsigned size_of(unsigned code) {
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
}

// The result of ALU operation `op` on a and b (already cut to 32 bits when not is64).
std::uint64_t alu_result(unsigned op, std::uint64_t a, std::uint64_t b, bool is64) {
    switch (op) {
        case BPF_ADD:
            return a + b;
        case BPF_SUB:
            return a - b;
        case BPF_MUL:
            return a * b;
        case BPF_DIV:
            return b ? a / b : 0;
        case BPF_MOD:
            return b ? a % b : a;
        case BPF_OR:
            return a | b;
        case BPF_AND:
            return a & b;
        case BPF_XOR:
            return a ^ b;
        case BPF_LSH:
            return a << (b & (is64 ? 63 : 31));
        case BPF_RSH:
            return a >> (b & (is64 ? 63 : 31));
        case BPF_NEG:
            return 0 - a;
        case BPF_MOV:
            return b;
        default:
            throw util::Error(ENOTSUP, "run device program", "", "unsupported ALU operation");
    }
}

// An ALU or ALU64 instruction run.
void run_alu(Machine& m, const Insn& in) {
    const bool is64 = BPF_CLASS(in.code) == BPF_ALU64;
    const auto [a, b] = m.operands(in, !is64);
    const std::uint64_t v = alu_result(BPF_OP(in.code), a, b, is64);
    m.r[in.dst()] = is64 ? v : (v & 0xffffffffu);
}

// Whether ordering jump `op` (unsigned or signed, as T is) is taken for a and b.
template <typename T>
bool ordered(unsigned op, T a, T b) {
    switch (op) {
        case BPF_JGT:
        case BPF_JSGT:
            return a > b;
        case BPF_JGE:
        case BPF_JSGE:
            return a >= b;
        case BPF_JLT:
        case BPF_JSLT:
            return a < b;
        default:  // BPF_JLE, BPF_JSLE
            return a <= b;
    }
}

// Whether conditional jump `op` is taken for a and b (sa and sb: the same, signed).
bool jump_taken(unsigned op, std::uint64_t a, std::uint64_t b, std::int64_t sa, std::int64_t sb) {
    switch (op) {
        case BPF_JA:
            return true;
        case BPF_JEQ:
            return a == b;
        case BPF_JNE:
            return a != b;
        case BPF_JSET:
            return (a & b) != 0;
        case BPF_JGT:
        case BPF_JGE:
        case BPF_JLT:
        case BPF_JLE:
            return ordered(op, a, b);
        case BPF_JSGT:
        case BPF_JSGE:
        case BPF_JSLT:
        case BPF_JSLE:
            return ordered(op, sa, sb);
        default:
            throw util::Error(ENOTSUP, "run device program", "", "unsupported jump");
    }
}

// A jump (JMP or JMP32, not exit) at pc run: the pc it leads to.
std::size_t run_jump(const Machine& m, const Insn& in, std::size_t pc) {
    const unsigned cls = BPF_CLASS(in.code);
    const unsigned op = BPF_OP(in.code);
    if (op == BPF_CALL)
        throw util::Error(ENOTSUP, "run device program", "", "calls are not supported");
    const auto [a, b] = m.operands(in, cls == BPF_JMP32);
    const auto sa = cls == BPF_JMP32 ? static_cast<std::int64_t>(static_cast<std::int32_t>(a))
                                     : static_cast<std::int64_t>(a);
    const auto sb = cls == BPF_JMP32 ? static_cast<std::int64_t>(static_cast<std::int32_t>(b))
                                     : static_cast<std::int64_t>(b);
    return jump_taken(op, a, b, sa, sb)
               ? static_cast<std::size_t>(static_cast<std::int64_t>(pc) + 1 + in.off)
               : pc + 1;
}

// An LDX (MEM) instruction run: a register loaded from memory.
void run_load(Machine& m, const Insn& in) {
    const unsigned n = size_of(in.code);
    std::uint64_t v = 0;
    std::memcpy(&v, m.mem(m.r[in.src()] + static_cast<std::uint64_t>(in.off), n, false), n);
    m.r[in.dst()] = v;
}

// An ST or STX (MEM) instruction run: an immediate or a register stored.
void run_store(Machine& m, const Insn& in) {
    const unsigned n = size_of(in.code);
    const std::uint64_t imm = static_cast<std::uint64_t>(static_cast<std::int64_t>(in.imm));
    std::uint64_t v = BPF_CLASS(in.code) == BPF_STX ? m.r[in.src()] : imm;
    std::memcpy(m.mem(m.r[in.dst()] + static_cast<std::uint64_t>(in.off), n, true), &v, n);
}

}  // namespace

std::uint64_t run_device_program(const std::vector<Insn>& prog, DeviceRequest req) {
    Machine m(req);
    std::size_t pc = 0;
    for (int steps = 0; steps < 100000; ++steps) {
        if (pc >= prog.size())
            throw util::Error(ENOTSUP, "run device program", "", "fell off the end");
        const Insn& in = prog[pc];
        const unsigned cls = BPF_CLASS(in.code);
        if (cls == BPF_ALU || cls == BPF_ALU64) {
            run_alu(m, in);
            ++pc;
        } else if (cls == BPF_JMP || cls == BPF_JMP32) {
            if (BPF_OP(in.code) == BPF_EXIT && cls == BPF_JMP) return m.r[0];
            pc = run_jump(m, in, pc);
        } else if (cls == BPF_LDX && BPF_MODE(in.code) == BPF_MEM) {
            run_load(m, in);
            ++pc;
        } else if ((cls == BPF_ST || cls == BPF_STX) && BPF_MODE(in.code) == BPF_MEM) {
            run_store(m, in);
            ++pc;
        } else if (in.code == (BPF_LD | BPF_IMM | BPF_DW) && pc + 1 < prog.size()) {
            m.r[in.dst()] =
                static_cast<std::uint32_t>(in.imm) |
                (static_cast<std::uint64_t>(static_cast<std::uint32_t>(prog[pc + 1].imm)) << 32);
            pc += 2;
        } else {
            throw util::Error(ENOTSUP, "run device program", "", "unsupported instruction");
        }
    }
    throw util::Error(ENOTSUP, "run device program", "", "runaway program");
}

}  // namespace gpubind::os::bpf
