"""Control flow of one SASS function: basic blocks, dominators, natural loops, and the hot loops
(the innermost loops that contain HMMA) with their instruction mix.

Edges: a direct branch (BRA, JMP) goes to its target, and also falls through unless it is
unconditional (no guard, or @PT, and no predicate operand); EXIT, RET, BRX/JMX (indirect) and an
unguarded trap end a block with no successor inside the function (an indirect branch is flagged).
CALL falls through: the callee (a subroutine placed after the kernel's code, e.g. the slow path of
an IEEE division) is not part of the caller's loop, and its instructions are not counted.
Loops: a back edge is an edge u -> h whose head h dominates u (in SASS it is a backward branch);
the loop of head h is h plus every block that reaches a back edge's source without passing h
(all back edges to one head make one loop). A hot loop contains an HMMA and contains no other
loop that contains one.
Per hot loop three counts (each a Mix, see MIX_KEYS):
  body      every instruction of the loop once (all paths, the code of every branch);
  min_path  the shortest trip from the head to a back edge, inner loops counted as one trip (for
            an attention kernel: a tile without masking and without soft-cap);
  max_path  the longest such trip (a masked tile with soft-cap);
  masked_path  the longest trip whose cp.async copies (LDGSTS) all copy whole rows, i.e. none has
            a zero-fill predicate operand (LDGSTS.ZFILL): an attention kernel's masked tile that
            prefetches a whole tile. The FA2-class kernels copy a ragged tile (rows past T, zero
            filled) in a separate branch that runs at most once per block and never when T is a
            multiple of the tile; max_path may take it, masked_path does not. None when every trip
            takes a zero-filling copy.
A trip enters an inner loop only if its path does (a guard that skips it is a shorter path).
"""
import re
from dataclasses import dataclass, field

from sass_parse import Instr, branch_target

# The instruction-mix columns: name -> predicate on an instruction.
MIX_KEYS = {
    "instructions": lambda i: True,
    "HMMA": lambda i: i.base == "HMMA",
    "LDSM": lambda i: i.base == "LDSM",
    "LDGSTS": lambda i: i.base == "LDGSTS",
    "LDGSTS.ZFILL": lambda i: i.base == "LDGSTS" and bool(_ZFILL_OPERAND.search(i.operands)),
    "LDS": lambda i: i.base == "LDS",
    "STS": lambda i: i.base == "STS",
    "LDG": lambda i: i.base == "LDG",
    "STG": lambda i: i.base == "STG",
    "MUFU": lambda i: i.base == "MUFU",
    "MUFU.EX2": lambda i: i.opcode.startswith("MUFU.EX2"),
    "BAR": lambda i: i.base == "BAR",
    "SHFL": lambda i: i.base == "SHFL",
    "LDL": lambda i: i.base == "LDL",
    "STL": lambda i: i.base == "STL",
    "CALL": lambda i: i.base == "CALL",
    "NOP": lambda i: i.base == "NOP",
}

_PRED_OPERAND = re.compile(r"^!?U?P[0-6]\b")
# LDGSTS's last operand, when present, is the predicate that turns the copy into a zero fill
# (cp.async with src-size 0 for a row past T): `LDGSTS.E.BYPASS.128 [R29+0x1000], desc[UR8][R12.64], !P2`
_ZFILL_OPERAND = re.compile(r",\s*!?P[0-6T]\s*$")


def _unconditional(ins: Instr) -> bool:
    if ins.pred not in ("", "PT"):
        return False
    if ins.opcode.startswith("BRA.DIV"):
        return False
    return not _PRED_OPERAND.match(ins.operands)


def _ends_block(ins: Instr) -> bool:
    return ins.base in ("BRA", "JMP", "BRX", "JMX", "EXIT", "RET", "BPT", "KILL")


@dataclass
class Block:
    start: int  # index of the first instruction in the function's list
    end: int  # one past the last
    succs: list = field(default_factory=list)  # block ids


@dataclass
class Loop:
    head: int  # block id
    blocks: set  # block ids
    tails: set  # block ids with a back edge to head


@dataclass
class Cfg:
    instrs: list
    blocks: list
    indirect: bool  # the function has an indirect branch (BRX/JMX): its loops may be incomplete
    loops: list  # Loop, one per head

    def block_instrs(self, b: int):
        blk = self.blocks[b]
        return self.instrs[blk.start:blk.end]


def build_cfg(instrs: list) -> Cfg:
    n = len(instrs)
    index_of = {ins.addr: k for k, ins in enumerate(instrs)}
    leaders = {0} if n else set()
    indirect = False
    for k, ins in enumerate(instrs):
        t = branch_target(ins)
        if t is not None and t in index_of and ins.base != "CALL":
            leaders.add(index_of[t])
        if ins.base == "CALL" and t in index_of:
            leaders.add(index_of[t])  # a subroutine's entry
        if ins.base in ("BRX", "JMX"):
            indirect = True
        if _ends_block(ins) and k + 1 < n:
            leaders.add(k + 1)
    starts = sorted(leaders)
    block_at = {}
    blocks = []
    for j, s in enumerate(starts):
        e = starts[j + 1] if j + 1 < len(starts) else n
        block_at[s] = len(blocks)
        blocks.append(Block(s, e))
    for b, blk in enumerate(blocks):
        last = instrs[blk.end - 1]
        t = branch_target(last)
        falls = True
        if last.base in ("BRA", "JMP"):
            if t is not None and t in index_of:
                blk.succs.append(block_at[index_of[t]])
            falls = not _unconditional(last)
        elif last.base in ("EXIT", "RET", "BPT", "KILL"):
            falls = not _unconditional(last)
        elif last.base in ("BRX", "JMX"):
            falls = False
        if falls and blk.end < n:
            nxt = block_at[blk.end]
            if nxt not in blk.succs:
                blk.succs.append(nxt)
    cfg = Cfg(instrs, blocks, indirect, [])
    cfg.loops = _natural_loops(cfg)
    return cfg


def _dominators(cfg: Cfg, entry: int = 0) -> dict:
    """{block: set of its dominators} over the blocks reachable from entry (iterative)."""
    reach, stack = {entry}, [entry]
    while stack:
        b = stack.pop()
        for s in cfg.blocks[b].succs:
            if s not in reach:
                reach.add(s)
                stack.append(s)
    preds = {b: [] for b in reach}
    for b in reach:
        for s in cfg.blocks[b].succs:
            preds[s].append(b)
    order = sorted(reach)
    dom = {b: set(reach) for b in reach}
    dom[entry] = {entry}
    changed = True
    while changed:
        changed = False
        for b in order:
            if b == entry:
                continue
            ps = [dom[p] for p in preds[b]]
            new = set.intersection(*ps) | {b} if ps else {b}
            if new != dom[b]:
                dom[b] = new
                changed = True
    return dom


def _natural_loops(cfg: Cfg) -> list:
    if not cfg.blocks:
        return []
    dom = _dominators(cfg)
    preds = {b: [] for b in range(len(cfg.blocks))}
    for b, blk in enumerate(cfg.blocks):
        for s in blk.succs:
            preds[s].append(b)
    loops = {}
    for u in dom:
        for h in cfg.blocks[u].succs:
            if h in dom[u]:  # back edge u -> h
                loop = loops.setdefault(h, Loop(h, {h}, set()))
                loop.tails.add(u)
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x in loop.blocks:
                        continue
                    loop.blocks.add(x)
                    stack.extend(preds[x])
    return [loops[h] for h in sorted(loops)]


def mix_of(instrs) -> dict:
    return {k: sum(1 for i in instrs if f(i)) for k, f in MIX_KEYS.items()}


def _add(a: dict, b: dict) -> dict:
    return {k: a[k] + b[k] for k in a}


def _trip_mixes(cfg: Cfg, loop: Loop):
    """(min_path, max_path, full_path) Mix over one trip of `loop`: paths from the head to a back
    edge inside the loop's blocks, without its back edges and without those of the loops nested in
    it, that enter every nested loop (each walked once) if any path does (else the paths that enter
    the most). min and max compare total instructions; full_path is the shortest of the paths with
    the most HMMA and, among those, the most LDGSTS (the FA2-class forward, which skips MMAs on
    masked tiles and prefetches on all but the last tile: an unmasked tile that prefetches)."""
    inner = [o for o in cfg.loops if o.head != loop.head and o.blocks < loop.blocks]
    inner_back = {(t, o.head) for o in inner for t in o.tails}
    bit = {o.head: 1 << k for k, o in enumerate(inner)}
    succ = {}
    for b in loop.blocks:
        succ[b] = [
            s for s in cfg.blocks[b].succs if s in loop.blocks and s != loop.head and (b, s) not in inner_back
        ]
    order = _topological(succ, loop.head)
    block_mix = {b: mix_of(cfg.block_instrs(b)) for b in loop.blocks}
    # best[(block, mask of the nested loops entered)] = (min Mix, max Mix) of the paths head -> block
    def full_key(m):
        return (-m["HMMA"], -m["LDGSTS"], m["instructions"])

    def whole(m):  # a path without a zero-filling copy, or None
        return m if m is not None and m["LDGSTS.ZFILL"] == 0 else None

    def longer(a, b):  # the longer of two optional paths
        if a is None or b is None:
            return a if b is None else b
        return a if a["instructions"] > b["instructions"] else b

    head_mix = block_mix[loop.head]
    best = {(loop.head, bit.get(loop.head, 0)): (head_mix, head_mix, head_mix, whole(head_mix))}
    for b in order:
        for mask in [m for (x, m) in list(best) if x == b]:
            lo, hi, full, masked = best[(b, mask)]
            for s in succ[b]:
                key = (s, mask | bit.get(s, 0))
                cand = (_add(lo, block_mix[s]), _add(hi, block_mix[s]), _add(full, block_mix[s]),
                        whole(_add(masked, block_mix[s])) if masked is not None else None)
                if key not in best:
                    best[key] = cand
                else:
                    old_lo, old_hi, old_full, old_masked = best[key]
                    best[key] = (
                        cand[0] if cand[0]["instructions"] < old_lo["instructions"] else old_lo,
                        cand[1] if cand[1]["instructions"] > old_hi["instructions"] else old_hi,
                        cand[2] if full_key(cand[2]) < full_key(old_full) else old_full,
                        longer(cand[3], old_masked),
                    )
    ends = [(t, m) for (t, m) in best if t in loop.tails]
    most = max(bin(m).count("1") for _, m in ends)
    ends = [(t, m) for (t, m) in ends if bin(m).count("1") == most]
    lo = min((best[e][0] for e in ends), key=lambda m: m["instructions"])
    hi = max((best[e][1] for e in ends), key=lambda m: m["instructions"])
    full = min((best[e][2] for e in ends), key=full_key)
    masked = None
    for e in ends:
        masked = longer(masked, best[e][3])
    return lo, hi, full, masked, most == len(inner)


def _topological(succ: dict, head: int) -> list:
    """The blocks reachable from head in topological order; an error if a cycle is left (an
    irreducible loop)."""
    order, state = [], {head: 1}
    stack = [(head, iter(succ[head]))]
    while stack:
        x, it = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            state[x] = 2
            order.append(x)
            stack.pop()
        elif nxt not in state:
            state[nxt] = 1
            stack.append((nxt, iter(succ[nxt])))
        elif state[nxt] == 1:
            raise ValueError(f"irreducible control flow in the loop at block {head}")
    order.reverse()
    return order


@dataclass
class HotLoop:
    start: int  # address of the head's first instruction
    end: int  # address of the last instruction of the loop's last block in address order
    body: dict  # Mix of every instruction of the loop once
    min_path: dict  # Mix of the shortest trip (nested loops entered once each)
    max_path: dict  # Mix of the longest trip
    full_path: dict  # Mix of the shortest trip among those with the most HMMA, then the most LDGSTS
    masked_path: object  # Mix of the longest trip without a zero-filling LDGSTS, or None
    inner_loop_sizes: list  # instructions of each loop nested in this one (none has an HMMA)
    paths_enter_inner: bool  # False: no trip enters every nested loop (the paths enter the most)

    def as_json(self) -> dict:
        return {
            "start": f"0x{self.start:x}",
            "end": f"0x{self.end:x}",
            "inner_loop_sizes": self.inner_loop_sizes,
            "paths_enter_every_inner_loop": self.paths_enter_inner,
            "body": self.body,
            "min_path": self.min_path,
            "max_path": self.max_path,
            "full_path": self.full_path,
            "masked_path": self.masked_path,
        }


def hot_loops(cfg: Cfg) -> list:
    """The innermost loops that contain an HMMA, in address order."""
    with_hmma = []
    for loop in cfg.loops:
        if any(i.base == "HMMA" for b in loop.blocks for i in cfg.block_instrs(b)):
            with_hmma.append(loop)
    out = []
    for loop in with_hmma:
        if any(o.head != loop.head and o.blocks < loop.blocks for o in with_hmma):
            continue
        lo, hi, full, masked, all_inner = _trip_mixes(cfg, loop)
        inner = [o for o in cfg.loops if o.head != loop.head and o.blocks < loop.blocks]
        last = max(loop.blocks, key=lambda b: cfg.blocks[b].start)
        out.append(
            HotLoop(
                cfg.instrs[cfg.blocks[loop.head].start].addr,
                cfg.instrs[cfg.blocks[last].end - 1].addr,
                mix_of([i for b in loop.blocks for i in cfg.block_instrs(b)]),
                lo,
                hi,
                full,
                masked,
                [sum(len(cfg.block_instrs(b)) for b in o.blocks) for o in inner],
                all_inner,
            ))
    return sorted(out, key=lambda h: h.start)
