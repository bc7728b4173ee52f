"""cuobjdump -sass text -> the instructions of each function of one architecture.

Input: the text `cuobjdump -sass [-arch sm_XX] FILE` prints: per ELF a line `code for sm_XX`, then per
function `Function : <mangled name>` and its instructions, one per line:
    /*0a40*/   @!P0 BRA 0x1a30 ;    /* 0x... */
(the encoding's second word on the next line, `/* 0x... */` only, is skipped).
Output: {mangled name: [Instr]} in address order, for the functions of the requested architecture.
"""
import re
from dataclasses import dataclass, field

_ARCH = re.compile(r"^\s*code for (sm_\w+)")
_FUNC = re.compile(r"^\s*Function : (\S+)")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_PRED = re.compile(r"^@(!?U?P[0-9T])\s+")
_HEX = re.compile(r"0x[0-9a-f]+")


@dataclass
class Instr:
    addr: int  # byte offset in the function
    pred: str  # guard predicate as written ('P0', '!P1', 'PT', ''), '' when unguarded
    opcode: str  # the full opcode with modifiers, e.g. 'HMMA.16816.F32.BF16', 'MUFU.EX2'
    operands: str  # the rest of the line, e.g. 'R16, R12, R2, R16'
    text: str = field(default="", repr=False)

    @property
    def base(self) -> str:
        """The opcode without modifiers: 'HMMA', 'MUFU', 'LDSM'."""
        return self.opcode.split(".", 1)[0]


def parse_instruction(addr: int, body: str) -> Instr:
    body = body.rstrip(" ;")
    pred = ""
    m = _PRED.match(body)
    if m:
        pred = m.group(1)
        body = body[m.end():]
    parts = body.split(None, 1)
    opcode = parts[0] if parts else ""
    operands = parts[1].strip() if len(parts) > 1 else ""
    return Instr(addr, pred, opcode, operands, body)


def parse_sass(text: str, arch: str = "sm_90") -> dict:
    """{mangled function name: [Instr, ...]} of the functions compiled for `arch`. A name met in
    several ELFs (the same kernel in two binaries' cubins) keeps its first listing."""
    functions = {}
    cur_arch, cur = None, None
    for line in text.splitlines():
        m = _ARCH.match(line)
        if m:
            cur_arch, cur = m.group(1), None
            continue
        m = _FUNC.match(line)
        if m:
            name = m.group(1)
            if cur_arch == arch and name not in functions:
                cur = functions[name] = []
            else:
                cur = None
            continue
        if cur is None:
            continue
        m = _INSTR.match(line)
        if m:
            cur.append(parse_instruction(int(m.group(1), 16), m.group(2)))
    return functions


def branch_target(ins: Instr):
    """The absolute target of a direct branch or call (BRA, JMP, CALL.REL, BRA.DIV, ...) or None."""
    if ins.base not in ("BRA", "JMP", "CALL", "BRX", "JMX"):
        return None
    m = _HEX.search(ins.operands)
    if ins.base in ("BRX", "JMX") or not m:
        return None
    return int(m.group(0), 16)
