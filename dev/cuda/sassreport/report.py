"""Assembling the report: kernels (demangled, grouped), resources, launches and occupancy, hot
loops; the text tables and the JSON document (schema in dev/cuda/sass_report's docstring)."""
import re

from cfg import build_cfg, hot_loops, mix_of
from occupancy import occupancy

SCHEMA_VERSION = 1

# (group, pattern on the short name), first match wins; the order is the table's.
GROUPS = [
    ("attention fwd (FA2 class)", r"^attn_fwd_fa2_kernel<"),
    ("attention bwd one-pass (lab candidate)", r"^(attn_bwd_kv_onepass_kernel<|attn_bwd_dq_reduce_kernel<)"),
    ("attention bwd dK/dV (FA2 class)", r"^attn_bwd_kv_fa2_kernel<"),
    ("attention bwd dQ (FA2 class)", r"^attn_bwd_q_fa2_kernel<"),
    ("attention fwd (scalar)", r"^attn_fwd_scalar_kernel<"),
    ("attention bwd (scalar)", r"^attn_bwd_(kv|q)_scalar_kernel<"),
    ("attention helpers", r"^attn_"),
    ("attention decode", r"^(attention_decode|kv_store)"),
    ("decode linear", r"^decode_linear_"),
    ("layernorm", r"^(layernorm_|reduce_partials|reduce_layernorm)"),
    ("qk-norm", r"^qknorm_"),
    ("matmul bias", r"^bias_"),
    ("gelu", r"^gelu_"),
    ("residual", r"^residual_"),
    ("encoder", r"^encoder_"),
    ("classifier", r"^classifier_"),
    ("adamw", r"^(adamw_|copy_master)"),
    ("global norm", r"^global_norm_"),
    ("other", r""),
]


def short_name(demangled: str) -> str:
    """'void llmc::cuda::attn_bwd_q_fa2_kernel<32, false>(__nv_bfloat16*, ...)' ->
    'attn_bwd_q_fa2_kernel<32, false>': no return type, parameters or namespaces."""
    depth, cut = 0, len(demangled)
    for k, ch in enumerate(demangled):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = k
            break
    name = demangled[:cut]
    if name.startswith("void "):
        name = name[5:]
    head, sep, args = name.partition("<")
    return head.rsplit("::", 1)[-1] + sep + args


def group_of(short: str) -> str:
    return next(g for g, pat in GROUPS if re.search(pat, short))


def _natural_key(s: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def sort_key(kernel: dict):
    return ([g for g, _ in GROUPS].index(kernel["group"]), _natural_key(kernel["name"]))


def grid_ordering(instrs: list) -> dict:
    """The grid-wide ordering a one-launch reduction needs (llmc/cuda/grid_arrival.cuh), in address
    order: global atomics (ATOMG, RED, and REDG: sm_90's name for a reduction whose result is not
    used) and GPU- or system-scope fences (MEMBAR .GPU / .SYS) before the first and after the last
    atomic. A fence after its last atomic only is an acquire; the release needs one before."""
    atomic = [k for k, i in enumerate(instrs) if i.base in ("ATOMG", "RED", "REDG")]
    fence = [k for k, i in enumerate(instrs)
             if i.base == "MEMBAR" and (".GPU" in i.opcode or ".SYS" in i.opcode)]
    return {
        "atomics": len(atomic),
        "gpu_fences": len(fence),
        "gpu_fences_before_first_atomic": sum(1 for k in fence if atomic and k < atomic[0]),
        "gpu_fences_after_last_atomic": sum(1 for k in fence if atomic and k > atomic[-1]),
    }


# SASS instructions that reach global (or generic, which may be global) memory: loads, stores,
# atomics and reductions, cp.async's LDGSTS, the TMA and bulk copies, surface and texture accesses.
GLOBAL_MEMORY_OPS = ("LDG", "STG", "LD", "ST", "ATOM", "ATOMG", "RED", "REDG", "LDGSTS", "UTMALDG", "UTMASTG",
                     "UTMAREDG", "UBLKCP", "UBLKRED", "SULD", "SUST", "SURED", "TLD", "TEX")


def grid_dependency(instrs: list) -> dict:
    """Programmatic dependent launch (llmc/cuda/ptx.cuh griddep_begin): in address order, the
    griddepcontrol.wait instructions (ACQBULK on sm_90), the global-memory instructions before the first
    of them (a kernel launched programmatic may run them before its predecessor has ended), and the
    griddepcontrol.launch_dependents (PREEXIT)."""
    waits = [k for k, i in enumerate(instrs) if i.base == "ACQBULK"]
    first = waits[0] if waits else len(instrs)
    return {
        "waits": len(waits),
        "global_memory_before_first_wait": sum(1 for i in instrs[:first] if i.base in GLOBAL_MEMORY_OPS),
        "launch_dependents": sum(1 for i in instrs if i.base == "PREEXIT"),
    }


def kernel_entry(mangled: str, demangled: str, instrs: list, res, launches: list) -> dict:
    """One kernel's JSON entry (see the schema). res: resources.Resources; launches: [Launch]."""
    short = short_name(demangled)
    whole = mix_of(instrs)
    entry = {
        "name": short,
        "group": group_of(short),
        "demangled": demangled,
        "mangled": mangled,
        "instructions": len(instrs),
        "registers": res.registers if res else None,
        "stack_bytes": res.stack if res else None,
        "local_bytes": res.local if res else None,
        "local_loads": whole["LDL"],
        "local_stores": whole["STL"],
        "static_smem": res.static_smem if res else None,
        "launch_bounds": (res.max_threads or None) if res else None,
        "grid_ordering": grid_ordering(instrs),
        "grid_dependency": grid_dependency(instrs),
        "launches": [],
        "hot_loops": [],
    }
    for ln in launches:
        occ = occupancy(res.registers, ln.threads, res.static_smem, ln.dynamic_smem) if res else None
        entry["launches"].append({
            "shape": ln.shape,
            "threads": ln.threads,
            "dynamic_smem": ln.dynamic_smem,
            "occupancy": occ.as_json() if occ else None,
            "occupancy_cuda_occupancy_h": None,
        })
    for hl in hot_loops(build_cfg(instrs)):
        loop = hl.as_json()
        loop["instructions_per_hmma"] = {
            k: round(loop[k]["instructions"] / loop[k]["HMMA"], 2) if loop[k] and loop[k]["HMMA"] else None
            for k in ("body", "min_path", "max_path", "full_path", "masked_path")
        }
        entry["hot_loops"].append(loop)
    return entry


def _kib(b):
    return "-" if b is None else (f"{b / 1024:.1f}K" if b >= 1024 else str(b))


def resource_table(kernels: list) -> str:
    head = ("kernel", "regs", "local B", "LDL/STL", "smem static", "smem dyn", "threads", "blk/SM", "occ", "limited by",
            "shape")
    rows, group = [], None
    for k in kernels:
        if k["group"] != group:
            group = k["group"]
            rows.append(("## " + group, ) + ("", ) * (len(head) - 1))
        launches = k["launches"] or [None]
        for j, ln in enumerate(launches):
            first = j == 0
            occ = ln["occupancy"] if ln else None
            rows.append((
                "  " + k["name"] if first else "",
                str(k["registers"]) if first else "",
                str(k["local_bytes"]) if first else "",
                f"{k['local_loads']}/{k['local_stores']}" if first else "",
                _kib(k["static_smem"]) if first else "",
                _kib(ln["dynamic_smem"]) if ln else "?",
                str(ln["threads"]) if ln else (f"<={k['launch_bounds']}" if k["launch_bounds"] else "?"),
                str(occ["blocks_per_sm"]) if occ else "-",
                f"{100 * occ['occupancy']:.0f}%" if occ else "-",
                ",".join(occ["limited_by"]) if occ else "launch not known",
                ln["shape"] if ln and ln["shape"] != "-" else "",
            ))
    return _format(head, rows)


MIX_COLUMNS = ["instructions", "HMMA", "LDSM", "LDGSTS", "LDGSTS.ZFILL", "LDS", "STS", "LDG", "STG", "MUFU", "MUFU.EX2", "BAR", "SHFL",
               "LDL", "STL", "CALL"]


def loop_table(kernels: list) -> str:
    head = ("kernel", "loop", "count") + tuple("instr" if c == "instructions" else c for c in MIX_COLUMNS[:2]) + (
        "instr/HMMA", ) + tuple(MIX_COLUMNS[2:])
    rows = []
    for k in kernels:
        for n, loop in enumerate(k["hot_loops"]):
            for j, path in enumerate(("min_path", "max_path", "masked_path", "full_path", "body")):
                mix = loop[path]
                if mix is None:  # masked_path of a loop whose every trip zero-fills a copy
                    continue
                per = loop["instructions_per_hmma"][path]
                rows.append((k["name"] if n == 0 and j == 0 else "", f"{loop['start']}" if j == 0 else "",
                             path.replace("_", " "), str(mix["instructions"]), str(mix["HMMA"]),
                             f"{per:.1f}" if per is not None else "-") + tuple(str(mix[c]) for c in MIX_COLUMNS[2:]))
    return _format(head, rows)


def _format(head, rows) -> str:
    """Columns padded to their widest cell, the first left-aligned; a row whose first cell starts
    with '## ' is a group heading printed alone."""
    widths = [max(len(str(r[c])) for r in [head] + rows) for c in range(len(head))]

    def line(cells):
        return "  ".join(str(v).ljust(w) if c == 0 else str(v).rjust(w) for c, (v, w) in enumerate(zip(cells, widths)))

    lines = [line(head), "  ".join("-" * w for w in widths)]
    lines += [r[0] if str(r[0]).startswith("## ") else line(r) for r in rows]
    return "\n".join(lines)
