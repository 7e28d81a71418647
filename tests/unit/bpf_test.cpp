// Building cgroup v2 device programs: what the extended program decides,
// request by request, against the runtime's program it extends (run by the
// interpreter in tests/support/device_program.hpp; the kernel's verdict is
// tests/unit/cgroup2_test.cpp's).
#include <linux/bpf.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "device_program.hpp"
#include "gpubind/os/bpf.hpp"
#include "gpubind/util/error.hpp"

namespace gpubind {
namespace {

using os::bpf::Insn;
using test::DeviceRequest;
using test::run_device_program;
using test::runtime_like_program;
using ::testing::HasSubstr;

// runc's defaults, roughly: /dev/null, zero, full, random, urandom, tty, ptmx,
// pts, any mknod; 195:254 explicitly denied.
std::vector<test::RuntimeRule> runtime_rules() {
    return {
        {os::bpf::kDevChar, 195, 254, 7, false},
        {os::bpf::kDevChar, 1, 3, 7, true},
        {os::bpf::kDevChar, 1, 5, 7, true},
        {os::bpf::kDevChar, 1, 7, 7, true},
        {os::bpf::kDevChar, 1, 8, 7, true},
        {os::bpf::kDevChar, 1, 9, 7, true},
        {os::bpf::kDevChar, 5, 0, 7, true},
        {os::bpf::kDevChar, 5, 2, 7, true},
        {os::bpf::kDevChar, 136, std::nullopt, 7, true},
        {0, std::nullopt, std::nullopt, os::bpf::kAccMknod, true},
    };
}

std::vector<os::bpf::DeviceRequest> every_request() {
    std::vector<os::bpf::DeviceRequest> out;
    for (unsigned type : {os::bpf::kDevBlock, os::bpf::kDevChar})
        for (unsigned access = 1; access <= 7; ++access)
            for (unsigned major : {1u, 5u, 136u, 195u, 234u, 511u})
                for (unsigned minor : {0u, 1u, 2u, 3u, 7u, 254u, 255u, 4095u})
                    out.push_back({type, access, major, minor});
    return out;
}

TEST(DeviceProgram, TheRuntimeLikeProgramDecidesAsItsRulesSay) {
    // The interpreter and the sample agree with the rules (a check of the test's tools).
    auto prog = runtime_like_program(runtime_rules());
    EXPECT_EQ(os::bpf::run_device_program(
                  prog, {os::bpf::kDevChar, os::bpf::kAccRead | os::bpf::kAccWrite, 1, 3}),
              1u);
    EXPECT_EQ(os::bpf::run_device_program(prog, {os::bpf::kDevChar, os::bpf::kAccRead, 136, 42}),
              1u);
    EXPECT_EQ(os::bpf::run_device_program(prog, {os::bpf::kDevBlock, os::bpf::kAccMknod, 8, 0}),
              1u);
    EXPECT_EQ(os::bpf::run_device_program(prog, {os::bpf::kDevChar, os::bpf::kAccRead, 195, 0}),
              0u);
    EXPECT_EQ(os::bpf::run_device_program(prog, {os::bpf::kDevChar, os::bpf::kAccRead, 195, 254}),
              0u);
    EXPECT_EQ(os::bpf::run_device_program(prog, {os::bpf::kDevBlock, os::bpf::kAccRead, 1, 3}), 0u);
}

TEST(DeviceProgram, ExtendedAllowsExactlyOurRulesAndOtherwiseDecidesAsTheOriginal) {
    const auto original = runtime_like_program(runtime_rules());
    const std::vector<os::bpf::DeviceRule> ours = {
        {os::bpf::kDevChar, 195, 255, os::bpf::kAccRead | os::bpf::kAccWrite},
        {os::bpf::kDevChar, 195, 0, os::bpf::kAccRead | os::bpf::kAccWrite},
        {os::bpf::kDevChar, 511, 1, os::bpf::kAccRead | os::bpf::kAccWrite},
        {os::bpf::kDevChar, 195, 254,
         os::bpf::kAccRead | os::bpf::kAccWrite},  // the runtime denies it
    };
    const auto extended = os::bpf::extend_device_program(ours, original);
    // The original follows unchanged.
    ASSERT_GT(extended.size(), original.size());
    EXPECT_EQ(std::vector<os::bpf::Insn>(
                  extended.end() - static_cast<std::ptrdiff_t>(original.size()), extended.end()),
              original);
    int granted = 0;
    for (const auto& req : every_request()) {
        SCOPED_TRACE(std::to_string(req.type) + " " + std::to_string(req.major) + ":" +
                     std::to_string(req.minor) + " access " + std::to_string(req.access));
        bool ours_match = false;
        for (const auto& r : ours)
            ours_match |= req.type == r.type && req.major == r.major && req.minor == r.minor &&
                          (req.access & ~r.access) == 0;
        const std::uint64_t want = ours_match ? 1 : os::bpf::run_device_program(original, req);
        EXPECT_EQ(run_device_program(extended, req), want);
        granted += ours_match;
    }
    EXPECT_EQ(granted, 4 * 3);  // r, w, rw for each of ours; never mknod
}

TEST(DeviceProgram, PrologueKeepsTheContextRegisterAndNoRulesMeansTheOriginal) {
    const auto original = runtime_like_program(runtime_rules());
    const auto extended = os::bpf::extend_device_program(
        {{os::bpf::kDevChar, 195, 0, os::bpf::kAccRead | os::bpf::kAccWrite}}, original);
    const std::size_t prologue = extended.size() - original.size();
    for (std::size_t i = 0; i < prologue; ++i) {
        const unsigned cls = BPF_CLASS(extended[i].code);
        if (cls == BPF_ALU || cls == BPF_ALU64 || cls == BPF_LDX || cls == BPF_LD) {
            EXPECT_NE(extended[i].dst(), 1u) << "instruction " << i << " writes r1";
        }
        // Jumps stay inside the prologue or land on the original's first instruction.
        if (BPF_CLASS(extended[i].code) == BPF_JMP && BPF_OP(extended[i].code) != BPF_EXIT) {
            EXPECT_LE(static_cast<std::ptrdiff_t>(i) + 1 + extended[i].off,
                      static_cast<std::ptrdiff_t>(prologue));
        }
    }
    for (const auto& req : every_request())
        EXPECT_EQ(os::bpf::run_device_program(os::bpf::extend_device_program({}, original), req),
                  run_device_program(original, req));
}

TEST(DeviceProgram, OnlySelfContainedProgramsAreReloadable) {
    const auto original = runtime_like_program(runtime_rules());
    EXPECT_NO_THROW(os::bpf::check_reloadable(original, "program 7"));
    auto refused = [](std::vector<os::bpf::Insn> prog, const std::string& needle) {
        try {
            os::bpf::check_reloadable(prog, "program 7 on /sys/fs/cgroup/x");
            ADD_FAILURE() << "accepted; wanted " << needle;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), ENOTSUP);
            EXPECT_THAT(e.what(), HasSubstr("program 7 on /sys/fs/cgroup/x"));
            EXPECT_THAT(e.what(), HasSubstr(needle));
        }
    };
    auto with = [&](std::vector<os::bpf::Insn> extra) {
        auto p = extra;
        p.insert(p.end(), original.begin(), original.end());
        return p;
    };
    refused({}, "no instructions");
    refused(with({Insn::make(BPF_JMP | BPF_CALL, 0, 0, 0, 14)}), "instruction 0 calls a function");
    refused(with({Insn::make(BPF_LD | BPF_IMM | BPF_DW, 2, BPF_PSEUDO_MAP_FD, 0, 3),
                  Insn::make(0, 0, 0, 0, 0)}),
            "refers to a map");
    refused(with({Insn::make(BPF_LD | BPF_ABS | BPF_W, 0, 0, 0, 0)}), "reads packet data");
    refused(with({Insn::make(BPF_STX | BPF_ATOMIC | BPF_W, 10, 2, -8, BPF_ADD)}),
            "not a plain memory store");
    refused({Insn::make(BPF_MOV | BPF_ALU64 | BPF_K, 0, 0, 0, 1),
             Insn::make(BPF_LD | BPF_IMM | BPF_DW, 0, 0, 0, 1)},
            "truncated");
    // A plain 64-bit constant is fine.
    EXPECT_NO_THROW(os::bpf::check_reloadable(
        with({Insn::make(BPF_LD | BPF_IMM | BPF_DW, 0, 0, 0, 1), Insn::make(0, 0, 0, 0, 0)}),
        "program 7"));
}

TEST(DeviceProgram, InstructionLayoutIsTheKernels) {
    os::bpf::Insn i = Insn::make(BPF_LDX | BPF_MEM | BPF_W, 2, 1, 4, -1);
    struct bpf_insn k {};
    static_assert(sizeof k == sizeof i);
    std::memcpy(&k, &i, sizeof k);
    EXPECT_EQ(k.code, BPF_LDX | BPF_MEM | BPF_W);
    EXPECT_EQ(k.dst_reg, 2);
    EXPECT_EQ(k.src_reg, 1);
    EXPECT_EQ(k.off, 4);
    EXPECT_EQ(k.imm, -1);
    EXPECT_EQ(i.dst(), 2u);
    EXPECT_EQ(i.src(), 1u);
}

}  // namespace
}  // namespace gpubind
