// For tests of cgroup v2 device programs without the kernel: a small
// interpreter of the BPF instructions such programs use (ALU, jumps, loads
// from the context and the stack, stores to the stack, 64-bit immediates),
// and a program built the way runtimes build theirs (runc's and crun's
// generated filters: the context read into r2..r5, one block per rule, deny
// at the end), written here from the documented context layout.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "gpubind/bpf.hpp"

namespace gpubind::test {

struct DeviceRequest {
    unsigned type;    // bpf::kDevChar or kDevBlock
    unsigned access;  // bpf::kAcc* bits
    unsigned major, minor;
};

// Runs `prog` on one request; the value of r0 at exit. Throws std::runtime_error
// on anything outside the subset (an unknown instruction, memory outside the
// context or the stack, a runaway program).
inline std::uint64_t run_device_program(const std::vector<bpf::Insn>& prog, DeviceRequest req) {
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
        throw std::runtime_error("memory access out of bounds");
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
        if (pc >= prog.size()) throw std::runtime_error("fell off the end");
        const bpf::Insn& in = prog[pc];
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
                    throw std::runtime_error("unsupported ALU operation");
            }
            r[dst] = is64 ? v : (v & 0xffffffffu);
            ++pc;
        } else if (cls == BPF_JMP || cls == BPF_JMP32) {
            const unsigned op = BPF_OP(in.code);
            if (op == BPF_EXIT && cls == BPF_JMP) return r[0];
            if (op == BPF_CALL) throw std::runtime_error("calls are not supported");
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
                    throw std::runtime_error("unsupported jump");
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
            throw std::runtime_error("unsupported instruction");
        }
    }
    throw std::runtime_error("runaway program");
}

// A runtime's rule: type 0 for any ('a'), major/minor nullopt for '*'.
struct RuntimeRule {
    unsigned type;
    std::optional<unsigned> major, minor;
    unsigned access;
    bool allow;
};

// A program in the shape runtimes generate: first matching rule decides,
// no match denies. Like theirs, it clobbers r1 once the context is read.
inline std::vector<bpf::Insn> runtime_like_program(const std::vector<RuntimeRule>& rules) {
    using bpf::Insn;
    std::vector<Insn> p = {
        Insn::make(BPF_LDX | BPF_MEM | BPF_W, 2, 1, 0, 0),
        Insn::make(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff),
        Insn::make(BPF_LDX | BPF_MEM | BPF_W, 3, 1, 0, 0),
        Insn::make(BPF_ALU | BPF_RSH | BPF_K, 3, 0, 0, 16),
        Insn::make(BPF_LDX | BPF_MEM | BPF_W, 4, 1, 4, 0),
        Insn::make(BPF_LDX | BPF_MEM | BPF_W, 5, 1, 8, 0),
    };
    for (const auto& rule : rules) {
        std::vector<Insn> block;
        if (rule.type)
            block.push_back(Insn::make(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 0,
                                       static_cast<std::int32_t>(rule.type)));
        block.push_back(Insn::make(BPF_ALU64 | BPF_MOV | BPF_X, 1, 3, 0, 0));
        block.push_back(
            Insn::make(BPF_ALU | BPF_AND | BPF_K, 1, 0, 0, static_cast<std::int32_t>(rule.access)));
        block.push_back(Insn::make(BPF_JMP | BPF_JNE | BPF_X, 1, 3, 0, 0));
        if (rule.major)
            block.push_back(Insn::make(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 0,
                                       static_cast<std::int32_t>(*rule.major)));
        if (rule.minor)
            block.push_back(Insn::make(BPF_JMP | BPF_JNE | BPF_K, 5, 0, 0,
                                       static_cast<std::int32_t>(*rule.minor)));
        block.push_back(Insn::make(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, rule.allow ? 1 : 0));
        block.push_back(Insn::make(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
        // Every conditional jump goes past the block.
        for (std::size_t i = 0; i < block.size(); ++i)
            if (BPF_CLASS(block[i].code) == BPF_JMP && BPF_OP(block[i].code) == BPF_JNE)
                block[i].off = static_cast<std::int16_t>(block.size() - i - 1);
        p.insert(p.end(), block.begin(), block.end());
    }
    p.push_back(Insn::make(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));
    p.push_back(Insn::make(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
    return p;
}

}  // namespace gpubind::test
