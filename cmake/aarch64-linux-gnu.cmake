# Cross build for arm64 (Grace: GH200, GB200) with Debian's toolchain:
# g++-aarch64-linux-gnu, and the arm64 -dev packages installed through
# multiarch (dpkg --add-architecture arm64; scripts/deps --arch arm64).
#
#   scripts/build --arch arm64      (build-arm64/)
#
# Programs built for the target run under qemu-user: CMake and CTest put the
# emulator before them (try_run, gtest discovery, every test), invoked
# directly so that it needs no binfmt_misc registration. Arm64 programs a
# test starts in turn (the CLI, the NVML helper, a loader in a chroot) run
# through the binfmt_misc handler scripts/deps registers.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The cross toolchain's own sysroot (libc6-arm64-cross); scripts/deps also
# puts the arm64 ldconfig in it (sbin/ldconfig, from libc-bin:arm64).
set(GPUBIND_TARGET_SYSROOT /usr/aarch64-linux-gnu CACHE PATH "The arm64 sysroot")
# No -L: the arm64 loader and libraries are the machine's own, installed
# through multiarch (/lib/ld-linux-aarch64.so.1, /usr/lib/aarch64-linux-gnu),
# and qemu would resolve every absolute path a test opens, "/" included,
# inside the prefix first.
find_program(GPUBIND_QEMU qemu-aarch64-static REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${GPUBIND_QEMU})

# Libraries and headers from the multiarch directories only; programs (the
# host's ninja, pkg-config, sh) from the host.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
