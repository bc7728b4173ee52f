"""Per-function resources of one architecture's cubins, from cuobjdump:
  -res-usage   REG (registers per thread), STACK, SHARED (static shared bytes), LOCAL (local memory
               bytes per thread: spills and local arrays);
  -elf         EIATTR_MAX_THREADS (__launch_bounds__' block size) from each .nv.info.<function>.
On sm_90, SHARED includes the 1 KiB the system reserves at the start of each block's shared window
whenever the module uses shared memory at all (the kernels' shared data then starts at 0x400; a
kernel without __shared__ reports 1024 or 0, both seen in one module). static_smem is SHARED without
that KiB; the occupancy adds the reservation once, as the driver does (reservedSharedMemPerBlock).
"""
import re
from dataclasses import dataclass

RESERVED_SMEM = 1024  # bytes per block on sm_80 and later

_SECTION = re.compile(r"arch = (sm_\w+)|code for (sm_\w+)")
_FUNC = re.compile(r"^\s*Function (\S+):\s*$")
_USAGE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


@dataclass
class Resources:
    registers: int
    stack: int
    shared_reported: int  # SHARED as cuobjdump prints it
    local: int
    static_smem: int = 0  # shared_reported without the system reservation
    max_threads: int = 0  # __launch_bounds__ (EIATTR_MAX_THREADS), 0 when none


def parse_res_usage(text: str) -> list:
    """[(elf index, mangled name, Resources)] in the order listed. cuobjdump -arch X -res-usage lists
    one 'Resource usage:' group per ELF."""
    out, elf, name = [], -1, None
    for line in text.splitlines():
        if line.startswith("Resource usage:"):
            elf += 1
            continue
        m = _FUNC.match(line)
        if m:
            name = m.group(1)
            continue
        m = _USAGE.search(line)
        if m and name:
            out.append((max(elf, 0), name, Resources(*(int(g) for g in m.groups()))))
            name = None
    return out


def resources_by_function(text: str) -> dict:
    """{mangled name: Resources} with static_smem set; a name in several ELFs keeps its first."""
    rows = parse_res_usage(text)
    by_elf = {}
    for elf, _, r in rows:
        by_elf.setdefault(elf, []).append(r)
    out = {}
    for elf, name, r in rows:
        # the reservation is in the SHARED of every function of a module that uses shared memory,
        # except functions that report none at all (0)
        reporting = [x.shared_reported for x in by_elf[elf] if x.shared_reported]
        module_reserves = bool(reporting) and all(s >= RESERVED_SMEM for s in reporting)
        r.static_smem = r.shared_reported - RESERVED_SMEM if module_reserves and r.shared_reported else r.shared_reported
        out.setdefault(name, r)
    return out


_INFO = re.compile(r"^\.nv\.info\.(\S+)\s*$")
_MAX_THREADS = re.compile(r"Value:\s+0x([0-9a-f]+) 0x([0-9a-f]+) 0x([0-9a-f]+)")


def parse_max_threads(elf_text: str) -> dict:
    """{mangled name: block size} from EIATTR_MAX_THREADS in `cuobjdump -elf` output."""
    out, name, want = {}, None, False
    for line in elf_text.splitlines():
        m = _INFO.match(line)
        if m:
            name, want = m.group(1), False
            continue
        if "Attribute:" in line:
            want = "EIATTR_MAX_THREADS" in line
            continue
        if want and name:
            m = _MAX_THREADS.search(line)
            if m:
                x, y, z = (int(g, 16) for g in m.groups())
                out.setdefault(name, x * y * z)
                want = False
    return out
