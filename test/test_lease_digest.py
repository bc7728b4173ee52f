"""scripts/lease_digest.py: the measured side of a lease as markdown. On the committed report of the GPU run
at c276bf2 (docs/results/2026-11-29-H200-c276bf2/) against the prediction committed before it; the target
verdicts on generated latency results; an emulated report shows no times."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "lease_digest.py"
sys.path.insert(0, str(SCRIPT.parent))
import lease_digest  # noqa: E402

C276 = REPO / "docs" / "results" / "2026-11-29-H200-c276bf2" / "report.json"
PRED = REPO / "docs" / "results" / "predictions" / "HEAD-ad79b12-modeled.json"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_c276bf2_run_as_its_readme_reads_it():
    p = run(C276, "--prediction", PRED)
    assert p.returncode == 0, p.stderr
    text = p.stdout
    assert text.startswith("## Measured (GPU at c276bf2)")
    assert "**Steps**: 35 of 40 PASS, 0 skipped, 5 failed" in text
    for failed in ("test:test_cuda_model", "check:attention_ls", "test:cublaslt-real", "sweep:attention_ls",
                   "profile:d12-b16"):
        assert f"| `{failed}` | FAIL(rc=1) |" in text
    # the README's "measured beside predicted" table (docs/results/2026-11-29-H200-c276bf2/README.md)
    assert "Step 6022.2 us (GPU at c276bf2), predicted 5327.7 us (ratio 1.13)" in text
    assert "| attention bwd | 1,196.9 | 761.1 | 1.57 | 18 / 18 | **yes** |" in text
    assert "| GEMMs | 1,256.3 | 1,206.0 | 1.04 | 99 / 75 |  |" in text
    assert "Flagged: attention fwd, attention bwd, LayerNorm, gaps (outside [0.77, 1.30])." in text
    assert f"Predicted: `{PRED}` (modeled, for ad79b12)." in text
    # its gpu_check.sh recorded no digest of the tree; ad79b12 (the prediction) came after it
    assert "**Sources**: the report records no digest of the tree that ran" in text
    assert "**The prediction (ad79b12) is of other build sources than the commit measured (c276bf2)**" in text
    assert "`dev/cuda/adamw.cu`" in text  # ad79b12's own change, among the device code listed first
    assert "Kernels neither ours" not in text  # its profiles hold ours, cuBLASLt's, copies and memsets only


def test_kernels_of_no_known_kind_are_named():
    """A kernel that is not ours, not cuBLASLt's, not a copy or memset (a graph's memset node run as a
    driver kernel, say) is named: the trainer's cuBLASLt line counts its time."""
    rf = lease_digest.roofline()
    kernels = ["_ZN4llmc4cuda14encoder_kernelEPfi", "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT",
               "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvv", "memset",
               "memcpy HtoD", "someDriverKernel"]
    prof = {"timed": True, "kernels": [{"kernel": k, "calls_per_step": 1, "us_per_step": 1.0} for k in kernels],
            "step_us": 10.0, "busy_us": 6.0, "idle_us": 4.0, "activities_per_step": 6}
    assert lease_digest.unclassified_kernels(rf, prof) == ["someDriverKernel"]
    text = "\n".join(lease_digest.profile_section(rf, "paper-b16-graph", prof, None, 1.3, "GPU at abc1234"))
    assert "a graph's memset node run as a kernel): `someDriverKernel`." in text


def latency_json(ms, device="NVIDIA H200", side="ours", graph=None):
    """generate_latency.py's JSON: {variant: {"prefill": {T: ms}, "decode": {c: ms}}} of our side `side`, and
    with graph (the same form) of the side "graph" too."""
    def side_of(d):
        return {"prefill": {str(t): {"ms": x, "peak_bytes": 1} for t, x in d["prefill"].items()},
                "decode": {str(c): {"ms_per_token": x} for c, x in d["decode"].items()}}
    res = {v: {side: side_of(d)} for v, d in ms.items()}
    for v, d in (graph or {}).items():
        res.setdefault(v, {})["graph"] = side_of(d)
    return {"commit": "abc1234", "device": device, "results": res}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_target_verdicts_follow_the_reductions(seed):
    """Fresh random times: a variant meets the prefill target only when it is >= 30% below MHSA at both 8K and
    16K, and the decode target when >= 30% below at 16K; a length not measured gives no verdict."""
    rng = random.Random(seed)
    m8, m16, d16 = (rng.uniform(1, 20) for _ in range(3))
    cut = {"ls-p50": (rng.uniform(0.31, 0.7), rng.uniform(0.31, 0.7), rng.uniform(0.31, 0.6)),
           "ls-p100": (rng.uniform(0.31, 0.7), rng.uniform(0.0, 0.29), rng.uniform(0.0, 0.29))}
    ms = {"mhsa": {"prefill": {2048: 1.0, 8192: m8, 16384: m16}, "decode": {16384: d16}}}
    for v, (a, b, c) in cut.items():
        ms[v] = {"prefill": {2048: 0.9, 8192: m8 * (1 - a), 16384: m16 * (1 - b)}, "decode": {16384: d16 * (1 - c)}}
    rows = {r["variant"]: r for r in lease_digest.latency_targets(latency_json(ms))}
    assert rows["ls-p50"]["prefill_ok"] is True and rows["ls-p50"]["decode_ok"] is True
    assert rows["ls-p100"]["prefill_ok"] is False and rows["ls-p100"]["decode_ok"] is False
    assert rows["ls-p50"]["prefill"][8192] == pytest.approx(cut["ls-p50"][0])
    assert rows["ls-p100"]["prefill"][2048] == pytest.approx(0.1)
    text = "\n".join(lease_digest.latency_section(latency_json(ms), "GPU at abc1234", False))
    assert "ls-p50, ours (each decode step issued kernel by kernel): prefill below MHSA by 2048: 10.0%" in text
    assert text.count("**met**") == 2
    assert text.count("**missed**") == 2
    # without the 16K prompt: no prefill verdict
    del ms["ls-p50"]["prefill"][16384]
    rows = {r["variant"]: r for r in lease_digest.latency_targets(latency_json(ms))}
    assert rows["ls-p50"]["prefill_ok"] is None


def test_each_side_is_compared_with_mhsa_on_the_same_side():
    """The graph side (each decode step one CUDA graph, the generator's default) has its own verdicts, against
    MHSA's graph side, never against MHSA's eager times: fresh random times where only the graph side's decode
    is >= 30% below its MHSA, and the graph side of an LS variant without MHSA's graph side gives no row."""
    rng = random.Random(7)
    d_eager, d_graph = rng.uniform(0.5, 1.0), rng.uniform(0.2, 0.4)
    cut_eager, cut_graph = rng.uniform(0.05, 0.25), rng.uniform(0.31, 0.5)
    pre = {8192: 2.0, 16384: 4.0}
    eager = {"mhsa": {"prefill": pre, "decode": {16384: d_eager}},
             "ls-p50": {"prefill": {t: x / 2 for t, x in pre.items()}, "decode": {16384: d_eager * (1 - cut_eager)}}}
    graph = {"mhsa": {"prefill": pre, "decode": {16384: d_graph}},
             "ls-p50": {"prefill": {t: x / 2 for t, x in pre.items()}, "decode": {16384: d_graph * (1 - cut_graph)}}}
    rows = {(r["variant"], r["side"]): r for r in lease_digest.latency_targets(latency_json(eager, graph=graph))}
    assert set(rows) == {("ls-p50", "ours"), ("ls-p50", "graph")}
    assert rows[("ls-p50", "ours")]["decode"] == pytest.approx(cut_eager)
    assert rows[("ls-p50", "graph")]["decode"] == pytest.approx(cut_graph)
    assert rows[("ls-p50", "ours")]["decode_ok"] is False and rows[("ls-p50", "graph")]["decode_ok"] is True
    j = latency_json(eager, graph=graph)
    for v in ("mhsa", "ls-p50"):  # what ran, as generate_latency.py records it from the generator's JSON
        j["results"][v]["graph"].update(cuda_graph=1, pdl=1)
    text = "\n".join(lease_digest.latency_section(j, "GPU at abc1234", False))
    assert "ls-p50, graph (each decode step one CUDA graph, the generator's defaults; ran with --cuda-graph 1 " \
        "--pdl 1, MHSA's 1 / 1)" in text, text
    assert "ls-p50, ours (each decode step issued kernel by kernel): " in text, text  # older records: nothing said
    del graph["mhsa"]
    rows = lease_digest.latency_targets(latency_json(eager, graph=graph))
    assert [(r["variant"], r["side"]) for r in rows] == [("ls-p50", "ours")]


def test_an_emulated_report_shows_no_times(tmp_path):
    ms = {"mhsa": {"prefill": {16: 300.0}, "decode": {20: 270.0}}, "ls-p50": {"prefill": {16: 280.0},
                                                                            "decode": {20: 260.0}}}
    gen = {"batch": 1, "cuda_graph": 1, "prefill": [{"T": 32, "ms_median": 31.5}],
           "decode": [{"context": 64, "ms_per_token_median": 15.3}]}
    report = {"commit": "f" * 40, "device": "EMULATED (dev/emu on 2 CPU cores; not a GPU)", "passed": 1, "skipped": 0,
              "steps": [{"name": "profile:latency-targets", "status": "PASS", "seconds": 9.0}],
              "benchmarks": {"bench/latency_targets/generate_latency.json": latency_json(ms, "EMULATED"),
                             "bench/generate/small.json": gen}}
    (tmp_path / "report.json").write_text(json.dumps(report))
    p = run(tmp_path / "report.json")
    assert p.returncode == 0, p.stderr
    assert "## Measured (emulated at fffffff)" in p.stdout and "no figure here is a GPU's" in p.stdout
    for number in ("31.5", "15.3", "300", "%", "met", "missed"):
        assert number not in p.stdout, number
    assert "Ran: ls-p50 against mhsa at prompts 16 (sides: ours;" in p.stdout


# a commit of this repository's history with scripts/build_digest.sh, and one whose build sources differ
# from it (192dfef, the prediction of record; the host code changed after it)
KNOWN = "b318b6f"


def commit_tree_digest(tmp_path, commit):
    """The digest of a commit's tree made another way than lease_digest's (git archive): a clone checked out."""
    tree = tmp_path / f"tree-{commit}"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(tree)], check=True, timeout=120)
    subprocess.run(["git", "-C", str(tree), "checkout", "-q", commit], check=True, timeout=120)
    return subprocess.run(["bash", str(tree / "scripts" / "build_digest.sh"), str(tree)], capture_output=True,
                          text=True, check=True, timeout=120).stdout.strip()


def report_at(tmp_path, commit, digest):
    (tmp_path / "report.json").write_text(json.dumps({"commit": commit, "sources_digest": digest,
                                                      "device": "NVIDIA H200", "passed": 0, "skipped": 0,
                                                      "steps": []}))
    return tmp_path / "report.json"


def test_the_commit_label_is_checked_against_the_tree_that_ran(tmp_path):
    """report.json's sources_digest (gpu_check.sh's build_digest.sh of the tree) against the commit named."""
    digest = commit_tree_digest(tmp_path, KNOWN)
    p = run(report_at(tmp_path, KNOWN, digest))
    assert p.returncode == 0, p.stderr
    assert f"**Sources**: the measured tree's build sources are commit {KNOWN}'s (digest {digest})." in p.stdout
    other = "0123456789abcdef"
    p = run(report_at(tmp_path, KNOWN, other))
    assert p.returncode == 0, p.stderr
    assert (f"**Sources: the report's commit does not name the tree that ran**: the measured tree's build sources "
            f"have digest {other}, commit {KNOWN}'s {digest}") in p.stdout
    full = subprocess.run(["git", "-C", str(REPO), "rev-parse", KNOWN], capture_output=True, text=True,
                          check=True).stdout.strip()
    p = run(report_at(tmp_path, full, digest))  # gpu_check.sh's default: the full name, shown short
    assert f"**Sources**: the measured tree's build sources are commit {KNOWN}'s (digest {digest})." in p.stdout
    p = run(report_at(tmp_path, "f" * 40, other))  # no such commit here
    assert f"the report's commit ({'f' * 40}) is not a commit of this repository" in p.stdout


def test_a_prediction_of_other_sources_is_said(tmp_path):
    pred = json.loads(PRED.read_text())
    for commit, same in (("192dfef", False), (KNOWN, True), ("fffffff", None)):
        pred["commit"] = commit
        (tmp_path / "pred.json").write_text(json.dumps(pred))
        p = run(report_at(tmp_path, KNOWN, None), "--prediction", tmp_path / "pred.json")
        assert p.returncode == 0, p.stderr
        if same is None:
            assert f"The prediction's commit ({commit}) is not a commit of this repository" in p.stdout
        elif same:
            assert f"The prediction's commit ({commit}) has the build sources of {KNOWN}" in p.stdout
        else:
            kinds = ["*.cu", "*.cuh", "*.h", "*.hpp", "*.cpp", "*.cc", "*.c", "*.inc", "Makefile", "*/Makefile"]
            changed = subprocess.run(["git", "-C", str(REPO), "diff", "--name-only", commit, KNOWN, "--", *kinds],
                                     capture_output=True, text=True, check=True).stdout.split()
            assert changed  # the host code changed between them
            assert (f"**The prediction ({commit}) is of other build sources than the commit measured ({KNOWN})**: "
                    f"{len(changed)} differ (") in p.stdout


def test_not_a_report_is_one_line():
    p = run(PRED)  # a prediction, not a report
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "not a scripts/gpu_check.sh report.json" in p.stderr


def test_fused_side_has_its_own_verdicts():
    """The fused side (graph with --fused-decode 1) is judged against MHSA's fused side, as each side is; fresh
    random times where its decode is >= 30% below."""
    rng = random.Random()
    d, cut = rng.uniform(0.2, 0.4), rng.uniform(0.31, 0.5)
    pre = {8192: 2.0, 16384: 4.0}
    fused = {"mhsa": {"prefill": pre, "decode": {16384: d}},
             "ls-p50": {"prefill": {t: x / 2 for t, x in pre.items()}, "decode": {16384: d * (1 - cut)}}}
    j = latency_json(fused, side="fused")
    rows = lease_digest.latency_targets(j)
    assert [(r["variant"], r["side"]) for r in rows] == [("ls-p50", "fused")]
    assert rows[0]["decode"] == pytest.approx(cut) and rows[0]["decode_ok"] is True
    text = "\n".join(lease_digest.latency_section(j, "GPU at abc1234", False))
    assert "ls-p50, fused (graph with the fused decode kernels, --fused-decode 1): " in text, text


def small_k_report(ms, device="NVIDIA H200"):
    rows = [{"kernel": k, "shape": "M=32768 K=192 N=768", "ms": v, "bytes": 1.0, "gbs": 1.0} for k, v in ms.items()]
    return {"commit": "e" * 40, "device": device, "passed": 1, "skipped": 0,
            "steps": [{"name": "profile:matmul_small_k", "status": "PASS", "seconds": 3.0}],
            "benchmarks": {"bench/lab/matmul_small_k.json": {"device": device, "rows": rows}}}


def test_the_small_k_candidate_is_set_beside_the_row_it_would_replace():
    """Each candidate row of lab:matmul_small_k gets its speed-up over the production row it would replace,
    and its modeled time (roofline.small_k_rows); fresh random times."""
    rng = random.Random()
    names = [n for pair in lease_digest.SMALL_K_PAIRS for n in pair]
    ms = {n: rng.uniform(0.01, 0.08) for n in dict.fromkeys(names)}
    text = lease_digest.digest(small_k_report(ms))
    assert "### Lab candidate: whole-K GEMM with the GELU epilogue (`lab:matmul_small_k`, GPU at eeeeeee)" in text
    rf = lease_digest.roofline()
    cal = rf.fit_calibration()
    hidden, after = rf.small_k_rows(cal, overlap=True), rf.small_k_rows(cal, overlap=False)
    for cand, prod in lease_digest.SMALL_K_PAIRS:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{cand}` |"))
        assert f"{ms[prod] / ms[cand]:.2f}x `{prod}`" in line, line
        assert (f"| {ms[cand] * 1e3:,.1f} | {hidden[cand]:,.1f} / {after[cand]:,.1f} | "
                f"{ms[cand] * 1e3 / hidden[cand]:.2f} |") in line, line
    assert hidden["small_k GeluForward (Rows)"] < after["small_k GeluForward (Rows)"]


@pytest.mark.parametrize("faster", [True, False])
def test_the_small_k_verdict_needs_both_fused_forms_faster(faster):
    """The verdict says wire the candidate only when both fused forms beat their production pairs; fresh
    random times, one fused form slower in the second case."""
    rng = random.Random()
    names = [n for pair in lease_digest.SMALL_K_PAIRS for n in pair]
    ms = {n: rng.uniform(0.04, 0.08) for n in dict.fromkeys(names)}
    (c1, p1), (c2, p2) = lease_digest.SMALL_K_PAIRS[0], lease_digest.SMALL_K_PAIRS[2]
    ms[c1], ms[c2] = ms[p1] * rng.uniform(0.5, 0.95), ms[p2] * rng.uniform(0.5, 0.95)
    if not faster:
        ms[c2] = ms[p2] * rng.uniform(1.01, 1.5)
    text = lease_digest.digest(small_k_report(ms))
    assert ("both fused forms are faster" in text) == faster
    assert ("the candidate stays in the lab" in text) == (not faster)


def test_the_small_k_candidate_emulated_shows_no_times():
    text = lease_digest.digest(small_k_report({"small_k Plain (Rows)": 0.123}, "EMULATED (dev/emu; not a GPU)"))
    assert "(no timed rows: emulated)" in text and "123" not in text


def head_mix_report(factors, cases=None, device="NVIDIA H200"):
    """A report of the profile stage's three paper-b16 head mixes whose attention kernels took the model's
    terms times factors {kernel: (a, b)} (the other kernels as predicted); cases: which profiles it holds."""
    rf = lease_digest.roofline()
    cal = rf.fit_calibration()
    pred = rf.prediction(cal, "abc1234")["cases"]
    benches = {}
    for c in cases or rf.ATTN_VARIANT_CASES:
        terms = rf.attn_terms(c, cal)
        kernels = []
        for r in pred[c]["kernels"]:
            us = r["us_per_step"]
            for k, (a, b) in factors.items():
                if f"::{k}<" in r["kernel"]:
                    t = terms[k]
                    us = t["fixed"] + a * t["tiles"] + b * t["setup"]
            kernels.append({"kernel": r["kernel"], "calls_per_step": r["calls_per_step"], "us_per_step": us})
        busy = sum(k["us_per_step"] for k in kernels)
        benches[f"bench/profile/{c}.json"] = {"timed": True, "kernels": kernels, "step_us": busy + 100.0,
                                              "busy_us": busy, "idle_us": 100.0, "activities_per_step": 150}
    return {"commit": "abc1234", "device": device, "steps": [], "benchmarks": benches}


def test_the_head_mixes_name_the_term_the_gpu_disagrees_with():
    """Fresh random factors: the section gives each kernel's a and b back with their spread at 2% noise and
    names the term that departs beyond 10% + 2 sigma; a forward that agrees with the model has a set-up
    term too small to tell apart (its b's spread is wide), which the verdict says."""
    rng = random.Random()
    f = {"attn_fwd_fa2_kernel": (1.0 + rng.uniform(-0.03, 0.03), 1.0 + rng.uniform(-0.03, 0.03)),
         "attn_bwd_kv_fa2_kernel": (1.0, rng.uniform(1.8, 3.0)),
         "attn_bwd_q_fa2_kernel": (rng.uniform(0.97, 1.03), rng.uniform(0.3, 0.5))}
    text = lease_digest.digest(head_mix_report(f))
    assert "### Attention by head mix: `paper-b16-local`, `paper-b16`, `paper-b16-mhsa` (GPU at abc1234" in text
    verdicts = {"attn_fwd_fa2_kernel": "no term departs beyond its spread; the set-up and merges not separable",
                "attn_bwd_kv_fa2_kernel": "the set-up and merges depart from the model",
                "attn_bwd_q_fa2_kernel": "the set-up and merges depart from the model"}
    for k, (a, b) in f.items():
        line = next(x for x in text.splitlines() if x.startswith(f"- `{k}`: "))
        assert line.startswith(f"- `{k}`: a = {a:.2f} +- ") and f", b = {b:.2f} +- " in line, line
        assert "refit residual 0.0%" in line and verdicts[k] in line, line
    assert "| `paper-b16-mhsa` | 6 |" in text and "| `paper-b16-local` | 0 |" in text


def test_the_attribution_verdict_needs_the_departure_beyond_the_spread():
    """The verdict's four outcomes, from given factors and spreads."""
    v = lease_digest.attribution_verdict
    assert v(dict(a=1.05, b=0.97, sigma_a=0.02, sigma_b=0.03)) == "both within 10% + 2 sigma of the model"
    assert v(dict(a=1.05, b=1.3, sigma_a=0.02, sigma_b=0.03)) == "the set-up and merges depart from the model"
    # the same departure inside a wide spread is not a finding
    assert v(dict(a=1.05, b=1.3, sigma_a=0.02, sigma_b=0.15)).startswith("no term departs beyond its spread")
    assert v(dict(a=1.6, b=1.3, sigma_a=0.02, sigma_b=0.03)) == "both terms depart from the model, the whole tiles more"


def test_the_attribution_spread_follows_the_noise(tmp_path):
    """sigma scales with the assumed noise; the factors do not depend on it."""
    rf = lease_digest.roofline()
    cal = rf.fit_calibration()
    meas = {c: {k: t["total"] for k, t in rf.attn_terms(c, cal).items()} for c in rf.ATTN_VARIANT_CASES}
    r1, r2 = rf.attn_attribution(cal, meas, noise=0.01), rf.attn_attribution(cal, meas, noise=0.03)
    for k in rf.ATTN_KERNELS:
        assert r2[k]["sigma_a"] == pytest.approx(3 * r1[k]["sigma_a"]) and r2[k]["a"] == pytest.approx(r1[k]["a"])
        assert r1[k]["a"] == pytest.approx(1.0) and r1[k]["b"] == pytest.approx(1.0) and r1[k]["residual"] < 1e-9


def test_the_head_mixes_need_two_timed_profiles():
    one = lease_digest.digest(head_mix_report({}, cases=["paper-b16"]))
    assert "(not read: 1 of the 3 profiles timed)" in one
    emu = lease_digest.digest(head_mix_report({}, device="EMULATED (dev/emu; not a GPU)"))
    assert "(not read: emulated, no times)" in emu and "a = " not in emu
    # a report without any of the three profiles has no such section
    assert "Attention by head mix" not in lease_digest.digest({"commit": "abc1234", "steps": [], "benchmarks": {}})


def algos_report(gains, step_us=5000.0, device="NVIDIA H200"):
    """A report with profile:matmul_algos's JSON: one problem per gain (us a call, 6 calls), each with three
    answers, and the paper-b16 profile's step."""
    rows, first, best = [], 0.0, 0.0
    for i, g in enumerate(gains):
        t0 = 50.0 + i
        ranks = [{"rank": 0, "us": t0, "algo": "a"}, {"rank": 1, "us": t0 - g, "algo": "b"},
                 {"rank": 2, "us": t0 + 3.0, "algo": "c"}]
        b = min(ranks, key=lambda r: r["us"])
        rows.append({"problem": f"m={192 + i} n=32768 k=192 op=TN ab=bf16 d=bf16 epilogue=1 ld=1,1,1 align=1,1,1,0,0",
                     "calls_per_step": 6, "ranks": ranks, "first_us": t0, "best_us": b["us"], "best_rank": b["rank"],
                     "gain_us_per_step": 6 * (t0 - b["us"])})
        first += 6 * t0
        best += 6 * b["us"]
    algos = {"device": device, "rows": rows, "first_us_per_step": first, "best_us_per_step": best}
    prof = {"timed": True, "kernels": [], "step_us": step_us, "busy_us": step_us, "idle_us": 0.0,
            "activities_per_step": 1, "gemms": {"calls_per_step": 75, "us_per_step": 1900.0,
                                                "flops_per_step": 1.0, "bytes_per_step": 1.0}}
    return {"commit": "abc1234", "device": device, "steps": [],
            "benchmarks": {"bench/lab/matmul_algos.json": algos, "bench/profile/paper-b16.json": prof}}


@pytest.mark.parametrize("worth", [True, False])
def test_the_algorithm_verdict_follows_the_share_of_the_step(worth):
    """Fresh random per-call gains: the verdict says build the choice only when the step's gain is at least
    2% of the profiled step; rows come largest gain first; the totals are the rows' sums."""
    rng = random.Random()
    step = 5000.0
    # the step's gain is 6 x sum(gains): 2% of the step is 100 us, i.e. sum(gains) = 16.7 us
    gains = [rng.uniform(5.6, 8.0) for _ in range(3)] if worth else [rng.uniform(0.0, 5.0) for _ in range(3)]
    text = lease_digest.digest(algos_report(gains, step))
    total = 6 * sum(gains)
    assert ("is worth building" in text) == worth and ("the heuristic's first answer stays" in text) == (not worth)
    assert f"{100 * total / step:.1f}% of the profiled step" in text
    order = [text.index(f"m={192 + i} ") for i in sorted(range(3), key=lambda i: -gains[i])]
    assert order == sorted(order)
    assert "The paper-b16 profile's cuBLASLt time in the step: 1,900.0 us" in text


def test_the_algorithm_table_emulated_shows_no_times():
    text = lease_digest.digest(algos_report([1.0], device="EMULATED (dev/emu; not a GPU)"))
    assert "### cuBLASLt's heuristic answers" in text and "(no timed rows: emulated)" in text
    assert "Verdict" not in text


def test_failed_answers_are_named_and_untimed_problems_listed():
    """An answer that failed its check or its call is named; a problem whose first answer failed is listed
    as not timed, and the table keeps the others."""
    report = algos_report([2.0, 3.0])
    algos = report["benchmarks"]["bench/lab/matmul_algos.json"]
    algos["checks_passed"] = False
    algos["rows"][0]["ranks"][2]["status"] = "check failed"
    algos["rows"].append({"problem": "m=8 n=8 k=8 op=NN ab=bf16 d=bf16 epilogue=1 ld=8,8,8 align=16,16,16,0,0",
                          "calls_per_step": 1, "ranks": [{"rank": 0, "status": "error: refused", "us": None,
                                                          "algo": ""}]})
    text = lease_digest.digest(report)
    assert "**Answers that failed their check or their call**" in text
    assert "`m=192 n=32768 k=192 op=TN ab=bf16 d=bf16 epilogue=1 ld=1,1,1 align=1,1,1,0,0` rank 2: check failed" in text
    assert "rank 0: error: refused" in text
    assert "Not timed (the first answer failed): `m=8 n=8 k=8 op=NN" in text
    assert "| `m=193 n=32768" in text and "| `m=8 n=8" not in text


def test_failures_show_even_when_nothing_was_timed():
    """Every first answer failed: the failures are listed before the note that the table is empty; an untimed
    head-mix profile is left out of the mixes' table."""
    report = algos_report([1.0])
    algos = report["benchmarks"]["bench/lab/matmul_algos.json"]
    algos["checks_passed"] = False
    algos["rows"] = [{"problem": "m=8 n=8 k=8 op=NN ab=bf16 d=bf16 epilogue=1 ld=8,8,8 align=16,16,16,0,0",
                      "calls_per_step": 1, "error": "cudaErrorIllegalAddress",
                      "ranks": [{"rank": 0, "status": "check failed", "us": None, "algo": ""}]}]
    text = lease_digest.digest(report)
    assert "rank 0: check failed" in text and ": cudaErrorIllegalAddress" in text
    assert text.index("**Answers that failed") < text.index("(no timed rows: the table is empty)")
    mixes = head_mix_report({})
    mixes["benchmarks"]["bench/profile/paper-b16-mhsa.json"]["timed"] = False
    text = lease_digest.digest(mixes)
    assert "| `paper-b16-mhsa` |" not in text and "| `paper-b16-local` | 0 |" in text


def test_a_profile_without_its_step_figures_is_said_not_crashed():
    """A timed profile whose step time is missing (a truncated profile.json) gets one line saying so."""
    report = head_mix_report({}, cases=["paper-b16"])
    report["benchmarks"]["bench/profile/paper-b16.json"]["step_us"] = None
    text = lease_digest.digest(report)
    assert "### Profile `paper-b16` (GPU at abc1234" in text
    assert "but without its step, busy, idle or activity figures: the profile is incomplete" in text
