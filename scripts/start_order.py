#!/usr/bin/env python3
"""The code a container start runs, laid out together: hook/start_order.ld.

    start_order.py BUILD_DIR PROFILE_DIR > hook/start_order.ld

PROFILE_DIR is what `scripts/bench_start.py BUILD_DIR WORK --profile
PROFILE_DIR` recorded: callgrind's profiles (*.callgrind, every function a
start ran up to where callgrind stopped) and perf's samples (starts.perf, a
function a line). Each function is found in gpubind-hook's and
gpubind-runtime's symbol tables and link maps (BUILD_DIR/hook/*.map, written
at every link), and the input section that holds it is named in a linker
script that gathers those sections into one output section ahead of the
rest of the code (`INSERT BEFORE .text`: the default script otherwise).

Why: a fresh process takes a page fault per 64 KiB of code it touches first
(the kernel maps pages around each fault), and the start's code is spread
over the whole 3 MiB of a static program: on the machine of
docs/benchmarks.md each such fault costs 12-15 us and each first touch a
nested page walk. Gathered, the same code lies in one range, which the
program maps in one call before anything else (hook/entry.cpp) instead of
a fault per 64 KiB.

A section named here that a build no longer has matches nothing; a function
not named stays where it was. Either costs speed, never correctness:
regenerate after the start path changes (docs/benchmarks.md says when it
last was).
"""
import bisect
import glob
import os
import re
import subprocess
import sys

build, profiles = sys.argv[1], sys.argv[2]


def input_sections(map_path):
    """The code's input sections of a GNU ld map, (start, size, section,
    file): those of the output sections .text and .text.start (where an
    earlier start_order.ld put them)."""
    sections, pending, inside = [], None, False
    with open(map_path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith(" "):  # an output section
                inside = line.split()[0] in (".text", ".text.start")
                pending = None
                continue
            if not inside:
                continue
            m = re.match(r"^ (\.text\S*)(?:\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*))?$", line)
            if m and m[2]:
                sections.append((int(m[2], 16), int(m[3], 16), m[1], m[4]))
            elif m:
                pending = m[1]  # a long name: its place on the next line
            elif pending:
                m = re.match(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$", line)
                if m:
                    sections.append((int(m[1], 16), int(m[2], 16), pending, m[3]))
                pending = None
    return sorted(sections)


def functions(binary):
    """Mangled name -> address, from the program's symbol table."""
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] in "tTwWiI":
            found.setdefault(fields[2], int(fields[0], 16))
    return found


def profiled_names():
    """Every function name the profiles hold, in the order first seen."""
    names = []
    for path in sorted(glob.glob(f"{profiles}/*.callgrind")):
        with open(path) as f:
            for line in f:
                m = re.match(r"^c?fn=\(\d+\) (\S+)", line)
                if m:
                    names.append(m[1])
    if os.path.exists(f"{profiles}/starts.perf"):
        with open(f"{profiles}/starts.perf") as f:
            names += [line.strip() for line in f if line.strip()]
    return list(dict.fromkeys(names))


def pattern(section, file):
    """A linker-script input section description. A function's own section
    (`.text._Z...`: an inline or template function, which the linker keeps
    once from whichever object it comes first, or a function compiled with
    -ffunction-sections) by its name alone; a section holding a whole
    file's code by the file too: `*archive.a:member.o(.text)`."""
    if section.startswith(".text._Z"):
        return f"*({section})"
    m = re.match(r"^(.*)\((.*)\)$", file)
    where = f"*{os.path.basename(m[1])}:{m[2]}" if m else f"*{os.path.basename(file)}"
    return f"{where}({section})"


chosen, unplaced = {}, 0  # pattern: size (the largest of the programs')
names = profiled_names() + ["gpubind_entry"]  # every start's first code (hook/entry.cpp)
for program in ("gpubind-hook", "gpubind-runtime"):
    binary = f"{build}/hook/{program}"
    sections = input_sections(f"{binary}.map")
    starts = [s[0] for s in sections]
    where = functions(binary)
    for name in names:
        address = where.get(name)
        if address is None:
            unplaced += 1
            continue
        k = bisect.bisect_right(starts, address) - 1
        if k < 0 or address >= sections[k][0] + sections[k][1]:
            continue
        start, size, section, file = sections[k]
        if not section.startswith(".text.unlikely"):  # the compiler's cold parts stay apart
            p = pattern(section, file)
            chosen[p] = max(size, chosen.get(p, 0))

print("/* Generated by scripts/start_order.py (see there): the input sections")
print(f"   holding the functions a container start runs, {len(chosen)} of them,")
print(f"   {sum(chosen.values()) // 1024} KiB, gathered ahead of the rest of the code. */")
print("SECTIONS\n{\n  .text.start :\n  {")
print("    PROVIDE_HIDDEN(gpubind_start_code = .);")  # mapped at entry (hook/entry.cpp)
for line in sorted(chosen):
    print(f"    {line}")
print("    PROVIDE_HIDDEN(gpubind_start_code_end = .);")
print("  }\n}\nINSERT BEFORE .text;")
print(f"{len(names)} functions profiled, {len(chosen)} sections", file=sys.stderr)
