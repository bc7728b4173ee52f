"""dev/cuda/sass_report: the SASS parser and loop analysis against a fixture whose counts are known
from its source (test/fixtures/sass/hot_loop.cu), the fixture against a fresh compile and nvdisasm's
own control-flow graph, the occupancy against the toolkit's cuda_occupancy.h on random inputs, and
the real report of the production binaries (it must list the attention kernels with their hot loops).

The real report: SASS_REPORT_JSON names the JSON `make sass-report` wrote (make test sets it), else
the script runs here on TRAIN_GPT2_LS (default ./train_gpt2_ls, an nvcc build) or, when that holds no
sm_90 code, compiles the production sources itself. Without nvcc those tests skip (say why).
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "dev/cuda/sass_report"
FIXTURE = REPO / "test/fixtures/sass"
sys.path.insert(0, str(REPO / "dev/cuda/sassreport"))

import build  # noqa: E402
import cfg  # noqa: E402
import occupancy  # noqa: E402
from sass_parse import parse_sass  # noqa: E402
from tools import cuda_home, find_cuda_tool, run  # noqa: E402

HAVE_NVCC = shutil.which("nvcc") is not None
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="needs nvcc (the CUDA toolkit) to compile sm_90 code")

# hot_loop.cu's tile loop, per trip, from its source (see the comment at its top)
TILE_LOOP = {"HMMA": 2, "MUFU": 1, "MUFU.EX2": 1, "BAR": 2, "SHFL": 1, "LDS": 2, "STS": 1, "LDG": 1, "STG": 0,
             "LDSM": 0, "LDGSTS": 0, "LDL": 0, "STL": 0, "CALL": 0}


def instruction_lines(text: str):
    """[(address, text)] of the instruction lines, read without the parser."""
    return [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4})\*/\s+([^;]*);", text)]


def loop_span_by_text(text: str):
    """(head, tail) addresses of the backward branch that encloses the HMMAs, and the number of
    instruction lines from head to tail: found by reading the listing, not by the CFG code."""
    lines = instruction_lines(text)
    hmma = [a for a, t in lines if "HMMA" in t]
    for addr, t in lines:
        m = re.search(r"BRA (0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) <= min(hmma) and addr >= max(hmma):
            head = int(m.group(1), 16)
            return head, addr, sum(1 for a, _ in lines if head <= a <= addr)
    raise AssertionError("no backward branch around the HMMAs")


def hot_loops_of(text: str):
    functions = parse_sass(text)
    assert list(functions) == ["hot_loop"]
    graph = cfg.build_cfg(functions["hot_loop"])
    return graph, cfg.hot_loops(graph)


def check_tile_loop(text: str):
    graph, loops = hot_loops_of(text)
    assert len(loops) == 1, "exactly one innermost loop holds the mma.sync"
    loop = loops[0]
    head, tail, n = loop_span_by_text(text)
    assert (loop.start, loop.end) == (head, tail)
    # one path through the trip: every instruction of the body, the nested copy loop entered once
    for mix in (loop.min_path, loop.max_path, loop.body):
        assert mix["instructions"] == n
        for key, want in TILE_LOOP.items():
            assert mix[key] == want, f"{key}: {mix[key]} != {want}"
    assert len(loop.inner_loop_sizes) == 1 and loop.paths_enter_inner
    return graph


def test_fixture_hot_loop_counts_are_the_sources():
    check_tile_loop((FIXTURE / "hot_loop.sass").read_text())


def test_fixture_loops_found_and_only_the_mma_loop_is_hot():
    graph, loops = hot_loops_of((FIXTURE / "hot_loop.sass").read_text())
    heads = [graph.instrs[graph.blocks[lp.head].start].addr for lp in graph.loops]
    # the tile loop, its copy loop, the ex2 tail loop; the trap after EXIT (BRA to itself) is unreachable
    assert len(heads) == 3
    tail_loop = max(graph.loops, key=lambda lp: graph.blocks[lp.head].start)
    tail_instrs = [i for b in tail_loop.blocks for i in graph.block_instrs(b)]
    assert sum(i.opcode == "MUFU.EX2" for i in tail_instrs) == 1 and not any(i.base == "HMMA" for i in tail_instrs)
    assert all(lp.start != graph.instrs[graph.blocks[tail_loop.head].start].addr for lp in loops)


def test_min_path_takes_the_shorter_branch_and_max_the_longer():
    # a loop with an if/else inside: min and max paths must take different arms, body both
    text = """
	code for sm_90
		Function : diamond
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   HMMA.16816.F32.BF16 R8, R4, R2, R8 ;
        /*0020*/               @P0 BRA 0x60 ;
        /*0030*/                   MUFU.EX2 R1, R1 ;
        /*0040*/                   MUFU.EX2 R1, R1 ;
        /*0050*/                   BRA 0x70 ;
        /*0060*/                   LDS R3, [R2] ;
        /*0070*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0080*/               @P1 BRA 0x10 ;
        /*0090*/                   EXIT ;
"""
    graph = cfg.build_cfg(parse_sass(text)["diamond"])
    (loop, ) = cfg.hot_loops(graph)
    assert (loop.start, loop.end) == (0x10, 0x80)
    assert loop.min_path["instructions"] == 5 and loop.min_path["LDS"] == 1 and loop.min_path["MUFU"] == 0
    assert loop.max_path["instructions"] == 7 and loop.max_path["MUFU.EX2"] == 2 and loop.max_path["LDS"] == 0
    assert loop.body["instructions"] == 8 and loop.body["MUFU.EX2"] == 2 and loop.body["LDS"] == 1


def test_full_path_keeps_every_hmma_and_the_prefetch():
    # one arm skips an HMMA (a masked tile's skipped block) and is the shortest; one arm copies
    # (LDGSTS, the prefetch): full_path is the shortest trip with both HMMA and the copy
    text = """
	code for sm_90
		Function : skip
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   HMMA.16816.F32.BF16 R8, R4, R2, R8 ;
        /*0020*/               @P0 BRA 0x50 ;
        /*0030*/                   HMMA.16816.F32.BF16 R12, R4, R2, R12 ;
        /*0040*/                   FADD R1, R1, R1 ;
        /*0050*/               @P2 BRA 0x70 ;
        /*0060*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR8][R10.64] ;
        /*0070*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0080*/               @P1 BRA 0x10 ;
        /*0090*/                   EXIT ;
"""
    graph = cfg.build_cfg(parse_sass(text)["skip"])
    (loop, ) = cfg.hot_loops(graph)
    assert loop.min_path["instructions"] == 5 and loop.min_path["HMMA"] == 1 and loop.min_path["LDGSTS"] == 0
    assert loop.full_path["instructions"] == 8 and loop.full_path["HMMA"] == 2 and loop.full_path["LDGSTS"] == 1
    assert loop.max_path["instructions"] == 8


def test_masked_path_is_the_longest_trip_without_a_zero_filling_copy():
    # a masked arm (the longer compute) and an interior arm, then a whole-tile copy or a ragged one
    # (zero-fill predicate operands, the longest copy): max_path takes masked + ragged, masked_path
    # masked + whole, full_path interior + whole
    text = """
	code for sm_90
		Function : ragged
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   HMMA.16816.F32.BF16 R8, R4, R2, R8 ;
        /*0020*/               @P0 BRA 0x60 ;
        /*0030*/                   FSEL R1, R1, RZ, P3 ;
        /*0040*/                   FSEL R2, R2, RZ, P3 ;
        /*0050*/                   BRA 0x70 ;
        /*0060*/                   FADD R1, R1, R1 ;
        /*0070*/               @P2 BRA 0xb0 ;
        /*0080*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR8][R10.64] ;
        /*0090*/                   LDGSTS.E.BYPASS.128 [R3+0x800], desc[UR8][R12.64] ;
        /*00a0*/                   BRA 0xf0 ;
        /*00b0*/                   ISETP.GE.AND P4, PT, R5, R6, PT ;
        /*00c0*/                   SEL R10, R10, R7, !P4 ;
        /*00d0*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR8][R10.64], !P4 ;
        /*00e0*/                   LDGSTS.E.BYPASS.128 [R3+0x800], desc[UR8][R12.64], !P5 ;
        /*00f0*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0100*/               @P1 BRA 0x10 ;
        /*0110*/                   EXIT ;
"""
    graph = cfg.build_cfg(parse_sass(text)["ragged"])
    (loop, ) = cfg.hot_loops(graph)
    # head 2 + the copy branch 1 (MOV is outside), masked arm 3 / interior 1, whole copy 3 / ragged 4, tail 2
    assert loop.max_path["instructions"] == 3 + 3 + 4 + 2 and loop.max_path["LDGSTS.ZFILL"] == 2
    assert loop.masked_path["instructions"] == 3 + 3 + 3 + 2 and loop.masked_path["LDGSTS.ZFILL"] == 0
    assert loop.masked_path["LDGSTS"] == 2
    assert loop.full_path["instructions"] == 3 + 1 + 3 + 2 and loop.full_path["LDGSTS.ZFILL"] == 0
    # every trip zero-fills: no masked path
    only_ragged = text.replace("@P2 BRA 0xb0", "BRA 0xb0")
    (loop, ) = cfg.hot_loops(cfg.build_cfg(parse_sass(only_ragged)["ragged"]))
    assert loop.masked_path is None and loop.max_path["LDGSTS.ZFILL"] == 2


def nvdisasm_back_edges(cubin: Path):
    """{(head address, tail address)} of nvdisasm -bbcfg's edges to a block at or before the edge's
    source: loops as NVIDIA's disassembler sees the control flow."""
    dot = run([find_cuda_tool("nvdisasm"), "-bbcfg", "-poff", cubin])  # -poff: print the addresses
    first, last = {}, {}
    for m in re.finditer(r'^"([^"]+)"\n\[label="\{(.*)\}"\]', dot, re.M):
        addrs = [int(a, 16) for a in re.findall(r"(?:^|\\l|>)([0-9a-f]{4}):", m.group(2))]
        if addrs:  # a node of labels only (the function's end) has no instruction
            first[m.group(1)], last[m.group(1)] = min(addrs), max(addrs)
    edges = set()
    for m in re.finditer(r'^"([^"]+)":\S+ -> "([^"]+)":', dot, re.M):
        src, dst = m.groups()
        if src in first and dst in first and first[dst] <= last[src]:
            edges.add((first[dst], last[src]))
    return edges


@needs_nvcc
def test_fixture_is_what_nvcc_makes_and_nvdisasm_sees_the_same_loops(tmp_path):
    cubin = tmp_path / "hot_loop.cubin"
    run(["nvcc", *build.NVCC_DEVICE_FLAGS, "-cubin", FIXTURE / "hot_loop.cu", "-o", cubin])
    fresh = run([find_cuda_tool("cuobjdump"), "-sass", cubin])
    graph = check_tile_loop(fresh)
    ours = set()
    for lp in graph.loops:
        for t in lp.tails:
            ours.add((graph.instrs[graph.blocks[lp.head].start].addr, graph.instrs[graph.blocks[t].end - 1].addr))
    assert ours == nvdisasm_back_edges(cubin)


# cuobjdump -res-usage of one sm_90 module, the first three kernels as nvcc 13.0 prints them for
# dev/emu/tests/emu_ptx_faults.cu (kernels with __shared__ report it plus the 1 KiB reservation, one
# without any reports 0), the fourth a kernel without __shared__ reporting the reservation alone (as
# the backend's attn_bwd_dot_kernel does)
RES_USAGE_WITH_A_ZERO = """
Resource usage:
 Common:
  GLOBAL:0
 Function _ZN14emu_ptx_faults21cp_async_fault_kernelEP5uint4S1_i:
  REG:16 STACK:0 SHARED:1088 LOCAL:0 CONSTANT[0]:916 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _ZN14emu_ptx_faults17atom_fault_kernelEPji:
  REG:8 STACK:0 SHARED:1028 LOCAL:0 CONSTANT[0]:908 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _ZN14emu_ptx_faults22ldmatrix_global_kernelEPjPKt:
  REG:10 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:912 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _ZN14emu_ptx_faults11no_smem_kernelEPj:
  REG:10 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:912 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_static_smem_leaves_out_the_reservation_beside_a_kernel_reporting_zero():
    """cp_async_fault_kernel's __shared__ uint4 s[4] is 64 bytes, atom_fault_kernel's uint32_t 4: a
    kernel that reports SHARED 0 in the same module does not make the others' 1 KiB theirs."""
    from resources import resources_by_function
    got = {n.split("faults")[1]: r.static_smem for n, r in resources_by_function(RES_USAGE_WITH_A_ZERO).items()}
    assert got == {"21cp_async_fault_kernelEP5uint4S1_i": 64, "17atom_fault_kernelEPji": 4,
                   "22ldmatrix_global_kernelEPjPKt": 0, "11no_smem_kernelEPj": 0}


@needs_nvcc
def test_occupancy_agrees_with_cuda_occupancy_h(tmp_path):
    checker = build.occupancy_checker(tmp_path, cuda_home() / "include", "g++")
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    cases = []
    for k in range(400):
        threads = rng.choice([32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, rng.randrange(1, 1025)])
        regs = rng.randrange(8, 256)
        static = rng.choice([0, rng.randrange(0, 48 * 1024)])
        dynamic = rng.choice([0, rng.randrange(0, 200 * 1024)])
        if regs * ((threads + 31) // 32 * 32) > 65536 or static + dynamic > 227 * 1024:
            continue  # launches that fail; the calculator and ours may name them differently
        cases.append((f"c{k}", regs, threads, static, dynamic))
    got = occupancy.parse_cross_check(run([checker], stdin="".join(f"{' '.join(map(str, c))}\n" for c in cases)))
    for key, regs, threads, static, dynamic in cases:
        mine = occupancy.occupancy(regs, threads, static, dynamic).blocks_per_sm
        assert got[key] == mine, f"seed {seed}: regs {regs} threads {threads} smem {static}+{dynamic}"


def real_report(tmp_path_factory):
    env = os.environ.get("SASS_REPORT_JSON")
    if env:
        path = Path(env)
        assert path.is_file(), f"SASS_REPORT_JSON={env} does not exist (make sass-report writes it)"
        return json.loads(path.read_text())
    out = tmp_path_factory.mktemp("sass") / "report.json"
    trainer = Path(os.environ.get("TRAIN_GPT2_LS", REPO / "train_gpt2_ls"))
    cmd = [sys.executable, SCRIPT, "--build-dir", out.parent, "--json", out]
    binaries = [trainer] if trainer.is_file() else []
    proc = subprocess.run([*map(str, cmd + binaries)], capture_output=True, text=True)
    if proc.returncode != 0 and binaries and "holds no sm_90 code" in proc.stderr:
        proc = subprocess.run([*map(str, cmd)], capture_output=True, text=True)  # a host build: compile here
    assert proc.returncode == 0, proc.stderr
    assert "attn_fwd_fa2_kernel<32, true, false, false>" in proc.stdout
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not HAVE_NVCC and not os.environ.get("SASS_REPORT_JSON"):
        pytest.skip("needs nvcc (the CUDA toolkit) to build the sm_90 binaries")
    return real_report(tmp_path_factory)


def test_report_lists_every_attention_kernel_with_its_hot_loop(report):
    assert report["schema_version"] == 1 and report["static"] is True and report["arch"] == "sm_90"
    by_name = {k["name"]: k for k in report["kernels"]}
    wanted = [n for n in BF16_ATTENTION_KERNELS if "_fa2_" in n]
    for name in wanted:
        assert name in by_name, f"{name} missing from the report"
        k = by_name[name]
        assert k["group"].startswith("attention") and k["registers"] > 0
        assert k["hot_loops"], f"{name}: no loop with HMMA found"
        for loop in k["hot_loops"]:
            assert loop["full_path"]["HMMA"] > 0
            assert loop["min_path"]["instructions"] <= loop["max_path"]["instructions"] <= loop["body"]["instructions"]
        (launch, ) = k["launches"]
        assert launch["threads"] == 128 and launch["dynamic_smem"] > 0
        assert launch["occupancy_cuda_occupancy_h"] == launch["occupancy"]["blocks_per_sm"]
    # the FA2-class backward at hd 32 / 64 skips the 16-wide pairs a warp cannot see on a masked tile:
    # its shortest trip (a warp that sees none) has no HMMA; at hd 128 every pair is computed
    for p in ("kv", "q"):
        for c in ("false", "true"):
            for hd in (32, 64, 128):
                (loop, ) = by_name[f"attn_bwd_{p}_fa2_kernel<{hd}, {c}>"]["hot_loops"]
                assert (loop["min_path"]["HMMA"] == 0) == (hd != 128), (p, hd, c)


# The attention kernels the bf16 trainer can reach (llmc/cuda/attention_ls.cuh): the FA2-class
# forward (HD; STATS, NEAR: statistics off, basic, basic + near/far; SOFTCAP), the FA2-class backward's
# dK/dV and dQ kernels (HD, SOFTCAP), the statistics' reduce (basic, near/far fields) and the
# backward's D kernel.
BF16_ATTENTION_KERNELS = sorted(
    [f"attn_fwd_fa2_kernel<{hd}, {sn}, {c}>" for hd in (32, 64, 128)
     for sn in ("false, false", "true, false", "true, true") for c in ("false", "true")]
    + [f"attn_bwd_{p}_fa2_kernel<{hd}, {c}>" for p in ("kv", "q") for hd in (32, 64, 128) for c in ("false", "true")]
    + ["attn_stats_reduce_kernel<3>", "attn_stats_reduce_kernel<6>", "attn_bwd_dot_kernel"])


def test_backend_holds_only_the_reachable_attention_kernels(report):
    """The bf16 backend object (the report's binary: the code the trainer and the generator link)
    holds exactly the attention kernels its launchers can reach: one kernel family per precision,
    no lab-only design (the candidates live in dev/cuda/attention_candidates/, the lab's only)."""
    names = sorted(k["name"] for k in report["kernels"] if k["group"].startswith("attention ")
                   and k["group"] != "attention decode")
    assert len(BF16_ATTENTION_KERNELS) == 33
    assert names == BF16_ATTENTION_KERNELS, (sorted(set(names) - set(BF16_ATTENTION_KERNELS)),
                                             sorted(set(BF16_ATTENTION_KERNELS) - set(names)))


def test_fa2_forward_meets_the_static_targets_of_issue_26(report):
    """Issue 26's forward targets, read from the binaries (static, not a timing): every FA2-class
    forward without the near/far statistics (those run only with --near) takes at most 1.5x its
    interior trip's instructions on its longest masked trip, and the trainer's forwards (statistics
    on, no soft-cap) at most ~11 instructions per HMMA at hd 32 and ~7 at hd 64 on an interior tile;
    LDSM and LDGSTS in every FA2-class kernel, no STS in the forward's loop, one MUFU.EX2 per score.
    A change that fails this gave back what docs/cuda_kernels.md records."""
    by_name = {k["name"]: k for k in report["kernels"]}
    for hd in (32, 64, 128):
        for stats in ("false", "true"):
            for cap in ("false", "true"):
                name = f"attn_fwd_fa2_kernel<{hd}, {stats}, false, {cap}>"
                (loop, ) = by_name[name]["hot_loops"]
                assert loop["masked_path"] is not None, f"{name}: no masked trip found in its hot loop"
                ratio = loop["masked_path"]["instructions"] / loop["full_path"]["instructions"]
                assert ratio <= 1.5, f"{name}: masked trip {ratio:.3f}x the interior one (target 1.5)"
    for hd, target in ((32, 11.0), (64, 7.0)):
        (loop, ) = by_name[f"attn_fwd_fa2_kernel<{hd}, true, false, false>"]["hot_loops"]
        assert loop["instructions_per_hmma"]["full_path"] <= target, (hd, loop["instructions_per_hmma"])
    # ldmatrix and cp.async in every FA2-class kernel's interior trip; the forward stores nothing to
    # shared memory in its loop (no transposed copies) and takes one MUFU.EX2 per score (a warp's 16 x
    # 64 scores over 32 lanes) plus one per row for the rescale
    for k in report["kernels"]:
        if "_fa2_kernel<" not in k["name"]:
            continue
        (loop, ) = k["hot_loops"]
        assert loop["full_path"]["LDSM"] > 0 and loop["full_path"]["LDGSTS"] > 0, k["name"]
        if k["name"].startswith("attn_fwd_fa2_kernel<"):
            assert loop["body"]["STS"] == 0, k["name"]
            assert loop["full_path"]["MUFU.EX2"] == 16 * 64 // 32 + 2, k["name"]


def test_report_covers_the_other_ops(report):
    groups = {k["group"] for k in report["kernels"]}
    for g in ("layernorm", "adamw", "classifier", "encoder", "gelu", "global norm", "qk-norm"):
        assert g in groups, f"no {g} kernel in the report"
    assert all(k["registers"] and k["instructions"] > 0 for k in report["kernels"])


# the kernels that reduce in one launch (llmc/cuda/grid_arrival.cuh): they need GPU-scope fences
ARRIVE_LAST_KERNELS = {"bias_sum_kernel", "global_norm_kernel", "attention_decode_one_launch_kernel"}
# ... and every variant of the FA2-class kernels (the merge of a split tile loop's partials)
ARRIVE_LAST_PREFIXES = ("attn_fwd_fa2_kernel<", "attn_bwd_kv_fa2_kernel<", "attn_bwd_q_fa2_kernel<")


def is_arrive_last(name):
    return name in ARRIVE_LAST_KERNELS or name.startswith(ARRIVE_LAST_PREFIXES)
# one-block kernels whose global atomics only other threads of the block read, after a
# __syncthreads (which orders them): none today
ONE_BLOCK_ATOMIC_KERNELS = set()


def test_one_launch_reductions_fence_their_arrival(report):
    """Release fences before the arrival count, an acquire fence after it (static: the emulation
    cannot show a missing fence), and no other kernel with a global atomic than the one-block ones."""
    with_atomics = set()
    for k in report["kernels"]:
        o = k["grid_ordering"]
        if o["atomics"]:
            with_atomics.add(k["name"])
    names = {k["name"] for k in report["kernels"]}
    want = {n for n in names if is_arrive_last(n)} | ONE_BLOCK_ATOMIC_KERNELS
    assert ARRIVE_LAST_KERNELS <= want and any(n.startswith(ARRIVE_LAST_PREFIXES) for n in want)
    assert with_atomics == want, f"kernels with global atomics: {sorted(with_atomics)}"
    for k in report["kernels"]:
        if is_arrive_last(k["name"]):
            o = k["grid_ordering"]
            assert o["gpu_fences_before_first_atomic"] >= 1 and o["gpu_fences_after_last_atomic"] >= 1, (k["name"], o)


def grid_ordering_of_fixture(tmp_path, header_text=None):
    """grid_ordering of test/fixtures/sass/arrive_last.cu compiled for sm_90, against the production
    grid_arrival.cuh or (header_text) a copy of it that shadows it on the include path."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    includes = []
    if header_text is not None:
        shadow = tmp_path / "shadow" / "llmc" / "cuda"
        shadow.mkdir(parents=True)
        (shadow / "grid_arrival.cuh").write_text(header_text)
        includes.append(f"-I{tmp_path / 'shadow'}")
    cubin = tmp_path / "arrive_last.cubin"
    run(["nvcc", *build.NVCC_DEVICE_FLAGS, *includes, f"-I{REPO}", "-cubin", FIXTURE / "arrive_last.cu", "-o", cubin])
    (fn, ) = parse_sass(run([find_cuda_tool("cuobjdump"), "-sass", cubin])).values()
    from report import grid_ordering  # dev/cuda/sassreport/report.py
    return grid_ordering(fn)


@needs_nvcc
def test_the_fence_count_fails_without_the_fences(tmp_path):
    header = (REPO / "llmc/cuda/grid_arrival.cuh").read_text()
    good = grid_ordering_of_fixture(tmp_path / "good")
    assert good["atomics"] == 1 and good["gpu_fences_before_first_atomic"] >= 1
    assert good["gpu_fences_after_last_atomic"] >= 1
    # every fence removed: neither release nor acquire
    assert header.count("fence_acq_rel_gpu();") == 3
    none = grid_ordering_of_fixture(tmp_path / "none", header.replace("fence_acq_rel_gpu();", ""))
    assert none["atomics"] == 1 and none["gpu_fences"] == 0
    # the acquire alone removed
    (acquire, ) = [ln for ln in header.splitlines(keepends=True) if "fence_acq_rel_gpu();" in ln and "(acquire)" in ln]
    no_acquire = grid_ordering_of_fixture(tmp_path / "noacq", header.replace(acquire, ""))
    assert no_acquire["gpu_fences_before_first_atomic"] >= 1 and no_acquire["gpu_fences_after_last_atomic"] == 0


def test_every_kernel_waits_for_its_predecessor_before_global_memory(report):
    """--pdl 1 launches every kernel of the backend with programmatic stream serialization: each must
    execute griddepcontrol.wait (ACQBULK) before any global-memory instruction, and let its dependents
    be scheduled (PREEXIT). Static, in address order: griddep_begin is each kernel's first statement,
    so its wait precedes every branch."""
    assert report["kernels"]
    for k in report["kernels"]:
        g = k["grid_dependency"]
        assert g["waits"] >= 1 and g["global_memory_before_first_wait"] == 0 and g["launch_dependents"] >= 1, \
            (k["name"], g)


@needs_nvcc
def test_the_wait_count_fails_on_a_read_before_the_wait(tmp_path):
    cubin = tmp_path / "griddep_first.cubin"
    run(["nvcc", *build.NVCC_DEVICE_FLAGS, f"-I{REPO}", "-cubin", FIXTURE / "griddep_first.cu", "-o", cubin])
    fns = parse_sass(run([find_cuda_tool("cuobjdump"), "-sass", cubin]))
    from report import grid_dependency  # dev/cuda/sassreport/report.py
    (first, ) = [grid_dependency(f) for name, f in fns.items() if "waits_first" in name]
    (early, ) = [grid_dependency(f) for name, f in fns.items() if "reads_early" in name]
    assert first["waits"] == 1 and first["global_memory_before_first_wait"] == 0 and first["launch_dependents"] == 1
    assert early["waits"] == 1 and early["global_memory_before_first_wait"] >= 1, early


@needs_nvcc
def test_a_binary_without_sm90_code_is_an_error(tmp_path):
    host_only = tmp_path / "host_only"
    subprocess.run(["g++", "-x", "c++", "-", "-o", host_only], input="int main() { return 0; }\n", text=True,
                   check=True)
    proc = subprocess.run([sys.executable, SCRIPT, "--build-dir", tmp_path, host_only], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1


def test_a_missing_cuobjdump_is_an_error(tmp_path):
    # no toolkit (CUDA_HOME elsewhere, no nvcc on PATH) and no site-packages (-S: the wheel is not found)
    env = {"PATH": str(tmp_path), "CUDA_HOME": str(tmp_path / "no-cuda")}
    proc = subprocess.run([sys.executable, "-S", SCRIPT, "x"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: cuobjdump not found") and "make deps" in proc.stderr
