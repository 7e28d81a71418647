// The stub shared objects: the target's ldconfig files them with the right
// flags and the dynamic loader loads the native one.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "built.hpp"
#include "command.hpp"
#include "gpubind/sim/elf_stub.hpp"
#include "gpubind/util/error.hpp"
#include "target.hpp"
#include "temp_dir.hpp"

namespace gpubind {
namespace {

using sim::elf::Machine;

using test::Output;
using test::run;

void write_file(const std::filesystem::path& path, const std::string& bytes) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f.good()) << path;
}

TEST(ElfStub, HeadersDescribeAnElfSharedObjectForTheMachine) {
    const std::string so64 = sim::elf::make_shared_object(Machine::X86_64, "libstub.so.1");
    ASSERT_GE(so64.size(), sizeof(Elf64_Ehdr));
    Elf64_Ehdr eh64;
    std::memcpy(&eh64, so64.data(), sizeof eh64);
    EXPECT_EQ(std::memcmp(eh64.e_ident, ELFMAG, SELFMAG), 0);
    EXPECT_EQ(eh64.e_ident[EI_CLASS], ELFCLASS64);
    EXPECT_EQ(eh64.e_ident[EI_DATA], ELFDATA2LSB);
    EXPECT_EQ(eh64.e_type, ET_DYN);
    EXPECT_EQ(eh64.e_machine, EM_X86_64);

    const std::string so32 = sim::elf::make_shared_object(Machine::I386, "libstub.so.1");
    ASSERT_GE(so32.size(), sizeof(Elf32_Ehdr));
    Elf32_Ehdr eh32;
    std::memcpy(&eh32, so32.data(), sizeof eh32);
    EXPECT_EQ(eh32.e_ident[EI_CLASS], ELFCLASS32);
    EXPECT_EQ(eh32.e_type, ET_DYN);
    EXPECT_EQ(eh32.e_machine, EM_386);

    const std::string arm = sim::elf::make_shared_object(Machine::Aarch64, "libstub.so.1");
    ASSERT_GE(arm.size(), sizeof(Elf64_Ehdr));
    Elf64_Ehdr eh;
    std::memcpy(&eh, arm.data(), sizeof eh);
    EXPECT_EQ(eh.e_ident[EI_CLASS], ELFCLASS64);
    EXPECT_EQ(eh.e_ident[EI_DATA], ELFDATA2LSB);
    EXPECT_EQ(eh.e_machine, EM_AARCH64);
    // Its segment loads on a kernel with 64 KiB pages (Grace's).
    ASSERT_GE(arm.size(), eh.e_phoff + sizeof(Elf64_Phdr));
    Elf64_Phdr load;
    std::memcpy(&load, arm.data() + eh.e_phoff, sizeof load);
    EXPECT_EQ(load.p_type, PT_LOAD);
    EXPECT_EQ(load.p_align % 0x10000, 0u);
}

TEST(ElfStub, ReadelfSeesTheSoname) {
    test::TempDir dir;
    for (auto [machine, name] : {std::pair{sim::elf::Machine::X86_64, "libsixty.so.4"},
                                 std::pair{sim::elf::Machine::I386, "libthirty.so.2"},
                                 std::pair{Machine::Aarch64, "libarm.so.8"}}) {
        const auto path = dir / name;
        write_file(path, sim::elf::make_shared_object(machine, name));
        const Output out = run("readelf -d '" + path.string() + "' 2>&1");
        ASSERT_EQ(out.status, 0) << out.text;
        EXPECT_NE(out.text.find(std::string("Library soname: [") + name + "]"), std::string::npos)
            << out.text;
        EXPECT_NE(out.text.find("Shared library: [libc.so.6]"), std::string::npos) << out.text;
    }
}

// The target's ldconfig (an arm64 build's: Debian's arm64 one under qemu).
TEST(ElfStub, TargetLdconfigFilesThemWithTheirFlags) {
    test::TempDir root;
    write_file(root / "opt/stub64/libsixty.so.4",
               sim::elf::make_shared_object(test::target::kMachine, "libsixty.so.4"));
    std::string conf = "/opt/stub64\n";
    if (test::target::kHas32) {
        write_file(root / "opt/stub32/libthirty.so.2",
                   sim::elf::make_shared_object(Machine::I386, "libthirty.so.2"));
        conf += "/opt/stub32\n";
    }
    write_file(root / "etc/ld.so.conf", conf);

    const std::string r = root.path().string();
    const std::string ldconfig = GPUBIND_TARGET_LDCONFIG;
    const Output build = run(ldconfig + " -r '" + r + "' -X 2>&1");
    ASSERT_EQ(build.status, 0) << build.text;
    const Output list = run(ldconfig + " -p -C '" + r + "/etc/ld.so.cache'");
    ASSERT_EQ(list.status, 0);
    const std::string native =
        fmt::format("\tlibsixty.so.4 ({}) => /opt/stub64/libsixty.so.4\n", test::target::kFlags);
    EXPECT_NE(list.text.find(native), std::string::npos) << list.text;
    if (test::target::kHas32) {
        EXPECT_NE(list.text.find("\tlibthirty.so.2 (libc6) => /opt/stub32/libthirty.so.2\n"),
                  std::string::npos)
            << list.text;
    }
    EXPECT_EQ(
        list.text.find(test::target::kHas32 ? "2 libs found in cache" : "1 libs found in cache"),
        0u)
        << list.text;
}

TEST(ElfStub, DynamicLoaderOpensTheNativeOne) {
    test::TempDir dir;
    const auto a = dir / "libstub-a.so.1";
    const auto b = dir / "libstub-b.so.7";
    write_file(a, sim::elf::make_shared_object(test::target::kMachine, "libstub-a.so.1"));
    write_file(b, sim::elf::make_shared_object(test::target::kMachine, "libstub-b.so.7"));

    void* ha = ::dlopen(a.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(ha, nullptr) << ::dlerror();
    void* hb = ::dlopen(b.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(hb, nullptr) << ::dlerror();
    EXPECT_NE(ha, hb);

    link_map* map = nullptr;
    ASSERT_EQ(::dlinfo(ha, RTLD_DI_LINKMAP, &map), 0) << ::dlerror();
    EXPECT_EQ(std::string(map->l_name), a.string());
    // Nothing to find in it, but the lookup goes through its hash table.
    EXPECT_EQ(::dlsym(ha, "no_such_symbol"), nullptr);

    EXPECT_EQ(::dlclose(hb), 0);
    EXPECT_EQ(::dlclose(ha), 0);
}

TEST(ElfStub, RejectsNamesThatAreNotFileNames) {
    for (std::string_view bad :
         {std::string_view(""), std::string_view("lib/x.so"), std::string_view("libx\0.so", 8)}) {
        try {
            sim::elf::make_shared_object(Machine::X86_64, bad);
            ADD_FAILURE() << "accepted " << bad;
        } catch (const util::Error& e) {
            EXPECT_EQ(e.code().value(), EINVAL);
        }
    }
}

}  // namespace
}  // namespace gpubind
