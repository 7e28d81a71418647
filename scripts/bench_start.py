#!/usr/bin/env python3
"""Container starts on a simulated node, paired in one run (scripts/bench).

    bench_start.py BUILD_DIR WORK_DIR [--runs N] [--real] [--baseline BUILD_DIR] [--timings N]
                   [--share]
    bench_start.py BUILD_DIR WORK_DIR --profile OUT_DIR [--runs N]

Writes a 4-GPU simulated node, a config naming it (cgroups on, the node
description in WORK_DIR/state), a busybox+glibc image with its own loader
cache, and four bundles of the same container (`/bin/true`): bare, with a
no-op prestart hook (`busybox true`: what running any hook costs runc), with
gpubind-hook registered at prestart (NVIDIA_VISIBLE_DEVICES=all,
compute,utility) and the same through gpubind-runtime. Each round runs the
four once, in turn, with `runc run`, each start on a fresh copy of the image
in a tmpfs (made outside the timing, so that no start finds an earlier one's
files; a tmpfs because this machine's disk takes ~0.2 ms to create one empty
file, 30 times a tmpfs, which would hide what gpubind itself costs):
median and spread (10th-90th percentile) over the rounds, what gpubind adds
and the ratio, and the difference within each round. The same on an overlay
of the image with an empty upper directory per start, as container engines
make a root (overlayfs makes every file created in the root cost more, for
the runtime's mounts and the hook's alike). Then: the first
start after a driver-state change (the node's ld.so.cache rewritten before
each), and starts on a node whose NVML sleeps 2 s in nvmlInit_v2, with and
without NVIDIA_REQUIRE_CUDA. The hook's lifetime is also timed on an image
the size of a CUDA runtime image's library directory (400 shared libraries
in its loader cache, built here with cc). On a cgroup v2 host the hook keeps
its device programs on a bpffs the bench mounts in WORK_DIR ([node]
bpf-dir), and its lifetime is also timed with none kept (a program loaded at
every start). Run as root.

For the lifetimes and `create`, each build's programs run from four
copies, the round's copy in turn: two copies of the same bytes differ here
by up to 1 ms a start (COPIES, below), more than most changes measured (the
`runc run` rounds, tens of milliseconds each, use the first copy). The
order of a round's starts is shuffled, the same every run.

With --baseline, an earlier build's gpubind-runtime (with that build's hook
as its finish hook) starts the same container in every round beside this
build's, and the difference within each round is printed: a change to the
shim's start path measured paired, the same moment's load for both. The
baseline's hook lifetime is timed in the same rounds too, on both images.

Every round of the runc starts prints its four times and what the hook adds
over bare and over the no-op hook (paired); every round of the lifetimes
prints gpubind-hook's lifetime, busybox true's and their ratio (issue 27's
goal: at most 2.0), and the summary their medians and the median of the
per-round ratios. With --timings N, N more starts of the hook and N more
`create`s of the shim log at debug level into WORK_DIR and the medians of
their own step timings are printed.

gpubind-runtime's `create` (its real runtime /bin/true) is timed beside a
/bin/true spawn and beside the floor under any shim, a static program that
only executes /bin/true: the ratios to the spawn (issue 27's goal: at most
2.0), what the shim costs above the floor (paired), and what a system call
costs on this machine.

With --profile, nothing is timed: what a start runs is recorded into
OUT_DIR for scripts/start_order.py (hook/start_order.ld lays that code out
together). Callgrind sees every function of the shim's `create` (its real
runtime a file that cannot be executed, so that the profile ends where the
exec fails; callgrind loses a profile at exec) and the hook's start on both
images up to the first system call this valgrind does not know; perf
samples every start of N rounds of the hook on both images and of the shim
(`perf record -a`, cpu-clock at 20 kHz). Needs valgrind and perf.

With --share (issue 48), the simulated node's driver offers the per-cgroup
memory limit (`gpubind simulate --memory-limits`), and a fifth container
asks for a share of each GPU (GPUBIND_GPU_MEMORY=8GiB, the hook also at
poststop to clear it): its `runc run` and its hook's lifetime are timed in
the same rounds as the start without a share, and the difference printed,
paired: what a share's mechanism costs. A start that asks for none is timed
against --baseline (a build from before shares, a7e9f52) as any change is.

With --real, on a node with the NVIDIA driver: the node itself (all its
GPUs) instead of a simulated one; a driver-state change is the description
removed, and the slow-NVML section is the real NVML's first answer.
"""
import atexit
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

build, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 60
real = "--real" in sys.argv
timings = int(sys.argv[sys.argv.index("--timings") + 1]) if "--timings" in sys.argv else 0
baseline = (os.path.abspath(sys.argv[sys.argv.index("--baseline") + 1])
            if "--baseline" in sys.argv else None)
share = "--share" in sys.argv and not ("--real" in sys.argv)
profile = (os.path.abspath(sys.argv[sys.argv.index("--profile") + 1])
           if "--profile" in sys.argv else None)
cli = f"{build}/cli/gpubind"


# Copies of each build's programs (below). The same bytes started from two
# copies of one file differ here by up to 1 ms a start, steadily: where the
# copy's pages landed (2026-11-28: the linker's file against a copy; 2026-11-29:
# copies alike, 120 rounds, -1.05 ms). So each build runs from COPIES copies,
# the round's copy in turn, and a build's figures are over all of them.
COPIES = 4


def staged(build_dir, name):
    """The build's hook, shim and NVML helper copied side by side (each runs
    the next from beside itself) into COPIES directories of the work
    directory; the first one's path."""
    for k in range(COPIES):
        bin_dir = f"{work}/bin-{name}" + (f"-{k}" if k else "")
        os.makedirs(bin_dir, exist_ok=True)
        for exe in ("gpubind-hook", "gpubind-runtime", "gpubind-nvml"):
            shutil.copy(f"{build_dir}/hook/{exe}", f"{bin_dir}/{exe}.new")
            os.rename(f"{bin_dir}/{exe}.new", f"{bin_dir}/{exe}")
    return f"{work}/bin-{name}"


def copy_of(path, k):
    """The k-th copy of a staged program (staged()); any other path as it is."""
    directory, name = os.path.split(path)
    staged_here = directory in (f"{work}/bin-new", f"{work}/bin-base")
    return f"{directory}-{k}/{name}" if k and staged_here else path


hook = f"{staged(build, 'new')}/gpubind-hook"
shim = f"{work}/bin-new/gpubind-runtime"
base_bin = staged(baseline, "base") if baseline else None
node = f"{work}/node"
state = f"{work}/state"
config = f"{work}/config.toml"
runc = shutil.which("runc")

roots = ""
if not real:
    # Two HCAs, one under each PCIe switch: the RDMA affine start below.
    subprocess.run([cli, "simulate", node, "--gpus", "4", "--hcas", "2"]
                   + (["--memory-limits"] if share else []), check=True,
                   stdout=subprocess.DEVNULL)
    roots = (f'driver-root = "{node}"\ndev-root = "{node}"\nproc-root = "{node}/proc"\n'
             f'sys-root = "{node}/sys"\n')
os.makedirs(state, mode=0o755, exist_ok=True)
# On cgroup v2 the hook extends the runtime's device program and keeps it on
# a bpffs for the next start ([node] bpf-dir): here the bench's own bpffs,
# never the host's (the lifetimes below time a load at every start too).
cgroup_v2 = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True,
                           text=True).stdout.strip() == "cgroup2fs"
bpf_dir = ""
if cgroup_v2:
    bpffs = f"{work}/bpf"
    os.makedirs(bpffs, exist_ok=True)
    if not os.path.ismount(bpffs):
        subprocess.run(["mount", "-t", "bpf", "-o", "mode=0700", "bpf", bpffs], check=True)
    atexit.register(lambda: subprocess.run(["umount", bpffs]))
    bpf_dir = f"{bpffs}/gpubind"


def write_config(path, programs_dir):
    with open(path, "w") as f:
        f.write(f'[node]\n{roots}state-dir = "{state}"\nbpf-dir = "{programs_dir}"\n'
                f'[policy]\ncgroups = true\n[log]\nlevel = "warn"\n[cdi]\ndir = "{work}/cdi"\n')
    os.chmod(path, 0o644)


write_config(config, bpf_dir)

rootfs = f"{work}/image"
for d in ("bin", "proc", "sys", "dev", "tmp", "etc", "usr/bin", "usr/lib/x86_64-linux-gnu",
          "lib/x86_64-linux-gnu", "lib64"):
    os.makedirs(f"{rootfs}/{d}", exist_ok=True)
busybox = os.environ.get("BUSYBOX") or shutil.which("busybox") or "/bin/busybox"
shutil.copy(busybox, f"{rootfs}/bin/busybox")
for tool in ("sh", "true"):
    if not os.path.lexists(f"{rootfs}/bin/{tool}"):
        os.symlink("busybox", f"{rootfs}/bin/{tool}")
for lib in ("libc.so.6", "libm.so.6"):
    shutil.copy(os.path.realpath(f"/lib/x86_64-linux-gnu/{lib}"), f"{rootfs}/lib/x86_64-linux-gnu/{lib}")
shutil.copy(os.path.realpath("/lib64/ld-linux-x86-64.so.2"), f"{rootfs}/lib64/ld-linux-x86-64.so.2")
with open(f"{rootfs}/etc/debian_version", "w") as f:
    f.write("12.0\n")
with open(f"{rootfs}/etc/ld.so.conf", "w") as f:
    f.write("/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n")
subprocess.run(["ldconfig", "-r", rootfs], check=True)

# The same image with 400 more libraries in /usr/lib/x86_64-linux-gnu and its
# cache, as a CUDA runtime image has: what a real image's size costs a start
# (the hook lists that directory and rewrites that cache).
big_rootfs = f"{work}/image-400"
if not os.path.isdir(big_rootfs):  # built beside, renamed when whole
    shutil.rmtree(f"{big_rootfs}.tmp", ignore_errors=True)
    subprocess.run(["cp", "-a", rootfs, f"{big_rootfs}.tmp"], check=True)
    with open(f"{work}/filler.c", "w") as f:
        f.write("int filler(void) { return 1; }\n")
    for i in range(400):
        subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", f"-Wl,-soname,libfiller{i}.so.1",
                        "-o", f"{big_rootfs}.tmp/usr/lib/x86_64-linux-gnu/libfiller{i}.so.1",
                        f"{work}/filler.c"], check=True)
    subprocess.run(["ldconfig", "-r", f"{big_rootfs}.tmp"], check=True)
    os.rename(f"{big_rootfs}.tmp", big_rootfs)


def spec(env=(), hooked=False):
    s = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/true"],
                    "env": ["PATH=/usr/bin:/bin"] + list(env), "cwd": "/",
                    "noNewPrivileges": True},
        "root": {"path": "rootfs", "readonly": False},  # made fresh for each start
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                    "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]},
                  "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
    }
    if hooked:
        s["hooks"] = {"prestart": [{"path": hook, "args": ["gpubind-hook", "prestart"],
                                    "env": [f"GPUBIND_CONFIG={config}"]}]}
    return s


gpu_env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
# The floor any prestart hook puts under a start: runc runs `busybox true`
# (static, does nothing) where gpubind-hook would run.
noop = spec(gpu_env)
noop["hooks"] = {"prestart": [{"path": busybox, "args": ["true"]}]}
bundles = {"bare": spec(), "noop": noop, "hook": spec(gpu_env, True), "shim": spec(gpu_env),
           "hook+cuda": spec(gpu_env + ["NVIDIA_REQUIRE_CUDA=cuda>=12.0"], True)}
if not real:  # the same start choosing the HCAs nearest to the GPUs (issue 23)
    bundles["hook-rdma"] = spec(gpu_env + ["GPUBIND_RDMA=affine"], True)
if share:  # a share of each GPU, cleared at poststop (issue 48)
    bundles["hook-share"] = spec(gpu_env + ["GPUBIND_GPU_MEMORY=8GiB"], True)
    bundles["hook-share"]["hooks"]["poststop"] = [
        {"path": hook, "args": ["gpubind-hook", "poststop"], "env": [f"GPUBIND_CONFIG={config}"]}]
if baseline:
    bundles["shim-base"] = spec(gpu_env)
for name, s in bundles.items():
    os.makedirs(f"{work}/{name}", exist_ok=True)
    with open(f"{work}/{name}/config.json", "w") as f:
        json.dump(s, f)


def baseline_env(config_path, state_dir, out_path):
    """The environment of the baseline build: `config_path` with a state
    directory of its own (the two builds' config digests may differ, and
    each keeps its node description)."""
    os.makedirs(f"{state_dir}-base", mode=0o755, exist_ok=True)
    with open(config_path) as f:
        text = f.read().replace(f'state-dir = "{state_dir}"', f'state-dir = "{state_dir}-base"')
    with open(out_path, "w") as f:
        f.write(text)
    os.chmod(out_path, 0o644)
    return dict(os.environ, GPUBIND_CONFIG=out_path)


env = dict(os.environ, GPUBIND_CONFIG=config)
base_env = baseline_env(config, state, f"{work}/config-base.toml") if baseline else env
counter = 0


@atexit.register
def unmount_roots():
    for name in bundles:
        while os.path.ismount(f"{work}/{name}/rootfs"):
            subprocess.run(["umount", f"{work}/{name}/rootfs"], check=True)


def start(name, overlay=False, image=rootfs, check=True):
    """One `runc run` (through gpubind-runtime for the shim), in ms, on a
    fresh root: a copy of `image` (a plain directory), or an overlay of it
    with an empty upper directory as container engines make."""
    global counter
    counter += 1
    bundle = f"{work}/{name}"
    if name.startswith("shim"):  # the shim edits config.json in place: each start gets the original
        with open(f"{bundle}/config.json", "w") as f:
            json.dump(bundles[name], f)
    binary = {"shim": shim, "shim-base": f"{base_bin}/gpubind-runtime"}.get(name, runc)
    cid = f"gpubind-bench-{os.getpid()}-{counter}"
    layer = f"{work}/layer"
    if overlay:
        for d in ("upper", "work"):
            os.makedirs(f"{layer}/{d}")
        os.makedirs(f"{bundle}/rootfs", exist_ok=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={image},upperdir={layer}/upper,workdir={layer}/work",
                        f"{bundle}/rootfs"], check=True)
    else:  # a tmpfs of its own, emptied and filled with the image
        root = f"{bundle}/rootfs"
        if not os.path.ismount(root):
            os.makedirs(root, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", root], check=True)
        for entry in os.listdir(root):
            path = f"{root}/{entry}"
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        subprocess.run(["cp", "-a", f"{image}/.", root], check=True)
    try:
        t = time.perf_counter()
        r = subprocess.run([binary, "--root", f"{work}/runc", "run", "--bundle", bundle, cid],
                           stdin=subprocess.DEVNULL, capture_output=True,
                           env=base_env if name == "shim-base" else env)
        ms = (time.perf_counter() - t) * 1e3
    finally:
        if overlay:
            subprocess.run(["umount", f"{bundle}/rootfs"], check=True)
            shutil.rmtree(layer)
    if r.returncode != 0 and check:
        sys.exit(f"{name}: exit {r.returncode}: {r.stderr.decode().strip()}")
    return ms


def in_turn(names, rounds):
    """Each round's names in an order of its own (shuffled, the same every
    run): whatever a start leaves behind (a BPF program to free, a page
    cache warmed) falls on each name alike, whichever comes before it."""
    order, shuffle = list(names), random.Random(27).shuffle
    for _ in range(rounds):
        shuffle(order)
        yield list(order)


def stats(xs):
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=10)
    return statistics.median(xs), q[0], q[-1]


def line(label, xs, base=None):
    m, lo, hi = stats(xs)
    text = f"{label:<44} median {m:7.2f} ms  (p10 {lo:6.2f}, p90 {hi:6.2f}, min {min(xs):6.2f}, n={len(xs)})"
    if base is not None:
        text += f"  +{m - base:5.2f} ms  ratio {m / base:.3f}"
    print(text)
    return m


def change_driver_state():
    if real:  # the node's driver is not ours to change: its description goes
        if os.path.exists(f"{state}/node.desc"):
            os.unlink(f"{state}/node.desc")
        return
    cache = f"{node}/etc/ld.so.cache"
    shutil.copy(cache, cache + ".new")
    os.rename(cache + ".new", cache)


for name in ("bare", "noop", "hook", "shim", "hook+cuda") + (("shim-base",) if baseline else ()):
    for _ in range(5):  # warm up; the description is made
        start(name)


def record_profiles(out):
    """--profile (above): callgrind's profiles and perf's samples in `out`."""
    os.makedirs(out, exist_ok=True)
    grind = ["valgrind", "-q", "--tool=callgrind", "--demangle=no"]
    # The shim's create, ending at the exec of a runtime that is no program.
    not_a_program = f"{work}/not-a-program"
    with open(not_a_program, "w") as f:
        f.write("not a program\n")
    os.chmod(not_a_program, 0o755)
    profile_config = f"{work}/config-profile.toml"
    with open(profile_config, "w") as f:
        f.write(f'[node]\n{roots}state-dir = "{state}"\n[policy]\ncgroups = true\n'
                f'[log]\nlevel = "warn"\n[cdi]\ndir = "{work}/cdi"\n'
                f'[runtime]\nruntimes = ["{not_a_program}"]\n')
    os.chmod(profile_config, 0o644)
    bundle = f"{work}/shim-profile"
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.copytree(rootfs, f"{bundle}/rootfs", symlinks=True)
    with open(f"{bundle}/config.json", "w") as f:
        json.dump(bundles["shim"], f)
    subprocess.run(grind + [f"--callgrind-out-file={out}/shim.callgrind", shim, "create",
                            "--bundle", bundle, "profile"],
                   env=dict(os.environ, GPUBIND_CONFIG=profile_config), capture_output=True)
    # The hook through runc, under callgrind, on both images.
    for image_name, image in (("image", rootfs), ("image-400", big_rootfs)):
        wrapper = f"{work}/hook-callgrind-{image_name}"
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\nexec {" ".join(grind)} '
                    f'--callgrind-out-file={out}/hook-{image_name}.callgrind {hook} "$@"\n')
        os.chmod(wrapper, 0o755)
        s = spec(gpu_env)
        s["hooks"] = {"prestart": [{"path": wrapper, "args": ["gpubind-hook", "prestart"],
                                    "env": [f"GPUBIND_CONFIG={config}"]}]}
        bundles["hook-profile"] = s
        os.makedirs(f"{work}/hook-profile", exist_ok=True)
        with open(f"{work}/hook-profile/config.json", "w") as f:
            json.dump(s, f)
        start("hook-profile", image=image, check=False)  # ends where valgrind's syscalls do
    # Every start sampled.
    data = f"{out}/starts.perf.data"
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "cpu-clock", "-F", "20000",
                             "-o", data], stdout=subprocess.DEVNULL)
    time.sleep(1)
    for _ in range(runs):
        for name in ("hook", "hook+cuda", "shim") + (() if real else ("hook-rdma",)):
            start(name)
        start("hook", image=big_rootfs)
    perf.send_signal(signal.SIGINT)
    perf.wait()
    samples = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym", "--no-demangle"],
                             capture_output=True, text=True).stdout
    with open(f"{out}/starts.perf", "w") as f:
        for row in samples.splitlines():
            fields = row.split()  # comm, address, function (none where perf knows none)
            if (len(fields) == 3 and fields[0] in ("gpubind-hook", "gpubind-runtime")
                    and not fields[1].startswith("ffff")):
                f.write(f"{fields[2]}\n")
    os.unlink(data)


if profile:
    record_profiles(profile)
    sys.exit(0)
times = {"bare": [], "noop": [], "hook": [], "shim": []}
if baseline:
    times["shim-base"] = []
if share:
    times["hook-share"] = []
print("-- runc run per round, ms (tmpfs roots): bare, + busybox true, + gpubind-hook, through "
      "gpubind-runtime; the hook minus bare and minus the no-op hook")
for i, order in enumerate(in_turn(times, runs)):
    for name in order:
        times[name].append(start(name))
    t = {name: xs[-1] for name, xs in times.items()}
    print(f"round {i + 1:3}: {t['bare']:6.2f} {t['noop']:6.2f} {t['hook']:6.2f} {t['shim']:6.2f}"
          f"  hook {t['hook'] - t['bare']:+6.2f} / {t['hook'] - t['noop']:+6.2f}", flush=True)
what = "the real node" if real else "4-GPU simulated node"
print(f"== container start, {what}, compute,utility, cgroups on ({runc})")
base = line("runc run (bare)", times["bare"])
line("runc run + a no-op hook (busybox true)", times["noop"], base)
line("runc run + gpubind-hook", times["hook"], base)
line("gpubind-runtime run", times["shim"], base)
if baseline:
    line("gpubind-runtime run, the baseline build", times["shim-base"], base)
if share:
    line("runc run + gpubind-hook, an 8 GiB share", times["hook-share"], base)


def paired(label, xs, ys):
    """The difference within each round (the same moment's load for both)."""
    m, lo, hi = stats([y - x for x, y in zip(xs, ys)])
    print(f"{label:<44} median {m:+7.2f} ms  (p10 {lo:+6.2f}, p90 {hi:+6.2f}, n={len(xs)})")


print("-- paired within each round (what gpubind adds):")
paired("a no-op hook minus bare (any hook's floor)", times["bare"], times["noop"])
paired("gpubind-hook minus bare", times["bare"], times["hook"])
paired("gpubind-hook minus the no-op hook", times["noop"], times["hook"])
paired("gpubind-runtime minus bare", times["bare"], times["shim"])
if baseline:
    paired("gpubind-runtime minus the baseline's", times["shim-base"], times["shim"])
if share:
    paired("a share minus the same start without", times["hook"], times["hook-share"])

# runc's start varies by milliseconds from one run to the next: the hook's own
# share, timed where runc waits for it. A wrapper (C, built here) forks and
# execs the hook and logs the time until it exits; the same for a static
# no-op (`busybox true`), what any hook costs.
wrap_src = f"{work}/hookwrap.c"
with open(wrap_src, "w") as f:
    f.write(r"""#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
int main(int argc, char** argv) {
    (void)argc;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t p = fork();
    if (p == 0) { execv(HOOK, argv); _exit(127); }
    int st = 0;
    waitpid(p, &st, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    FILE* f = fopen(LOG, "a");
    if (f) { fprintf(f, "%.1f\n", (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3); fclose(f); }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
""")
timed = [("hook", hook, ["gpubind-hook", "prestart"], config),
         ("hook-400", hook, ["gpubind-hook", "prestart"], config),
         ("noop", busybox, ["true"], config)]
if not real:
    timed.append(("hook-rdma", hook, ["gpubind-hook", "prestart"], config))
if share:
    timed.append(("hook-share", hook, ["gpubind-hook", "prestart"], config))
if cgroup_v2:  # the same hook with no program kept: loaded at every start
    write_config(f"{work}/config-loaded.toml", "")
    timed.append(("hook-loaded", hook, ["gpubind-hook", "prestart"], f"{work}/config-loaded.toml"))
if baseline:  # the baseline's hook in the same rounds, with its own node description
    timed.append(("hook-base", f"{base_bin}/gpubind-hook", ["gpubind-hook", "prestart"],
                  f"{work}/config-base.toml"))
    timed.append(("hook-400-base", f"{base_bin}/gpubind-hook", ["gpubind-hook", "prestart"],
                  f"{work}/config-base.toml"))
lifetimes = {}
for name, target, args, hook_config in timed:
    log = f"{work}/{name}-lifetime.log"
    if os.path.exists(log):  # a log of an earlier run: the i-th lines must be this run's round i
        os.unlink(log)
    for k in range(COPIES):  # a bundle per copy of the program (staged()), one log
        exe = f"{work}/{name}-wrap-{k}"
        subprocess.run(["cc", "-O2", f'-DHOOK="{copy_of(target, k)}"', f'-DLOG="{log}"',
                        wrap_src, "-o", exe], check=True)
        s = json.loads(json.dumps(
            bundles[{"noop": "bare", "hook-rdma": "hook-rdma", "hook-share": "hook-share"}
                    .get(name, "hook")]))
        s["hooks"] = {"prestart": [{"path": exe, "args": args,
                                    "env": [f"GPUBIND_CONFIG={hook_config}"]}]}
        if name == "hook-share":  # its limit cleared, as the runc rounds' (untimed)
            s["hooks"]["poststop"] = bundles["hook-share"]["hooks"]["poststop"]
        bundles[f"{name}-timed-{k}"] = s
        os.makedirs(f"{work}/{name}-timed-{k}", exist_ok=True)
        with open(f"{work}/{name}-timed-{k}/config.json", "w") as f:
            json.dump(s, f)
    lifetimes[name] = log
for i, order in enumerate(in_turn(lifetimes, max(50, runs // 4))):
    for name in order:
        start(f"{name}-timed-{i % COPIES}",
              image=big_rootfs if name.startswith("hook-400") else rootfs)
print("-- each hook's lifetime, fork to exit, as runc waits for it:")
life = {}
for name, log in lifetimes.items():
    with open(log) as f:
        life[name] = [float(x) / 1e3 for x in f]
    line({"hook": "gpubind-hook", "hook-400": "gpubind-hook, image of 400 libraries",
          "noop": "busybox true (any hook)",
          "hook-rdma": "gpubind-hook, GPUBIND_RDMA=affine",
          "hook-share": "gpubind-hook, an 8 GiB share",
          "hook-loaded": "gpubind-hook, program loaded each start (v2)",
          "hook-base": "gpubind-hook, the baseline build",
          "hook-400-base": "gpubind-hook, 400 libraries, the baseline build"}[name],
         life[name])
print(f"{'gpubind-hook beyond any hook':<44} median {statistics.median(life['hook']) - statistics.median(life['noop']):7.2f} ms")
# Issue 27's measure: the hook's lifetime over busybox true's, in each round
# (the i-th line of each log was written in round i) and over the run.
print("-- gpubind-hook's lifetime / busybox true's, per round (goal: at most 2.0):")
ratios, ratios_400 = [], []
for i, (h, h400, n) in enumerate(zip(life["hook"], life["hook-400"], life["noop"])):
    ratios.append(h / n)
    ratios_400.append(h400 / n)
    print(f"round {i + 1:3}: hook {h:5.2f} ms, 400 libraries {h400:5.2f} ms, busybox true {n:5.2f} ms"
          f"  ratio {h / n:5.2f} ({h400 / n:5.2f})")
summary = [("gpubind-hook / busybox true", ratios, "hook"),
           ("400 libraries / busybox true", ratios_400, "hook-400")]
if baseline:
    summary.append(("the baseline's hook / busybox true",
                     [b / n for b, n in zip(life["hook-base"], life["noop"])], "hook-base"))
    summary.append(("the baseline's, 400 libraries / busybox true",
                     [b / n for b, n in zip(life["hook-400-base"], life["noop"])],
                     "hook-400-base"))
for label, xs, key in summary:
    m, lo, hi = stats(xs)
    print(f"{label:<44} ratio of medians {statistics.median(life[key]) / statistics.median(life['noop']):5.2f}"
          f"  median of the rounds' ratios {m:5.2f} (p10 {lo:5.2f}, p90 {hi:5.2f}, n={len(xs)})")
if baseline:  # the log's i-th lines were written in the same round
    paired("gpubind-hook lifetime minus the baseline's", life["hook-base"], life["hook"])
    paired("the same, 400 libraries", life["hook-400-base"], life["hook-400"])
if "hook-share" in life:  # issue 48: what the driver's limit costs a start
    paired("a share's hook minus the same start without", life["hook"], life["hook-share"])
if "hook-rdma" in life:  # issue 23: at most 0.3 ms
    paired("GPUBIND_RDMA=affine minus the same start without", life["hook"], life["hook-rdma"])


def debug_config(source, target, log, state_dir=None):
    """`source`'s config at debug level into `target`, logging into `log`
    (emptied first); with `state_dir`, its node description kept there."""
    if os.path.exists(log):
        os.unlink(log)
    with open(source) as f:
        text = f.read().replace('level = "warn"', f'level = "debug"\nfile = "{log}"')
    if state_dir:
        os.makedirs(state_dir, mode=0o755, exist_ok=True)
        text = re.sub(r'state-dir = "[^"]*"', f'state-dir = "{state_dir}"', text)
    with open(target, "w") as f:
        f.write(text)
    os.chmod(target, 0o644)


def print_timings(log, program, runs_of, parse):
    """The medians of the step timings in `log`: those `parse(line, steps)`
    finds, and the node description's (load_node's debug line)."""
    steps = {}
    with open(log) as f:
        for text in f:
            parse(text, steps)
            m = re.search(r"fingerprint (\d+) us, reading and parsing (\d+) us", text)
            if m:
                steps.setdefault("  description: fingerprint", []).append(int(m.group(1)))
                steps.setdefault("  description: read and parse", []).append(int(m.group(2)))
    print(f"-- {program}'s own timings at debug level, median of {timings} {runs_of} (us):")
    for k, xs in steps.items():
        print(f"{k:<44} {statistics.median(xs):7.0f}")


# The hook's own step timings (debug level, into a log of the work
# directory): where its lifetime goes. Debug logging makes each start slower.
if timings:
    debug_log = f"{work}/hook-debug.log"
    debug_config(config, f"{work}/config-debug.toml", debug_log)
    s = json.loads(json.dumps(bundles["hook"]))
    s["hooks"]["prestart"][0]["env"] = [f"GPUBIND_CONFIG={work}/config-debug.toml"]
    bundles["hook-debug"] = s
    os.makedirs(f"{work}/hook-debug", exist_ok=True)
    with open(f"{work}/hook-debug/config.json", "w") as f:
        json.dump(s, f)
    for _ in range(timings):
        start("hook-debug")

    def hook_steps(text, steps):
        m = re.search(r"timing: config, state and spec (\d+) us, decision (\d+) us, "
                      r"execution (\d+) us", text)
        if m:
            for k, v in zip(("config, state and spec", "decision", "execution"), m.groups()):
                steps.setdefault(k, []).append(int(v))
        m = re.search(r"execution: (.*)", text)
        if m:
            for part in m.group(1).split(", "):
                mm = re.match(r"(.*) (\d+) us$", part)
                if mm:
                    steps.setdefault("  execution: " + mm.group(1), []).append(int(mm.group(2)))

    print_timings(debug_log, "gpubind-hook", "starts", hook_steps)

# gpubind-runtime's own work at `create`, with /bin/true as the real runtime:
# the spec edited for NVIDIA_VISIBLE_DEVICES, and for a CDI annotation (the
# node's CDI spec applied first). Its config (the runtime, the CDI spec
# directory) is its own, and so is its node description. Each time includes
# a process spawned from Python, timed alone as /bin/true.
shim_config, shim_state = f"{work}/config-shim.toml", f"{work}/state-shim"
os.makedirs(shim_state, mode=0o755, exist_ok=True)
os.makedirs(f"{work}/cdi-shim", exist_ok=True)
with open(shim_config, "w") as f:
    f.write(f'[node]\n{roots}state-dir = "{shim_state}"\n[policy]\ncgroups = true\n'
            f'[log]\nlevel = "warn"\n[cdi]\ndir = "{work}/cdi-shim"\n'
            f'spec-dirs = ["{work}/cdi-shim"]\n[runtime]\nruntimes = ["/bin/true"]\n')
os.chmod(shim_config, 0o644)
shim_env = dict(env, GPUBIND_CONFIG=shim_config)
subprocess.run([cli, "cdi", "generate", "-o", f"{work}/cdi-shim/nvidia.com-gpu.json"],
               env=shim_env, check=True, stdout=subprocess.DEVNULL)
cdi_request = json.loads(json.dumps(bundles["bare"]))
cdi_request["annotations"] = {"cdi.k8s.io/bench": "nvidia.com/gpu=all"}
edits = {"NVIDIA_VISIBLE_DEVICES": bundles["shim"], "a CDI annotation": cdi_request}
# The bundle in a tmpfs, where containerd, CRI-O and docker keep theirs
# (under /run): on this machine's disk, replacing config.json costs ~1 ms of
# the filesystem's own.
create_bundle = f"{work}/shim-create"
os.makedirs(create_bundle, exist_ok=True)
if not os.path.ismount(create_bundle):
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", create_bundle], check=True)
    atexit.register(lambda: subprocess.run(["umount", create_bundle]))
if not os.path.isdir(f"{create_bundle}/rootfs"):  # read, never written: /bin/true runs
    shutil.copytree(rootfs, f"{create_bundle}/rootfs", symlinks=True)
# With --baseline, the baseline's shim edits the same specs in the same
# rounds, with a state directory of its own (its config digest may differ).
shim_base_env = (baseline_env(shim_config, shim_state, f"{work}/config-shim-base.toml")
                 if baseline else shim_env)
shims = [("", shim, shim_env)] + ([(" (baseline)", f"{base_bin}/gpubind-runtime",
                                    shim_base_env)] if baseline else [])
# The floor under any shim, spawned the same way in the same rounds: a static
# program that only executes the real runtime. Above it is gpubind-runtime's
# own work; the floor over /bin/true's spawn is what one more program's
# start costs here, whatever it does.
with open(f"{work}/exec-only.c", "w") as f:
    f.write('#include <unistd.h>\nint main(int argc, char** argv) {\n    (void)argc;\n'
            '    argv[0] = "/bin/true";\n    execv(argv[0], argv);\n    return 127;\n}\n')
floor = f"{work}/exec-only"
subprocess.run(["cc", "-O2", "-static-pie", "-o", floor, f"{work}/exec-only.c"], check=True)
# And what a system call costs here (a guest's can be ten times a host's).
with open(f"{work}/syscall-cost.c", "w") as f:
    f.write("#include <stdio.h>\n#include <time.h>\n#include <unistd.h>\n"
            "#include <sys/syscall.h>\nint main(void) {\n    struct timespec a, b;\n"
            "    clock_gettime(CLOCK_MONOTONIC, &a);\n"
            "    for (int i = 0; i < 100000; ++i) syscall(SYS_getppid);\n"
            "    clock_gettime(CLOCK_MONOTONIC, &b);\n"
            "    printf(\"%.3f\\n\", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e8);\n"
            "    return 0;\n}\n")
subprocess.run(["cc", "-O2", "-o", f"{work}/syscall-cost", f"{work}/syscall-cost.c"], check=True)
create = {"/bin/true": [], "the floor": []}
for name in edits:
    for suffix, _, _ in shims:
        create[name + suffix] = []
for i, order in enumerate(in_turn([(n, shim) for n in edits for shim in shims],
                                  max(50, runs // 2))):
    for name, (suffix, binary, binary_env) in order:
        with open(f"{create_bundle}/config.json", "w") as f:
            json.dump(edits[name], f)
        t = time.perf_counter()
        subprocess.run([copy_of(binary, i % COPIES), "create", "--bundle", create_bundle, "bench"],
                       env=binary_env, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True)
        create[name + suffix].append((time.perf_counter() - t) * 1e3)
    for name, argv in (("/bin/true", ["/bin/true"]),
                       ("the floor", [floor, "create", "--bundle", create_bundle, "bench"])):
        t = time.perf_counter()
        subprocess.run(argv, env=shim_env, check=True, stdin=subprocess.DEVNULL,
                       capture_output=True)
        create[name].append((time.perf_counter() - t) * 1e3)
print("-- gpubind-runtime create alone (the real runtime: /bin/true):")
spawn = statistics.median(create["/bin/true"])
for name, xs in create.items():
    if name == "/bin/true":
        line(f"{name} (the spawn alone)", xs)
    elif name == "the floor":
        m = line("a static program executing /bin/true", xs)
        print(f"{'':<44} ratio to /bin/true {m / spawn:5.2f} (the floor of any shim)")
    else:
        m = line(f"spec edited for {name}", xs)
        print(f"{'':<44} ratio to /bin/true {m / spawn:5.2f}")
for name in edits:
    paired(f"create for {name} minus the floor", create["the floor"], create[name])
if baseline:
    for name in edits:
        paired(f"create for {name} minus the baseline's", create[name + " (baseline)"],
               create[name])
cost = subprocess.run([f"{work}/syscall-cost"], capture_output=True, text=True, check=True)
print(f"{'a system call here (getppid, warm)':<44} {float(cost.stdout):7.3f} us")

# The shim's own step timings likewise (--timings): its `create` for
# NVIDIA_VISIBLE_DEVICES at debug level, with a node description of its own.
if timings:
    shim_log = f"{work}/shim-debug.log"
    debug_config(shim_config, f"{work}/config-shim-debug.toml", shim_log, f"{shim_state}-debug")
    for _ in range(timings):
        with open(f"{create_bundle}/config.json", "w") as f:
            json.dump(edits["NVIDIA_VISIBLE_DEVICES"], f)
        subprocess.run([shim, "create", "--bundle", create_bundle, "bench"],
                       env=dict(env, GPUBIND_CONFIG=f"{work}/config-shim-debug.toml"), check=True,
                       stdin=subprocess.DEVNULL, capture_output=True)

    def shim_steps(text, steps):
        if "timing: " in text:
            for m in re.finditer(r"(?:timing: |, )([a-z ]+?) (\d+) us", text):
                steps.setdefault(m.group(1), []).append(int(m.group(2)))

    print_timings(shim_log, "gpubind-runtime", "creates", shim_steps)

# The same on an overlay root: every file, link and directory created in the
# rootfs goes through overlayfs (tens of microseconds each on this disk), for
# the runtime's spec mounts as for the hook's.
over = {"bare": [], "hook": [], "shim": []}
for _ in range(max(20, runs // 2)):
    for name in over:
        over[name].append(start(name, overlay=True))
print("== the same on an overlay root (an empty upper directory per start)")
obase = line("runc run (bare)", over["bare"])
line("runc run + gpubind-hook", over["hook"], obase)
line("gpubind-runtime run", over["shim"], obase)
paired("gpubind-hook minus bare", over["bare"], over["hook"])
paired("gpubind-runtime minus bare", over["bare"], over["shim"])

first = []
for _ in range(max(10, runs // 4)):
    change_driver_state()
    first.append(start("hook"))
line("first start after a driver-state change", first, base)

if real:
    print("== the real NVML: the first NVIDIA_REQUIRE_CUDA start after the description is removed")
    asked = []
    for _ in range(5):
        change_driver_state()
        asked.append(start("hook+cuda"))
    line("first NVIDIA_REQUIRE_CUDA start (asks NVML)", asked, base)
    line("NVIDIA_REQUIRE_CUDA starts after it", [start("hook+cuda") for _ in range(20)], base)
    sys.exit(0)
os.makedirs(f"{node}/gpubind-fake-nvml", exist_ok=True)
open(f"{node}/gpubind-fake-nvml/inits", "w").close()
with open(f"{node}/gpubind-fake-nvml/delay-ms", "w") as f:
    f.write("2000")
change_driver_state()
print("== NVML sleeping 2 s in nvmlInit_v2")
line("first NVIDIA_REQUIRE_CUDA start (asks NVML)", [start("hook+cuda")], base)
line("NVIDIA_REQUIRE_CUDA starts after it", [start("hook+cuda") for _ in range(20)], base)
line("starts without a requirement", [start("hook") for _ in range(20)], base)
with open(f"{node}/gpubind-fake-nvml/inits") as f:
    print(f"NVML initialisations in all: {len(f.readlines())}")
