"""The device emulation can fail (docs/emulation.md). Two kinds of evidence:

1. Device rules (build/emu/self/emu_faults, dev/emu/tests/emu_faults.cu): small kernels that each break one
   rule of the device (a missing barrier, a divergent barrier, a warp collective some lanes never
   reach, launch limits, shared memory without opt-in or with static + dynamic bytes above the limit,
   a misaligned 16-byte access, out-of-bounds global / static shared / dynamic shared stores, a copy
   with the wrong kind) must each be refused
   with the right message, and the correct kernels must pass.
   The same for the emulated ldmatrix and cp.async (build/emu/self/emu_ptx_faults,
   dev/emu/tests/emu_ptx_faults.cu): misaligned, non-shared or mixed-qualifier ldmatrix rows, a
   partial warp; cp.async with a misaligned or non-shared destination, a non-global source,
   src-size 17, copies never waited for (committed or not), a source or destination touched while
   the copy is pending, overlapping pending copies; a grid launched with programmatic stream
   serialization whose threads (all, or one) end without griddepcontrol.wait; and three correct
   kernels (the poisoned state of pending copies after each wait, .x1 ignoring the addresses of
   lanes 8-31, the wait in a programmatic grid and a plain grid without it).
2. Mutations of the production kernels: the test copies the sources, applies one deliberate bug (an
   off-by-one in the local window, two swapped A-fragment registers, a removed __syncthreads, an
   out-of-bounds store, a kernel launched with more than 48 KB of shared memory without the opt-in,
   the attention launcher raising the limit only above 48 KB (hd 64's dQ kernel: 16 static + 49152
   dynamic bytes, refused on an H200),
   the FA2-class forward's V operand and the FA2-class backward's dO / Q / K operands loaded without
   .trans; a wrong C/D row in the emulation's own mma table, a wrong .trans lane map and a swapped
   matrix order of .x4 in its ldmatrix, a missing cp.async.wait_group in the cp.async test kernel,
   the emulated ex2 without its flush of subnormal results, the emulated tanh.approx with twice
   the ISA's error, the emulated redux.sync.or without lane 31, the emulated griddepcontrol.wait
   without its record and griddep_begin without its wait), builds the emulated lab or test from the mutated copy and expects its
   check to fail in the stated way. The mutated sources compile with ASan's runtime but without its
   access checks, except the out-of-bounds store, whose expected failure is ASan's report (ASan
   without its stack checks), and without UBSan: no mutant's failure is a stack access or UBSan's. Nothing broken is committed.

Needs the emulated build (`make emu`, part of `make test`); a missing binary is a failure.
"""
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from run_helpers import need_emulated_build

REPO = Path(__file__).resolve().parents[1]
EMU = REPO / "build" / "emu"
FAULTS = EMU / "self" / "emu_faults"
TWO_SCHEDULES = dict(os.environ, LLMC_EMU_SCHEDULES="greedy-forward,greedy-reverse", ASAN_OPTIONS="detect_leaks=0")


def run(cmd, env=TWO_SCHEDULES, timeout=600, cwd=REPO):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


# mode -> (exit status must be 0?, text that must appear in stdout+stderr)
FAULT_CASES = {
    "ok": (True, "block sum: OK"),
    "shuffle-semantics": (True, "shuffle semantics: OK"),
    "smem-optin": (True, "after opt-in: OK"),
    "too-many-threads": (True, "invalid configuration argument, kernel did not run"),
    "block-z": (True, "invalid configuration argument, kernel did not run"),
    "grid-y": (True, "invalid configuration argument, kernel did not run"),
    "smem-no-optin": (True, "invalid argument, kernel did not run"),
    "smem-optin-too-big": (True, "opt-in to 228 KB: invalid argument"),
    "bad-copy": (True, "swapped kind: invalid argument; past the end: invalid argument"),
    # static and dynamic shared memory count together (the CUDA Runtime API, cudaFuncSetAttribute;
    # the kernel's 16 static bytes from dev/emu/static_smem_table.inc, nvcc's)
    "smem-static-plus-dynamic": (True, "16 static + 49152 dynamic bytes: invalid argument, kernel did not run"),
    "smem-static-plus-dynamic-fits": (True, "16 static + 49136 dynamic bytes: no error, kernel ran, result OK"),
    "smem-static-optin": (True, "16 static + 49152 dynamic bytes after the opt-in: no error, kernel ran, result OK"),
    "smem-static-optin-too-big": (True, "opt-in to 232448 bytes beside 16 static: invalid argument"),
    "smem-static-optin-max": (True, "16 static + 232432 dynamic bytes after the opt-in: no error, kernel ran, result OK"),
    "missing-barrier": (False, "race: kernel emu_faults::missing_barrier_kernel"),
    # the schedules order the blocks too (greedy-forward first to last, greedy-reverse last to first)
    "block-order": (False, "race: kernel emu_faults::last_writer_kernel"),
    "divergent-barrier": (False, "barrier divergence in kernel emu_faults::divergent_barrier_kernel"),
    "warp-deadlock": (False, "deadlock in kernel emu_faults::warp_deadlock_kernel"),
    "mask-mismatch": (False, "every lane of a *_sync call must name the same mask"),
    "misaligned-int4": (False, "misaligned address"),
    "oob-global": (False, "heap-buffer-overflow"),
    "oob-static-shared": (False, "index 32 out of bounds for type 'float [32]'"),  # UBSan's bounds check
    "oob-dynamic-shared": (False, "heap-buffer-overflow"),
}


@pytest.mark.parametrize("mode", list(FAULT_CASES))
def test_device_rules(mode):
    must_pass, text = FAULT_CASES[mode]
    p = run([need_emulated_build(FAULTS), mode], timeout=120)
    out = p.stdout + p.stderr
    if must_pass:
        assert p.returncode == 0, f"{mode}: rc {p.returncode}\n{out[-3000:]}"
    else:
        assert p.returncode != 0, f"{mode}: the emulation did not notice the broken kernel\n{out[-3000:]}"
        assert "ran to the end unnoticed" not in out
    assert text in out, f"{mode}: expected '{text}' in the output\n{out[-3000:]}"


# The emulated ldmatrix and cp.async: mode -> (exit status must be 0?, text that must appear)
PTX_FAULTS = EMU / "self" / "emu_ptx_faults"
PTX_FAULT_CASES = {
    "cp-async-group-states": (True, "cp.async group states: OK"),
    "ldmatrix-x1-unused-lanes": (True, "ldmatrix .x1 with unused lane addresses: OK"),
    "ldmatrix-misaligned": (False, "[warp 0 lane 3] supplies the row address"),
    "ldmatrix-global": (False, "which is not 16 bytes of shared memory (ldmatrix reads .shared)"),
    "ldmatrix-mixed-qualifiers": (False, "executes ldmatrix .x2 (every lane must use the same qualifiers)"),
    "ldmatrix-partial-warp": (False, "names lanes beyond the 16 threads of warp 0"),
    "atom-shared": (False, "passed an address that is not 4 aligned bytes of global memory"),
    "atom-misaligned": (False, "passed an address that is not 4 aligned bytes of global memory"),
    "cp-async-misaligned-dst": (False, "both addresses must be aligned to cp-size, 16 bytes"),
    "cp-async-global-dst": (False, "which is not 16 bytes of shared memory"),
    "cp-async-shared-src": (False, "which are not in one global-memory allocation"),
    "cp-async-src-size-17": (False, "gives src-size 17, above cp-size 16"),
    "cp-async-pending-at-exit": (False, "ended while 1 of its cp.async copies were not complete"),
    "cp-async-uncommitted-at-exit": (False, "ended while 1 of its cp.async copies were not complete"),
    "cp-async-source-written": (False, "whose source changed after the cp.async"),
    "cp-async-destination-written": (False, "whose destination was written while the copy was pending"),
    "cp-async-overlap": (False, "which overlaps its pending copy"),
    "griddep-programmatic-with-wait": (True, "griddep with the wait, and a plain launch without it: OK"),
    "griddep-programmatic-without-wait": (
        False, "[warp 0 lane 0] ended without griddepcontrol.wait in a grid launched with programmatic"),
    "griddep-one-thread-skips-wait": (
        False, "thread (37,0,0) [warp 1 lane 5] ended without griddepcontrol.wait in a grid launched with programmatic"),
}


@pytest.mark.parametrize("mode", list(PTX_FAULT_CASES))
def test_ptx_rules(mode):
    must_pass, text = PTX_FAULT_CASES[mode]
    p = run([need_emulated_build(PTX_FAULTS), mode], timeout=120)
    out = p.stdout + p.stderr
    if must_pass:
        assert p.returncode == 0, f"{mode}: rc {p.returncode}\n{out[-3000:]}"
    else:
        assert p.returncode != 0, f"{mode}: the emulation did not notice the broken kernel\n{out[-3000:]}"
        assert "ran to the end unnoticed" not in out
        assert "emulated device error: " in out, f"{mode}: not refused by the emulation\n{out[-3000:]}"
    assert text in out, f"{mode}: expected '{text}' in the output\n{out[-3000:]}"


def test_a_race_needs_two_schedules_to_show():
    """With one schedule the missing barrier is not a fault the emulation can see (documented)."""
    p = run([need_emulated_build(FAULTS), "missing-barrier"], env=dict(TWO_SCHEDULES, LLMC_EMU_SCHEDULES="forward"))
    assert p.returncode == 0 and "ran to the end unnoticed" in p.stdout


# --- mutations of the production kernels -------------------------------------------------------
# name -> (file, original text (must occur exactly once), mutated text, target, arguments, expected text)
LAB = "build/emu/dev/attention_ls"
ONE_SHAPE = ["--check-one", "-B", 1, "-T", 200, "--nh", 2, "--hd", 128, "-G", 1, "-P", 50]


def one_kernel(k):
    """ONE_SHAPE for the lab's kernel k alone (the one the mutation is expected to fail; every
    kernel at once is ~3x the time)."""
    return ONE_SHAPE + ["--kernel", k]


MUTANTS = {
    # a local head's first visible key one too early (the FA2-class forward's masked tiles and tile
    # ranges read attn_key_lo; the CPU reference does not)
    "window-off-by-one": (
        "llmc/core/attention_tiles.h",
        "return local ? attn_imax(0, i - P + 1) : 0;",
        "return local ? attn_imax(0, i - P) : 0;",
        LAB, one_kernel("production"), "FAIL production"),
    # P's A fragment (mma_acc_to_a) with its registers 1 and 2 swapped
    "swapped-fragment-register": (
        "llmc/cuda/mma_fragments.cuh",
        "    a[1] = pack_bf16x2(lo[2], lo[3]);  // row g+8, cols 2c, 2c+1\n"
        "    a[2] = pack_bf16x2(hi[0], hi[1]);  // row g,   cols 8+2c, 8+2c+1",
        "    a[1] = pack_bf16x2(hi[0], hi[1]);\n    a[2] = pack_bf16x2(lo[2], lo[3]);",
        LAB, one_kernel("production"), "FAIL production"),
    "missing-syncthreads": (
        "llmc/cuda/attention_ls_fa2.cuh",
        "            __syncthreads();           // everyone's copies landed; every warp is done with tile kt-1\n",
        "",
        LAB, one_kernel("production"), "race: kernel void llmc::cuda::attn_fwd_fa2_kernel<128, true, false, false>"),
    # the barrier between a run's K / V fragment loads and the refill of sK, sV for its next key tile
    # (the FA2-class dK/dV kernel; P = 1: a key tile's first step is its last, so the refill follows
    # the fragment loads with no other barrier between)
    "missing-run-barrier": (
        "llmc/cuda/attention_ls_fa2_bwd.cuh",
        "        if (kt + 1 < kt_end) __syncthreads();\n",
        "",
        LAB, ["--check-one", "-B", 1, "-T", 200, "--nh", 2, "--hd", 32, "-G", 0, "-P", 1, "--run", 2, "--kernel",
              "production"],
        "race: kernel void llmc::cuda::attn_bwd_kv_fa2_kernel<32, false>"),
    "out-of-bounds-store": (
        "llmc/cuda/attention_ls_fa2.cuh",
        "        if (i < T) {\n            const float inv = 1.0f / l;",
        "        if (i < T + 16) {\n            const float inv = 1.0f / l;",
        LAB, one_kernel("production"), "heap-buffer-overflow"),
    "shared-memory-without-opt-in": (
        "llmc/cuda/attention_ls.cuh",
        "if (bytes > 0) CUDA_CHECK(cudaFuncSetAttribute(",
        "if (false) CUDA_CHECK(cudaFuncSetAttribute(",
        # the FA2-class forward's 80+ KiB at hd 128, beside its 64 static bytes (statistics on)
        LAB, one_kernel("production"), "dynamic shared memory, above 49088"),
    # the attribute raised only above 48 KiB (the launcher before bd9197f): the hd-64 dQ kernel's
    # 49152 dynamic bytes beside its 16 static ones (the grid-arrival ticket) were refused on an H200
    "shared-memory-opt-in-only-above-48k": (
        "llmc/cuda/attention_ls.cuh",
        "if (bytes > 0) CUDA_CHECK(cudaFuncSetAttribute(",
        "if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(",
        LAB, ["--check-one", "-B", 1, "-T", 64, "--nh", 2, "--hd", 64, "-G", 1, "-P", 16, "--kernel", "production"],
        "49152 bytes of dynamic shared memory, above 49136"),
    # a kernel the static shared-memory table lacks (a new kernel before the table is regenerated):
    # its launch limits cannot be checked, so the run ends
    "kernel-missing-from-static-smem-table": (
        "dev/emu/static_smem_table.inc",
        '{"_ZN10emu_faults16block_sum_kernelEPfPKfi", 1024},  // emu_faults::block_sum_kernel(float*, float const*, int)\n',
        "",
        "build/emu/self/emu_faults", ["ok"],
        "emulated device error: kernel emu_faults::block_sum_kernel(float*, float const*, int) "
        "(symbol _ZN10emu_faults16block_sum_kernelEPfPKfi) has no static shared-memory size"),
    "emulated-mma-wrong-row": (
        "dev/emu/mma.h",
        "c_row[lane][i] = group + (i >= 2 ? 8 : 0);",
        "c_row[lane][i] = group + (i >= 1 ? 8 : 0);",
        "build/emu/test_gpu/test_mma_fragments", [], "test_mma_fragments: FAIL"),
    # .trans: the two halves of a register from rows t%4 and t%4 + 4 instead of 2*(t%4) and 2*(t%4) + 1
    "emulated-ldmatrix-trans-lane-map": (
        "dev/emu/ldmatrix.h",
        "const int src_row = trans ? frag_col + i : frag_row;",
        "const int src_row = trans ? lane % 4 + 4 * i : frag_row;",
        "build/emu/test_gpu/test_ldmatrix_cp_async", [], "FAIL ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"),
    # .x4: matrices 2 and 3 exchanged (the rows of lanes 16-23 delivered as matrix 3 and 24-31 as matrix 2)
    "emulated-ldmatrix-x4-matrix-order": (
        "dev/emu/ldmatrix.h",
        "inline int ldmatrix_row_supplier(int m, int row) { return 8 * m + row; }",
        "inline int ldmatrix_row_supplier(int m, int row) { return 8 * (m < 2 ? m : 5 - m) + row; }",
        "build/emu/test_gpu/test_ldmatrix_cp_async", [], "FAIL ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
    # the FA2-class forward's V operand loaded without .trans (the B fragments of P V transposed)
    "fa2-v-operand-without-trans": (
        "llmc/cuda/attention_ls_fa2.cuh",
        "ldmatrix_x4_trans(vb, v_bytes",
        "ldmatrix_x4(vb, v_bytes",
        LAB, one_kernel("production"), "FAIL production"),
    # the FA2-class backward's k-major operands (dO of dV, Q of dK, K of dQ) loaded without .trans
    "fa2-bwd-operand-without-trans": (
        "llmc/cuda/attention_ls_fa2_bwd.cuh",
        "ldmatrix_x4_trans(yb, y",
        "ldmatrix_x4(yb, y",
        LAB, one_kernel("production"), "FAIL production"),
    # the emulated ex2.approx.ftz without its .ftz of subnormal results
    "emulated-ex2-without-ftz": (
        "dev/emu/ex2.h",
        "    if (std::fpclassify(d) == FP_SUBNORMAL) return 0.0f;  // .ftz result\n",
        "",
        "build/emu/test_gpu/test_ex2_approx", [], "test_ex2_approx: FAIL"),
    # the emulated tanh.approx with twice the ISA's relative error (the test's accuracy bound is live)
    "emulated-tanh-error-past-bound": (
        "dev/emu/tanh.h",
        "(kTanhApproxMaxRelError - 0x1p-20)",
        "(2 * kTanhApproxMaxRelError)",
        "build/emu/test_gpu/test_tanh_approx", [], "test_tanh_approx: FAIL"),
    # the emulated atom.global.add returning the new value instead of the old one
    "emulated-atom-returns-new-value": (
        "dev/emu/atomic.h",
        "return __atomic_fetch_add(a, b, __ATOMIC_SEQ_CST);",
        "return __atomic_add_fetch(a, b, __ATOMIC_SEQ_CST);",
        "build/emu/test_gpu/test_grid_arrival", [], "FAIL atom.global.add.u32"),
    # the emulated redux.sync.or.b32 without the last lane of the warp in its OR
    "emulated-redux-or-drops-lane-31": (
        "dev/emu/redux.h",
        "for (int lane = 0; lane < kWarpSize; lane++) {",
        "for (int lane = 0; lane < kWarpSize - 1; lane++) {",
        "build/emu/test_gpu/test_redux", [], "FAIL redux.sync.or.b32"),
    # the emulated griddepcontrol.wait without its record: a programmatic grid whose threads all wait
    # is then refused (the with-wait case's pass shows the record is live)
    "emulated-griddep-wait-not-recorded": (
        "dev/emu/griddep.h",
        "inline void griddepcontrol_wait() { cur_thread().waited_for_prerequisites = true; }",
        "inline void griddepcontrol_wait() { (void)cur_thread(); }",
        "build/emu/self/emu_ptx_faults", ["griddep-programmatic-with-wait"], "ended without griddepcontrol.wait"),
    # the production wrapper every kernel begins with, without its wait: a programmatic grid of such
    # kernels is refused (emu_ptx_faults' kernel begins with llmc::cuda::griddep_begin, as the backend's do)
    "griddep-begin-without-wait": (
        "llmc/cuda/ptx.cuh",
        "__device__ __forceinline__ void griddep_begin() {\n    griddep_wait();\n",
        "__device__ __forceinline__ void griddep_begin() {\n",
        "build/emu/self/emu_ptx_faults", ["griddep-programmatic-with-wait"], "ended without griddepcontrol.wait"),
    # the bias gradient's last block adds its quarters' sums starting from one its index picks: the bits then
    # depend on which block arrives last, which differs between the two schedules' block orders
    "bias-sum-in-arrival-order": (
        "llmc/cuda/matmul.cuh",
        "for (int j = 0; j < kQuarters; j++) total += quarter[j][col];",
        "for (int j = 0; j < kQuarters; j++) total += quarter[(j + blockIdx.y) % kQuarters][col];",
        "build/emu/dev/matmul", ["--check"], "race: kernel llmc::cuda::detail::bias_sum_kernel"),
    # the one-launch decode attention's merge by every counted block instead of the last to arrive: the
    # merged rows then depend on the block order, which the two schedules vary (with one schedule the
    # test's sentinel check finds the rows written: counters set to K, no ticket is a head's last)
    "decode-merge-without-arrival": (
        "llmc/cuda/attention_decode.cuh",
        "    if (!arrive_last(cache.arrivals + (size_t)b * cache.NH + h, (uint32_t)splits)) return;\n",
        "",
        "build/emu/test_gpu/test_attention_decode", ["--edges"],
        "race: kernel llmc::cuda::attention_decode_one_launch_kernel"),
    # a launch on a capturing stream run at once instead of recorded for the graph (the captured
    # work then happens before the graph runs, and again at each launch)
    "emulated-capture-runs-launch-now": (
        "dev/emu/grid.cpp",
        "        c->work.push_back([=] { run_grid_now(fn, grid, block, smem, body, footprint, programmatic); });\n"
        "        return;\n",
        "        (void)c;\n",
        "build/emu/test_gpu/test_cuda_graph", [], "FAIL captured work is not executed"),
    # the oldest group read back without its wait: the readers get the poison of the copies not yet
    # completed, and which those are depends on the schedule (test_missing_wait_reads_the_poison:
    # with one schedule the poison itself shows)
    "missing-cp-async-wait-group": (
        "test/gpu/test_ldmatrix_cp_async.cu",
        "    llmc::cuda::cp_async_wait_group<1>();  // group 0 complete (group 1 may still be pending)\n",
        "",
        "build/emu/test_gpu/test_ldmatrix_cp_async", [],
        "race: kernel ldmatrix_cp_async::cp_async_groups_kernel"),
}


def reuse_emulator_objects(d):
    """The unmutated build's emulator objects (build/emu/*.o, libemu.a; the CPU kernels' object,
    build/asan/kernel_instances.o, with its dependency file) copied into the mutant's tree with their
    times: make rebuilds them only when the mutation is in one of their inputs (written after them),
    so a kernel mutant compiles its kernels only."""
    emu, asan = REPO / "build" / "emu", REPO / "build" / "asan"
    copies = list(emu.glob("*.o")) + list(emu.glob("*.d")) + [emu / "libemu.a"]
    copies += [asan / "kernel_instances.o", asan / "kernel_instances.d"]
    for obj in copies:
        if obj.is_file():
            target = d / obj.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(obj, target)


# ASan without its stack and use-after-scope instrumentation (--param=asan-stack=0): no mutant's
# expected failure is a stack access (the emulated device's global and dynamic shared memory are heap
# blocks, caught as heap-buffer-overflow), and at -O0, where every local lives on the stack, it was a
# third of the attention lab's compile (16 -> 11 CPU-s)
MUTANT_SAN = "-fsanitize=address --param=asan-stack=0 -fno-omit-frame-pointer"
# The other mutants fail in their check or in the emulation's own rules: ASan without any access
# checks (reads, writes, globals, stack), which keeps its runtime and the fiber annotations the
# emulator's objects (compiled with ASan) pair with theirs (dev/emu/block.h: __SANITIZE_ADDRESS__;
# without -fsanitize=address at all the first fiber switch fails), at the compile time of no
# sanitizer (the attention lab 16.9 -> 10.7 CPU-s here; their checks run faster too).
MUTANT_SAN_NO_CHECKS = ("-fsanitize=address --param=asan-stack=0 --param=asan-instrument-reads=0 "
                        "--param=asan-instrument-writes=0 --param=asan-globals=0 -fno-omit-frame-pointer")
# The mutants whose expected failure is ASan's report, built with MUTANT_SAN. The control is built as
# the others (MUTANT_SAN_NO_CHECKS), so that a build of theirs that went wrong shows in it; the
# unmutated lab runs under full ASan + UBSan in make test-emu.
ASAN_MUTANTS = {"out-of-bounds-store"}


def mutant_san(name):
    """EMU_SAN of a mutant's build (CONTROL: the control's)."""
    return MUTANT_SAN if name in ASAN_MUTANTS else MUTANT_SAN_NO_CHECKS


# The control: the attention lab unmutated, built as the mutants are, run with each argument list of
# the lab's mutants (control_runs)
CONTROL = "unmutated"


def control_runs():
    """The distinct argument lists of the attention lab's mutants, in MUTANTS' order."""
    runs = []
    for _, _, _, target, args, _ in MUTANTS.values():
        if target == LAB and args not in runs:
            runs.append(args)
    return runs


def build_mutant(name, root):
    """Copies the sources to root/name, applies the mutation (none for CONTROL), builds the target with
    the mutants' flags and runs its check; returns (dir, the build, the check's run or None where the
    build failed)."""
    path, old, new, target, args, _ = MUTANTS[name] if name != CONTROL else (None, None, None, LAB, None, None)
    d = root / name
    d.mkdir()
    shutil.copy(REPO / "Makefile", d)
    for sub in ["llmc", "dev/cuda", "dev/emu"]:
        shutil.copytree(REPO / sub, d / sub)
    (d / "test").mkdir()
    shutil.copytree(REPO / "test" / "gpu", d / "test" / "gpu")
    for h in (REPO / "test").glob("*.h"):
        shutil.copy(h, d / "test")
    if path:
        text = (d / path).read_text()
        assert text.count(old) == 1, f"{name}: the code to mutate is not in {path} exactly once; update the mutation"
        (d / path).write_text(text.replace(old, new))
    reuse_emulator_objects(d)
    # ASan with or without its access checks (mutant_san), never UBSan: every mutant's expected failure is the
    # check's, the emulation's or ASan's (MUTANTS), none is UBSan's, and UBSan at -O1 makes the lab's
    # compile ~2.5x slower; -O0: a third of -O1's compile for the attention lab, and the mutants'
    # one-shape checks stay short; -g0: a fifth less (no expected report names a line)
    b = subprocess.run(["make", "-C", str(d), "CI=true", f"EMU_SAN={mutant_san(name)}", "EMU_OPT=-O0",
                        "EMU_DEBUG=-g0", target],
                       capture_output=True, text=True, timeout=1200)
    if b.returncode != 0:
        return d, b, None
    if name == CONTROL:
        return d, b, [run([d / target] + a, timeout=900) for a in control_runs()]
    return d, b, run([d / target] + args, timeout=900)


def test_mutant_build_compiles_without_ubsan():
    """The mutants' compile-and-link command carries ASan alone to the compile (g++ applies a link flag's
    -fsanitize to the compile of the same command: the lab with UBSan took twice as long) and links UBSan's
    runtime by name for the emulator's objects."""
    p = subprocess.run(["make", "-n", "-W", "dev/cuda/attention_ls.cu", "CI=true", f"EMU_SAN={MUTANT_SAN}",
                        "EMU_OPT=-O0", LAB], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    cmd = [ln for ln in p.stdout.replace("\\\n", " ").splitlines() if " -o " + LAB in ln]
    assert len(cmd) == 1, p.stdout
    assert "undefined" not in cmd[0] and "-fsanitize=address" in cmd[0] and "-lubsan" in cmd[0].split(), cmd[0]


def test_only_the_asan_mutants_build_with_asan():
    """ASAN_MUTANTS are exactly the mutants whose expected failure is ASan's report."""
    asan_reported = {n for n, m in MUTANTS.items() if "heap-buffer-overflow" in m[5] or "AddressSanitizer" in m[5]}
    assert asan_reported == ASAN_MUTANTS
    assert mutant_san(CONTROL) == MUTANT_SAN_NO_CHECKS == mutant_san("missing-syncthreads")
    assert mutant_san("out-of-bounds-store") == MUTANT_SAN


def test_emulated_trainer_links_the_backend_first():
    """The emulated trainer's and generator's own objects compile at EMU_MAIN_OPT (-O0), and their link
    lines put cuda_backend.o (EMU_OPT) first: the inline code both objects emit is linked from the first,
    so it stays optimized (Makefile, EMU_MAIN_OPT)."""
    targets = ["build/emu/train_gpt2_ls", "build/emu/generate_gpt2_ls"]
    p = subprocess.run(["make", "-n", "-B", "CI=true"] + targets, cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.replace("\\\n", " ").splitlines()
    for t in targets:
        compile_line = [ln for ln in lines if f" -o {t}.o" in ln]
        link = [ln for ln in lines if ln.rstrip().endswith(f" -o {t}") or f" -o {t} " in ln]
        assert len(compile_line) == 1 and len(link) == 1, p.stdout
        assert "-O0" in compile_line[0].split() and "-O1" not in compile_line[0].split(), compile_line[0]
        words = link[0].split()
        assert words.index("build/emu/cuda_backend.o") < words.index(f"{t}.o"), link[0]
    backend = [ln for ln in lines if " -o build/emu/cuda_backend.o" in ln]
    assert len(backend) == 1 and "-O1" in backend[0].split(), backend
    # the FP32 emulated trainer links the BF16 build's object with its own backend, first
    p = subprocess.run(["make", "-n", "-B", "CI=true", "PRECISION=FP32", "build/emu-fp32/train_gpt2_ls"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    link = [ln for ln in p.stdout.replace("\\\n", " ").splitlines() if " -o build/emu-fp32/train_gpt2_ls" in ln]
    assert len(link) == 1, p.stdout
    words = link[0].split()
    assert words.index("build/emu-fp32/cuda_backend.o") < words.index("build/emu/train_gpt2_ls.o"), link[0]


def test_units_built_once_read_no_precision():
    """The FP32 emulated build compiles only its backend (build/emu-fp32/cuda_backend.o) and takes every
    other object from the BF16 build's build/emu: libemu.a (each dev/emu/*.cpp), the trainer's,
    generator's and launch_collective's units, and the units of the backend-entry tests. Each of those,
    preprocessed with its compile command, gives the same text under -DENABLE_BF16 and -DENABLE_FP32."""
    entry_tests = ["test_cuda_model", "test_cuda_generate", "test_cuda_attention_probs", "test_cuda_param_scale"]
    targets = ["build/emu-fp32/train_gpt2_ls", "build/emu-fp32/generate_gpt2_ls"] + \
        [f"build/emu-fp32/test_gpu/{t}" for t in entry_tests]
    p = subprocess.run(["make", "-n", "-B", "CI=true", "PRECISION=FP32"] + targets, cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.replace("\\\n", " ").splitlines()
    link = [ln for ln in lines if " -o build/emu-fp32/train_gpt2_ls" in ln]
    assert len(link) == 1 and "build/emu/libemu.a" in link[0].split(), link
    compiles = [ln.split() for ln in lines if " -c " in ln and "-DENABLE_FP32" in ln.split()]
    outputs = {w[w.index("-o") + 1]: w[w.index("-c") + 1] for w in compiles}
    assert [o for o in outputs if o.startswith("build/emu-fp32/")] == ["build/emu-fp32/cuda_backend.o"], outputs
    shared = {o: c for o, c in outputs.items() if not o.startswith("build/emu-fp32/")}
    expected = ["build/emu/train_gpt2_ls.o", "build/emu/generate_gpt2_ls.o", "build/emu/launch_collective.o"] + \
        [f"build/emu/{f.stem}.o" for f in (REPO / "dev" / "emu").glob("*.cpp")] + \
        [f"build/emu/obj/test_gpu/{t}.o" for t in entry_tests]
    assert sorted(shared) == sorted(expected), shared
    for words in compiles:
        if words[words.index("-o") + 1] not in shared:
            continue
        cmd = [w for w in words[:words.index("-o")] if w not in ("-MMD", "-MP")] + ["-E", "-P"]
        fp32 = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
        bf16 = subprocess.run([w.replace("-DENABLE_FP32", "-DENABLE_BF16") for w in cmd], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert bf16.returncode == 0 and fp32.returncode == 0, bf16.stderr + fp32.stderr
        assert bf16.stdout == fp32.stdout, f"{words[words.index('-c') + 1]} reads the precision; build it per precision"


@pytest.fixture(scope="module")
def mutants(tmp_path_factory):
    """Every mutant built and its check run, two at a time (the emulated builds are single-threaded
    compiles; a check runs beside the next builds); the attention lab's first, the longest."""
    need_emulated_build(REPO / LAB)  # the unmutated build must exist (and pass: make test-emu)
    root = tmp_path_factory.mktemp("mutants")
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as ex:
        names = sorted(MUTANTS, key=lambda n: MUTANTS[n][3] != LAB) + [CONTROL]
        futures = {n: ex.submit(build_mutant, n, root) for n in names}
        return {n: f.result() for n, f in futures.items()}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_mutated_kernel_fails_its_check(mutants, name):
    _, build, p = mutants[name]
    assert build.returncode == 0, f"{name}: the mutant did not build\n{build.stderr[-3000:]}"
    text = MUTANTS[name][5]
    out = p.stdout + p.stderr
    assert p.returncode != 0, f"{name}: the mutated kernel passed its emulated check\n{out[-3000:]}"
    assert text in out, f"{name}: expected '{text}' in the output\n{out[-3000:]}"


def test_unmutated_shape_passes(mutants):
    """Each command the attention lab's mutants fail passes without a mutation, built as they are (so
    the failures are the mutations', not the build's)."""
    _, build, runs = mutants[CONTROL]
    assert build.returncode == 0, build.stderr[-3000:]
    assert len(runs) == len(control_runs()) >= 3  # ONE_SHAPE, the backward's runs, the 48 KB opt-in shape
    for args, p in zip(control_runs(), runs):
        assert p.returncode == 0, (args, (p.stdout + p.stderr)[-3000:])
        assert p.stdout.rstrip().endswith("OK"), (args, p.stdout[-3000:])


def test_missing_wait_reads_the_poison(mutants):
    """The missing cp.async.wait_group under one schedule: no race to compare, the values are wrong,
    and the wrong bytes it shows are the emulation's 0xFF poison of copies not yet completed."""
    d, build, _ = mutants["missing-cp-async-wait-group"]
    assert build.returncode == 0, build.stderr[-3000:]
    p = run([d / MUTANTS["missing-cp-async-wait-group"][3]], env=dict(TWO_SCHEDULES, LLMC_EMU_SCHEDULES="forward"))
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "FAIL cp.async groups" in out and "= 0xff, expected" in out, out[-3000:]
    assert "ok   cp.async.cg 16, src-size" in out  # the kernels the mutation did not touch still pass
