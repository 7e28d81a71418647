// For tests of cgroup v2 device programs without the kernel: the library's
// interpreter (os::bpf::run_device_program), and a program built the way runtimes build theirs
// (runc's and crun's generated filters: the context read into r2..r5, one block per rule, deny at
// the end), written here from the documented context layout.
#pragma once

#include <linux/bpf.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "gpubind/os/bpf.hpp"

namespace gpubind::test {

using os::bpf::DeviceRequest;
using os::bpf::run_device_program;

// A runtime's rule: type 0 for any ('a'), major/minor nullopt for '*'.
struct RuntimeRule {
    unsigned type;
    std::optional<unsigned> major, minor;
    unsigned access;
    bool allow;
};

// A program in the shape runtimes generate: first matching rule decides,
// no match denies. Like theirs, it clobbers r1 once the context is read.
inline std::vector<os::bpf::Insn> runtime_like_program(const std::vector<RuntimeRule>& rules) {
    using os::bpf::Insn;
    std::vector<os::bpf::Insn> p = {
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
