// Where the build put what the tests run: the binaries under test and the
// source tree. Defined in one generated translation unit (tests/CMakeLists.txt,
// gpubind_test_paths) rather than in every test's compile line, so that the
// test objects compile the same in every checkout and a compiler cache serves
// a fresh clone. A binary the build has not made (the unit-test-only
// sanitizer build has no probe) is "".
#pragma once

namespace gpubind::test::built {

extern const char* const cli;
extern const char* const hook;
extern const char* const runtime;
extern const char* const nvc;
extern const char* const probe;
extern const char* const hung_nvml;
extern const char* const test_preload;
extern const char* const sysctl_probe;
extern const char* const source_dir;
extern const char* const ldconfig;  // the target's (an arm64 build's runs through qemu)

}  // namespace gpubind::test::built

#define GPUBIND_CLI_PATH (::gpubind::test::built::cli)
#define GPUBIND_HOOK_PATH (::gpubind::test::built::hook)
#define GPUBIND_RUNTIME_PATH (::gpubind::test::built::runtime)
#define GPUBIND_NVC_PATH (::gpubind::test::built::nvc)
#define GPUBIND_PROBE_PATH (::gpubind::test::built::probe)
#define GPUBIND_HUNG_NVML (::gpubind::test::built::hung_nvml)
#define GPUBIND_TEST_PRELOAD (::gpubind::test::built::test_preload)
#define GPUBIND_SYSCTL_PROBE (::gpubind::test::built::sysctl_probe)
#define GPUBIND_SOURCE_DIR (::gpubind::test::built::source_dir)
#define GPUBIND_TARGET_LDCONFIG (::gpubind::test::built::ldconfig)
