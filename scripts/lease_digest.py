#!/usr/bin/env python3
"""
The measured side of a GPU lease, as markdown for its docs/results/<date>-<device>-<commit>/README.md:
what passed and failed, whether the report's commit names the tree that ran and the prediction is of the
same build sources (by scripts/build_digest.sh of the commits' trees, made here with git), each profiled
case's step beside the committed prediction (per group, flagged outside the tolerance), the generator's profiled bench, issue 52's inference targets with a verdict, the whole-K GEMM candidate's timing beside its model, the attention kernels of paper-b16's three head mixes against the model's two terms, and what cuBLASLt's other heuristic answers would save.

  python3 scripts/lease_digest.py REPORT.json [--prediction docs/results/predictions/HEAD-<sha>-modeled.json]
        [--tolerance 1.3]

REPORT.json: what scripts/gpu_lease.sh (scripts/gpu_check.sh) left in the run's output folder. Every
figure is labelled by where it came from: "GPU at <commit>" for a report of a GPU, "emulated at
<commit>" for one of scripts/gpu_check.sh --emulate (launch counts, no times); the prediction's are
"modeled". Nothing here is measured on this machine. The prose (why a step failed, what a flagged
group means for the calibration) is the session's to write beside it.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# issue 52's inference targets: LS's prefill at these prompt lengths, and its decode at the largest context,
# at least this far below MHSA's (ours against ours, one run)
PREFILL_TARGET = (0.30, (8192, 16384))
DECODE_TARGET = (0.30, 16384)
# attention_attribution_section: a factor this close to 1 agrees with the model's term
ATTN_TERM_AGREES = 0.10
# matmul_algos_section: the share of the profiled step that makes choosing cuBLASLt's answers worth building
ALGO_GAIN_WORTH = 0.02


def roofline():
    spec = importlib.util.spec_from_file_location("roofline", os.path.join(REPO, "dev", "bench", "roofline.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def label(report):
    """Where the report's figures come from: a GPU's, or the emulation's (its device name says so)."""
    emulated = "emulated" in str(report.get("device", "")).lower()
    commit = str(report.get("commit", "?"))
    if len(commit) == 40 and all(c in "0123456789abcdef" for c in commit):
        commit = commit[:7]
    return ("emulated at " if emulated else "GPU at ") + commit, emulated


def resolve(commit):
    """The full name of a commit of this repository, or None (not a commit here, or no git)."""
    try:
        p = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def tree_digest(commit, own_script=True):
    """scripts/build_digest.sh of a commit's tree, or None where git cannot give the tree. own_script: by
    that tree's own script (the definition its builds had; None for a tree before it), else by this
    repository's (the same definition for any two commits compared)."""
    with tempfile.TemporaryDirectory() as d:
        try:
            archive = subprocess.run(["git", "-C", REPO, "archive", commit], capture_output=True, timeout=120)
            if archive.returncode != 0:
                return None
            subprocess.run(["tar", "-x", "-C", d], input=archive.stdout, check=True, timeout=120)
            script = os.path.join(d if own_script else REPO, "scripts", "build_digest.sh")
            if not os.path.exists(script):
                return None
            p = subprocess.run(["bash", script, d], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def build_sources_changed(old, new):
    """The build inputs (scripts/build_digest.sh's kinds of file) that differ between two commits, the device
    code's first."""
    p = subprocess.run(["git", "-C", REPO, "diff", "--name-only", old, new], capture_output=True, text=True,
                       timeout=60)
    kinds = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".inc")
    skip = ("build/", ".deps/", "prebuilt/", "out/", "data/", "hf/")
    files = [f for f in p.stdout.split() if (f.endswith(kinds) or os.path.basename(f) == "Makefile")
             and not f.startswith(skip)]
    # the device code first: what the prediction's rows are of
    return sorted(files, key=lambda f: (not (f.startswith(("llmc/cuda/", "dev/cuda/")) or f.endswith(".cuh")), f))


def prediction_sources(pc, commit, full):
    """One line: whether the prediction's commit pc has the build sources of the commit measured (full)."""
    pfull = resolve(pc)
    if pfull is None:
        return (f"The prediction's commit ({pc}) is not a commit of this repository: whether it is of the "
                "sources measured cannot be checked.")
    ours, theirs = tree_digest(pfull, own_script=False), tree_digest(full, own_script=False)
    if ours is None or theirs is None:
        return (f"The trees of the prediction's commit ({pc}) and of {commit} could not be made here: whether "
                "they are of the same build sources is not known.")
    if ours == theirs:
        return f"The prediction's commit ({pc}) has the build sources of {commit}: its rows are of the code measured."
    changed = build_sources_changed(pfull, full)
    shown = ", ".join(f"`{f}`" for f in changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    return (f"**The prediction ({pc}) is of other build sources than the commit measured ({commit})**: "
            f"{len(changed)} differ ({shown or 'by the digest only'}); the rows of what they change may not "
            "stand (`dev/bench/roofline.py --predict` for the commit measured).")


def sources_section(report, prediction):
    """Whether the report's commit names the tree that ran (its recorded build digest against the commit's),
    and whether the prediction is of the same build sources as the commit measured."""
    commit = str(report.get("commit", "unknown"))
    full = resolve(commit) if commit != "unknown" else None
    if full is not None and commit == full:
        commit = commit[:7]  # as label() shows it
    if full is None:
        return [f"**Sources**: the report's commit ({commit}) is not a commit of this repository: neither its "
                "label nor the prediction's sources can be checked."]
    out = []
    measured = report.get("sources_digest")
    if measured:
        at_commit = tree_digest(full)
        if at_commit is None:
            out.append(f"**Sources**: the digest of {commit}'s tree could not be made here; the measured tree's "
                       f"is {measured}.")
        elif at_commit != measured:
            out.append(f"**Sources: the report's commit does not name the tree that ran**: the measured tree's "
                       f"build sources have digest {measured}, commit {commit}'s {at_commit} (GPU_CHECK_COMMIT "
                       "named another commit, or the tree carried uncommitted or untracked sources): read every "
                       "figure as of that tree, not of the commit.")
        else:
            out.append(f"**Sources**: the measured tree's build sources are commit {commit}'s (digest {measured}).")
    else:
        out.append(f"**Sources**: the report records no digest of the tree that ran (a gpu_check.sh before "
                   f"it did): its commit label ({commit}) is taken as given.")
    if prediction:
        out += ["", prediction_sources(str(prediction.get("commit", "?")), commit, full)]
    return out


def steps_section(report):
    steps = report.get("steps", [])
    failed = [s for s in steps if s["status"] not in ("PASS", "SKIPPED")]
    out = [f"**Steps**: {report.get('passed', 0)} of {len(steps)} PASS, {report.get('skipped', 0)} skipped, "
           f"{len(failed)} failed (device {report.get('device', '?')}, {report.get('date', '?')})."]
    if failed:
        out += ["", "| failed step | status | seconds |", "|---|---|---:|"]
        out += [f"| `{s['name']}` | {s['status']} | {s['seconds']:.1f} |" for s in failed]
    return out


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def unclassified_kernels(rf, prof):
    """The profile's kernel names (demangled where c++filt is there) that are not ours, not cuBLASLt's
    (roofline.py's GEMM patterns), not copies and not memsets."""
    names = [k["kernel"] for k in prof.get("kernels", [])]
    try:
        shown = rf.demangle(names)
    except rf.DemangleError:
        shown = {n: n for n in names}
    return sorted({shown[n] for n in names
                   if not n.startswith("_ZN4llmc") and "llmc::" not in shown[n]
                   and not shown[n].lower().startswith(("memcpy", "memset"))
                   and rf.kernel_group(shown[n]) != "GEMMs"})


def profile_section(rf, case, prof, pred_case, tol, where):
    out = [f"### Profile `{case}` ({where}; predicted: modeled)", ""]
    res = rf.compare_profile(rf.load_profile(prof), pred_case, tol) if pred_case else None
    if prof.get("timed") and not all(isinstance(prof.get(f), (int, float)) for f in
                                     ("step_us", "busy_us", "idle_us", "activities_per_step")):
        out.append(f"Timed ({where}) but without its step, busy, idle or activity figures: the profile is "
                   "incomplete (rows compared as they are).")
    elif prof.get("timed"):
        out.append(f"Step {prof['step_us']:.1f} us ({where})"
                   + (f", predicted {pred_case['step_us']:.1f} us (ratio {prof['step_us'] / pred_case['step_us']:.2f})"
                      if pred_case else "")
                   + f"; busy {prof['busy_us']:.1f} us, idle {prof['idle_us']:.1f} us, "
                   f"{prof['activities_per_step']:.0f} activities per step.")
    else:
        out.append(f"Untimed ({where}): {prof.get('activities_per_step') or 0:.0f} activities per step; calls "
                   "compared only.")
    g = prof.get("gemms")
    if g:
        rate = f", {g['tflops']:.1f} TFLOP/s achieved" if g.get("tflops") else ""
        out.append(f"cuBLASLt per step (the trainer's count): {g['calls_per_step']:.1f} calls, "
                   f"{g['flops_per_step'] / 1e9:.3f} GFLOP, {g['bytes_per_step'] / 1e9:.4f} GB{rate}.")
    odd = unclassified_kernels(rf, prof)
    if odd:
        out.append("Kernels neither ours (llmc::), cuBLASLt's, a copy nor a memset (the trainer's cuBLASLt line "
                   "counts their time; e.g. a graph's memset node run as a kernel): "
                   + ", ".join(f"`{n[:80]}`" for n in odd) + ".")
    if res is None:
        out += ["", "(no prediction for this case: give --prediction, or the prediction lacks it)"]
        return out
    out += ["", "| group | measured | predicted us | ratio | calls m / p | flagged |", "|---|---:|---:|---:|---:|---|"]
    for grp in res["groups"]:
        out.append(f"| {grp['group']} | {fmt(grp['us_measured'], ',.1f')} | {grp['us_predicted']:,.1f} | "
                   f"{fmt(grp['ratio'], '.2f')} | {grp['calls_measured']:.0f} / {grp['calls_predicted']:.0f} | "
                   f"{'**yes**' if grp['flagged'] else ''} |")
    out.append("")
    out.append("Flagged: " + (", ".join(res["flagged"]) if res["flagged"] else "none") +
               f" (outside [{1 / tol:.2f}, {tol:.2f}]" + ("" if res["timed"] else ", calls only") + ").")
    if res["timed"]:
        top = sorted((r for r in res["rows"] if r["us_measured"]), key=lambda r: -r["us_measured"])[:8]
        out += ["", "| largest kernels | calls | us measured | us predicted | ratio |", "|---|---:|---:|---:|---:|"]
        out += [f"| `{r['kernel'][:80]}` | {r['calls_measured']:.0f} | {r['us_measured']:,.1f} | "
                f"{r['us_predicted']:,.1f} | {fmt(r['ratio'], '.2f')} |" for r in top]
    return out


def generate_section(name, j, where, emulated):
    out = [f"### Generator bench `{name}` ({where})", ""]
    pre = j.get("prefill", [])
    pre = pre if isinstance(pre, list) else [pre]  # one object before be30f47
    if emulated:
        out.append(f"Ran: prefill lengths {', '.join(str(p['T']) for p in pre)}, decode contexts "
                   f"{', '.join(str(d['context']) for d in j.get('decode', []))} (its times are the emulator's: none "
                   "shown).")
    else:
        prefills = ", ".join(f"B {j.get('batch')} x {p['T']}: {p['ms_median']:.3f} ms" for p in pre)
        decodes = ", ".join(f"context {d['context']}: {d['ms_per_token_median']:.3f} ms per token"
                            for d in j.get("decode", []))
        out.append(f"Prefill: {prefills}; decode: {decodes} (--cuda-graph {j.get('cuda_graph')}, --pdl {j.get('pdl')}"
                   + (", --fused-decode 1" if j.get("fused_decode") == 1 else "") + ").")
    prof = j.get("profile")
    if prof:
        for what in ("prefill", "decode"):
            t = prof[what]
            line = f"Profiled {what}: {t['activities_per_step']:.0f} activities"
            if t.get("timed"):
                line += f", {t['step_us']:.1f} us, idle {t['idle_us']:.1f} us"
            g = t.get("gemms")
            if g:
                line += f"; cuBLASLt {g['calls_per_step']:.0f} calls, {g['flops_per_step'] / 1e9:.3f} GFLOP"
            out.append(line + ".")
    return out


def reduction(x, ref):
    return None if x is None or ref is None or ref <= 0 else 1.0 - x / ref


# our sides of generate_latency.py, each LS variant compared with MHSA on the same side: "ours" issues each
# decode step's kernels one by one without programmatic launch (--cuda-graph 0 --pdl 0), "graph" is the
# generator's defaults on the CUDA backend (--cuda-graph 1 --pdl auto: each step one CUDA graph, programmatic
# launch where the device has it), "fused" is graph with --fused-decode 1; each side's record says what ran
# (cuda_graph, pdl, fused_decode), its cuda_graph and pdl printed beside it
SIDES = {"ours": "each decode step issued kernel by kernel",
         "graph": "each decode step one CUDA graph, the generator's defaults",
         "fused": "graph with the fused decode kernels, --fused-decode 1"}


def latency_targets(j):
    """Per our side and LS variant: the prefill reduction against MHSA (the same side) at each prompt length and
    the decode reduction at the largest context, with each target's verdict (None: not measured)."""
    res = j.get("results", {})
    rows = []
    least, at = PREFILL_TARGET
    for side in SIDES:
        mhsa = (res.get("mhsa") or {}).get(side)
        if not mhsa:
            continue
        rows += [dict(r, side=side) for r in side_targets(res, side, mhsa, least, at)]
    return rows


def side_targets(res, side, mhsa, least, at):
    rows = []
    for v in ("ls-p50", "ls-p100"):
        ls = (res.get(v) or {}).get(side)
        if not ls:
            continue
        pre = {int(t): reduction(ls["prefill"].get(t, {}).get("ms"), mhsa["prefill"].get(t, {}).get("ms"))
               for t in mhsa["prefill"]}
        c = str(DECODE_TARGET[1])
        dec = reduction(ls["decode"].get(c, {}).get("ms_per_token"), mhsa["decode"].get(c, {}).get("ms_per_token"))
        needed = [pre.get(t) for t in at]
        prefill_ok = None if any(x is None for x in needed) else all(x >= least for x in needed)
        rows.append(dict(variant=v, prefill=pre, decode=dec, prefill_ok=prefill_ok,
                         decode_ok=None if dec is None else dec >= DECODE_TARGET[0],
                         ran=(ls.get("cuda_graph"), ls.get("pdl"), mhsa.get("cuda_graph"), mhsa.get("pdl"))))
    return rows


def latency_section(j, where, emulated):
    least, at = PREFILL_TARGET
    out = [f"### LS against MHSA, our sides (`generate_latency.py`, {where})", ""]
    rows = latency_targets(j)
    if not rows:
        return out + ["(no MHSA and LS results of ours in it)"]
    if emulated:
        return out + [f"Ran: {', '.join(dict.fromkeys(r['variant'] for r in rows))} against mhsa at prompts "
                      f"{', '.join(map(str, sorted(rows[0]['prefill'])))} (sides: "
                      f"{', '.join(dict.fromkeys(r['side'] for r in rows))}; its times are the emulator's: no "
                      "reduction or verdict shown)."]

    def verdict(ok):
        return "not measured" if ok is None else ("**met**" if ok else "**missed**")
    for r in rows:
        cells = ", ".join(f"{t}: {fmt(None if x is None else 100 * x, '.1f')}%" for t, x in sorted(r["prefill"].items()))
        g, pdl, mg, mpdl = r["ran"]
        ran = "" if g is None else f"; ran with --cuda-graph {g} --pdl {pdl}, MHSA's {mg} / {mpdl}"
        out.append(f"- {r['variant']}, {r['side']} ({SIDES[r['side']]}{ran}): prefill below MHSA by {cells}; target >= {100 * least:.0f}% at "
                   f"{' and '.join(map(str, at))}: {verdict(r['prefill_ok'])}. Decode at {DECODE_TARGET[1]}: "
                   f"{fmt(None if r['decode'] is None else 100 * r['decode'], '.1f')}% below; target >= "
                   f"{100 * DECODE_TARGET[0]:.0f}%: {verdict(r['decode_ok'])}.")
    return out


# the lab candidate's timing rows (dev/cuda/matmul_small_k.cu): each candidate row and the production row
# it would replace
SMALL_K_PAIRS = (("small_k GeluForward (Rows)", "cuBLASLt + gelu_forward (prod)"),
                 ("small_k Plain (Rows)", "cuBLASLt forward alone"),
                 ("small_k GeluBackward (Cols)", "cuBLASLt dinp + gelu_backward"),
                 ("small_k Plain (Cols)", "cuBLASLt dinp alone"))


def small_k_section(rf, j, where, emulated):
    """The whole-K GEMM candidate's timing table (profile:matmul_small_k), each row beside roofline.py's
    small_k_rows (modeled: the candidate from its static SASS count, its GELU epilogue hidden under the
    products or after them; the production rows as measured at c2b0f82), and each candidate row's
    speed-up over the production row it would replace."""
    out = ["### Lab candidate: whole-K GEMM with the GELU epilogue (`lab:matmul_small_k`, " + where + ")", ""]
    rows = {r.get("kernel"): r for r in j.get("rows", []) if isinstance(r, dict)}
    if emulated or not rows:
        return out + ["(no timed rows: " + ("emulated" if emulated else "the table is empty") + ")"]
    cal = rf.fit_calibration()
    hidden, after = rf.small_k_rows(cal, overlap=True), rf.small_k_rows(cal, overlap=False)
    out += ["| row | shape | us measured | us modeled, epilogue hidden / after | ratio to hidden | speed-up over |",
            "|---|---|---:|---:|---:|---|"]
    for name, r in rows.items():
        us = r["ms"] * 1e3
        h, a = hidden.get(name), after.get(name)
        vs = next((p for c, p in SMALL_K_PAIRS if c == name), None)
        speed = (f"{rows[vs]['ms'] / r['ms']:.2f}x `{vs}`" if vs in rows and r["ms"] > 0 else "")
        out.append(f"| `{name}` | {r.get('shape', '')} | {us:,.1f} | {fmt(h, ',.1f')} / {fmt(a, ',.1f')} | "
                   f"{fmt(None if h is None else us / h, '.2f')} | {speed} |")
    fused = [(c, p) for c, p in SMALL_K_PAIRS[::2] if c in rows and p in rows]  # the two fused forms
    if len(fused) == 2:
        faster = [rows[c]["ms"] < rows[p]["ms"] for c, p in fused]
        out += ["", "Verdict: " + (
            "both fused forms are faster than the production pairs: wiring them into the trainer (behind a "
            "flag until a profile of the step agrees) is the next step." if all(faster) else
            "the fused forms are not both faster than the production pairs: the candidate stays in the lab.")]
    return out


def attention_attribution_section(rf, benches, where, emulated):
    """paper-b16 with its heads all local, as built (G 1) and all global (profile stage): the steps side
    by side, and each FA2-class kernel's measured time against roofline.py's two modeled terms (whole
    tiles; block set-up and merges) with the least-squares factors of each (attn_attribution)."""
    cases = rf.ATTN_VARIANT_CASES
    out = ["### Attention by head mix: " + ", ".join(f"`{c}`" for c in cases) + f" ({where}; modeled beside it)", ""]
    profs = {c: benches.get(f"bench/profile/{c}.json") for c in cases}
    timed = {c: p for c, p in profs.items() if isinstance(p, dict) and p.get("timed")
             and isinstance(p.get("step_us"), (int, float)) and isinstance(p.get("kernels"), list)}
    if emulated or len(timed) < 2:
        return out + ["(not read: " + ("emulated, no times" if emulated else
                                       f"{len(timed)} of the {len(cases)} profiles timed") + ")"]
    cal = rf.fit_calibration()
    try:
        measured = {c: rf.attn_profile_us(p) for c, p in timed.items()}
    except rf.DemangleError as e:
        return out + [f"(not read: {e})"]
    out += ["| case | G | step us | FA2-class kernels us |", "|---|---:|---:|---:|"]
    for c, p in timed.items():
        out.append(f"| `{c}` | {rf.CASES[c]['G']} | {p['step_us']:,.1f} | {sum(measured[c].values()):,.1f} |")
    res = rf.attn_attribution(cal, measured)
    out += ["", "Each kernel: measured - fixed = a x tiles + b x set-up (the model's terms at the case's shape; "
            "a = b = 1 is the calibrated model; a linear reading of a non-linear schedule). sigma: a factor's "
            f"spread if each measurement carried {rf.ATTN_NOISE:.0%} independent noise (assumed: the profiles "
            "record none); a factor departs from the model when it is more than "
            f"{ATTN_TERM_AGREES:.0%} + 2 sigma from 1.", "",
            "| kernel | case | us measured | us modeled | ratio | us with a, b | tiles / set-up modeled |",
            "|---|---|---:|---:|---:|---:|---|"]
    terms = {c: rf.attn_terms(c, cal) for c in timed}
    for k, r in res.items():
        for c, (y, m, refit) in r["cases"].items():
            t = terms[c][k]
            out.append(f"| `{k}` | `{c}` | {y:,.1f} | {m:,.1f} | {y / m:.2f} | {fmt(refit, ',.1f')} | "
                       f"{t['tiles']:,.1f} / {t['setup']:,.1f} |")
    out.append("")
    for k, r in res.items():
        if r["a"] is None:
            out.append(f"- `{k}`: measured in {len(r['cases'])} case(s): no factors.")
            continue
        out.append(f"- `{k}`: a = {r['a']:.2f} +- {r['sigma_a']:.2f} (tiles), b = {r['b']:.2f} +- "
                   f"{r['sigma_b']:.2f} (set-up and merges), refit residual {100 * r['residual']:.1f}%: "
                   f"{attribution_verdict(r)}.")
    return out


def attribution_verdict(r):
    """attn_attribution's factors of one kernel in words: which term departs from the model beyond
    ATTN_TERM_AGREES + 2 sigma, or that none does (and whether the fit could have told)."""
    off = {name: abs(r[f] - 1) - ATTN_TERM_AGREES - 2 * r[f"sigma_{f}"]
           for name, f in (("whole tiles", "a"), ("set-up and merges", "b"))}
    departs = [name for name, d in off.items() if d > 0]
    if len(departs) == 2:
        return "both terms depart from the model, the " + max(departs, key=off.get) + " more"
    if departs:
        return f"the {departs[0]} depart from the model"
    loose = [name for name, f in (("whole tiles", "a"), ("set-up and merges", "b"))
             if 2 * r[f"sigma_{f}"] > ATTN_TERM_AGREES]
    if loose:
        return "no term departs beyond its spread; the " + " and the ".join(loose) + " not separable at this noise"
    return f"both within {ATTN_TERM_AGREES:.0%} + 2 sigma of the model"


def matmul_algos_section(j, benches, where, emulated):
    """profile:matmul_algos: each GEMM problem of the paper-b16 step with each of cuBLASLt's first heuristic
    answers (checked, then timed alone), the first answer's time (the trainer's) against the fastest's, and
    the step's gain at the problems' calls, beside the profile's own cuBLASLt time."""
    out = ["### cuBLASLt's heuristic answers (`profile:matmul_algos`, " + where + ")", ""]
    if emulated:
        return out + ["(no timed rows: emulated)"]
    all_rows = [r for r in j.get("rows", []) if isinstance(r, dict)]
    rows = [r for r in all_rows if r.get("gain_us_per_step") is not None]
    failed = [f"`{r.get('problem')}` rank {k.get('rank')}: {k.get('status')}" for r in all_rows
              for k in r.get("ranks", []) if k.get("status", "ok") != "ok"]
    failed += [f"`{r.get('problem')}`: {r['error']}" for r in all_rows if r.get("error")]
    if failed or not j.get("checks_passed", True):
        out += ["**Answers that failed their check or their call** (left out of the fastest; the step failed; a "
                "rank above 0 is an answer the trainer never takes): " + "; ".join(failed) + ".", ""]
    if not rows:
        return out + ["(no timed rows: the table is empty)"]
    out += ["| problem | calls | answers | first us | fastest us | fastest rank | gain us a step |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: -r["gain_us_per_step"]):
        out.append(f"| `{r['problem']}` | {r['calls_per_step']:g} | {len(r['ranks'])} | {r['first_us']:,.1f} | "
                   f"{r['best_us']:,.1f} | {r['best_rank']} | {r['gain_us_per_step']:,.1f} |")
    untimed = [r["problem"] for r in all_rows if r.get("gain_us_per_step") is None]
    if untimed:
        out += ["", "Not timed (the first answer failed): " + ", ".join(f"`{p}`" for p in untimed) + "."]
    first = sum(r["calls_per_step"] * r["first_us"] for r in rows)
    best = sum(r["calls_per_step"] * r["best_us"] for r in rows)
    gain = first - best
    out += ["", f"A step's GEMMs, each call timed alone with L2 flushed (the first answer and the fastest timed "
            f"again, interleaved): {first:,.1f} us at the first answers, {best:,.1f} us at the fastest offered: "
            f"{gain:,.1f} us ({100 * gain / max(first, 1e-9):.1f}%) less; lab times, not scaled to the step's."]
    prof = benches.get("bench/profile/paper-b16.json") or {}
    g = prof.get("gemms") or {}
    if prof.get("timed") and g.get("us_per_step"):
        out.append(f"The paper-b16 profile's cuBLASLt time in the step: {g['us_per_step']:,.1f} us "
                   f"(the lab's first answers sum to {first / g['us_per_step']:.2f}x it).")
    step = prof.get("step_us") if prof.get("timed") else None
    step = step if isinstance(step, (int, float)) and step > 0 else None
    if step:
        worth = gain >= ALGO_GAIN_WORTH * step
        out += ["", "Verdict: " + (
            f"the fastest answers would save {100 * gain / step:.1f}% of the profiled step: choosing them (an "
            "algorithm list recorded with the run, so that a resumed run takes the same ones) is worth building."
            if worth else
            f"the fastest answers would save {100 * gain / step:.1f}% of the profiled step, under "
            f"{ALGO_GAIN_WORTH:.0%}: the heuristic's first answer stays.")]
    return out


def digest(report, prediction=None, tol=1.3, prediction_name="the prediction"):
    where, emulated = label(report)
    out = [f"## Measured ({where})", ""] + steps_section(report) + [""] + sources_section(report, prediction)
    if emulated:
        out += ["", "Emulated: launch counts and calls, no times; no figure here is a GPU's."]
    rf = roofline()
    cases = (prediction or {}).get("cases", {})
    benches = report.get("benchmarks") or {}
    order = ("bench/profile/", "bench/generate/", "")  # profiles, the generator's bench, then the rest
    for key in sorted(benches, key=lambda k: (next(i for i, p in enumerate(order) if k.startswith(p)), k)):
        j = benches[key]
        if "error" in j and len(j) == 1:
            out += ["", f"### `{key}`: {j['error']}"]
            continue
        parts = key.split("/")
        name = os.path.splitext(parts[-1])[0]
        if key.startswith("bench/profile/"):
            out += [""] + profile_section(rf, name, j, cases.get(name), tol, where)
        elif key.startswith("bench/generate/"):
            out += [""] + generate_section(name, j, where, emulated)
        elif key.endswith("generate_latency.json"):
            out += [""] + latency_section(j, where, emulated)
        elif key == "bench/lab/matmul_small_k.json":
            out += [""] + small_k_section(rf, j, where, emulated)
        elif key == "bench/lab/matmul_algos.json":
            out += [""] + matmul_algos_section(j, benches, where, emulated)
    if any(f"bench/profile/{c}.json" in benches for c in rf.ATTN_VARIANT_CASES):
        out += [""] + attention_attribution_section(rf, benches, where, emulated)
    if prediction:
        out += ["", f"Predicted: `{prediction_name}` (modeled, for {prediction.get('commit', '?')})."]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip())
    ap.add_argument("report", help="the lease's report.json")
    ap.add_argument("--prediction", help="a roofline.py --predict JSON (docs/results/predictions/)")
    ap.add_argument("--tolerance", type=float, default=1.3)
    a = ap.parse_args(argv)
    try:
        with open(a.report) as f:
            report = json.load(f)
        if not isinstance(report, dict) or "steps" not in report:
            raise ValueError("no 'steps': not a scripts/gpu_check.sh report.json")
        prediction = None
        if a.prediction:
            with open(a.prediction) as f:
                prediction = json.load(f)
            if not isinstance(prediction.get("cases"), dict):
                raise ValueError(f"{a.prediction}: no 'cases': not a roofline.py --predict file")
    except (OSError, ValueError) as e:
        print(f"error: {e}; give the report.json a lease left (and a prediction roofline.py --predict wrote)",
              file=sys.stderr)
        return 2
    print(digest(report, prediction, a.tolerance, a.prediction))
    return 0


if __name__ == "__main__":
    sys.exit(main())
