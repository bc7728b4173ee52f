"""Theoretical occupancy of a kernel on an H100 SXM (compute capability 9.0), from its registers per
thread, threads per block and shared memory per block, with the SM's limits:
  65536 registers per SM in 4 sub-partitions, allocated per warp in units of 256;
  228 KiB shared memory per SM, 227 KiB at most per block, allocated in units of 128 bytes, plus the
  1 KiB the system reserves per block; 2048 threads (64 warps) and 32 blocks per SM.
cross_check() runs the same inputs through the toolkit's cuda_occupancy.h (occupancy_check.cpp).
"""
from dataclasses import dataclass

REGS_PER_SM = 65536
REG_SUBPARTITIONS = 4
REG_ALLOC_UNIT = 256  # registers, per warp
MAX_REGS_PER_THREAD = 255
SMEM_PER_SM = 228 * 1024
SMEM_PER_BLOCK_MAX = 227 * 1024
SMEM_ALLOC_UNIT = 128
RESERVED_SMEM = 1024
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
WARP = 32


def _ceil_to(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float  # warps_per_sm / 64
    limiters: list  # the limits that give blocks_per_sm: 'registers', 'shared', 'warps', 'blocks'
    smem_per_block: int  # allocated: static + dynamic + reservation, rounded to the unit

    def as_json(self) -> dict:
        return {
            "blocks_per_sm": self.blocks_per_sm,
            "warps_per_sm": self.warps_per_sm,
            "occupancy": round(self.occupancy, 4),
            "limited_by": self.limiters,
            "smem_per_block_allocated": self.smem_per_block,
        }


def occupancy(registers: int, threads: int, static_smem: int, dynamic_smem: int) -> Occupancy:
    """static_smem without the system reservation (resources.Resources.static_smem)."""
    if threads < 1 or threads > 1024:
        raise ValueError(f"threads per block {threads} outside 1..1024")
    warps = -(-threads // WARP)
    regs_per_warp = _ceil_to(max(registers, 1) * WARP, REG_ALLOC_UNIT)
    warps_per_partition = (REGS_PER_SM // REG_SUBPARTITIONS) // regs_per_warp
    by_regs = (warps_per_partition * REG_SUBPARTITIONS) // warps
    smem = static_smem + dynamic_smem
    alloc = _ceil_to(smem + RESERVED_SMEM, SMEM_ALLOC_UNIT)
    by_smem = SMEM_PER_SM // alloc if smem <= SMEM_PER_BLOCK_MAX else 0
    by_warps = MAX_WARPS_PER_SM // warps
    limits = {"registers": by_regs, "shared": by_smem, "warps": by_warps, "blocks": MAX_BLOCKS_PER_SM}
    blocks = min(limits.values())
    if registers > MAX_REGS_PER_THREAD:
        blocks = 0
    limiters = [k for k, v in limits.items() if v == blocks]
    return Occupancy(blocks, blocks * warps, blocks * warps / MAX_WARPS_PER_SM, limiters, alloc)


# cuda_occupancy.h's cudaOccLimitingFactor bits -> our limiter names
OCC_LIMIT_BITS = {1: "warps", 2: "registers", 4: "shared", 8: "blocks"}


def parse_cross_check(text: str) -> dict:
    """occupancy_check's output -> {key: blocks per SM, or None where the calculator refused}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[parts[0]] = None if parts[1] == "error" else int(parts[1])
    return out
