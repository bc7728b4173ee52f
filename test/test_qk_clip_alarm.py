"""QK-Clip (--qk-clip) and the logit alarm (--logit-alarm, --logit-alarm-above) end to end on the CPU
backend, byte-level tiny Shakespeare (run_helpers.py's data and TINY model). The unit tests are in
test/test_qk_clip.cpp (logits recomputed after the scaling) and test/test_logit_alarm.cpp (rules on
synthetic series); here: the loop applies them at the right steps, logs them, and a resumed run
repeats an uninterrupted one bit for bit."""
import shutil

import numpy as np

from run_helpers import TINY, assert_same_run, data_args, read_jsonl, run, train_records

COMMON = TINY + ["-k", "constant", "-u", 0, "-l", "4e-3", "-v", 0, "-s", 0, "--logit-stats-every", 1]
L, NH = 2, 4


def step_maxima(out):
    """{step: [(value, layer, head)]} of every head from logit_stats.jsonl."""
    res = {}
    for r in read_jsonl(out / "logit_stats.jsonl"):
        res[r["step"]] = [(a["max"], a["layer"], a["head"]) for a in r["attn"]]
    return res


def test_qk_clip_clips_exactly_the_heads_above_tau_and_resumes_bit_identical(byte_data, tmp_path):
    tau = 0.12  # the TINY run's max logits grow from ~0.07 to ~0.3 over 16 steps
    args = data_args(byte_data) + COMMON + ["--qk-clip", tau]
    full, part = tmp_path / "full", tmp_path / "part"
    p = run(args + ["-o", full, "-x", 16, "-n", 8])
    recs = {r["step"]: r for r in train_records(full / "metrics.jsonl")}
    maxima = step_maxima(full)
    total = 0
    for s, r in recs.items():
        above = sorted([li, hi] for v, li, hi in maxima[s] if v > tau)
        assert sorted(r["qk_clipped"]) == above, f"step {s}: clipped {r['qk_clipped']}, above tau {above}"
        assert r["qk_clip_heads"] == len(above)
        total += len(above)
    assert total > 0, "tau was meant to be exceeded: the test would show nothing"
    assert any(r["qk_clip_heads"] == 0 for r in recs.values()), "and not on every step"
    assert "qk-clip" in p.stdout
    # interrupted at the checkpoint of step 8, resumed: bit-identical, clipping included
    run(args + ["-o", part, "-x", 8])
    run(args + ["-o", part, "-x", 16, "-y", 1])
    assert_same_run(full, part, 16)
    assert [r.get("qk_clipped") for r in train_records(full / "metrics.jsonl")] == \
           [r.get("qk_clipped") for r in train_records(part / "metrics.jsonl")]


def test_qk_clip_changes_the_run_only_when_a_head_exceeds_tau(byte_data, tmp_path):
    """A tau above every logit of the run: identical to no QK-Clip at all."""
    base, high = tmp_path / "base", tmp_path / "high"
    run(data_args(byte_data) + COMMON + ["-o", base, "-x", 6])
    run(data_args(byte_data) + COMMON + ["-o", high, "-x", 6, "--qk-clip", 1000])
    assert_same_run(base, high, 6)


def test_qk_clip_refusals(byte_data, tmp_path):
    for extra, needle in [(["--qk-clip", -1], "--qk-clip must be >= 0"),
                          (["--qk-clip", 5, "--qk-norm"], "--qk-clip with --qk-norm"),
                          (["--logit-alarm", -2], "--logit-alarm must be >= 0"),
                          (["--logit-alarm-above", -1], "--logit-alarm-above must be >= 0"),
                          (["--logit-alarm-cooldown", 0], "--logit-alarm-cooldown must be >= 1"),
                          (["--logit-alarm-keep", -1], "--logit-alarm-keep must be >= 0")]:
        out = tmp_path / f"o{len(needle)}"
        p = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2] + extra, check=False)
        assert p.returncode != 0, extra
        assert needle in p.stderr, (extra, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not out.exists(), f"{extra}: nothing may be written"


def crossings(series, x):
    """The steps where the edge-triggered absolute rule fires: M > X after a step with M <= X (or first)."""
    res, armed = [], True
    for s in sorted(series):
        if series[s] > x and armed:
            res.append(s)
        armed = series[s] <= x
    return res


def test_logit_alarm_flags_crossings_pins_the_newest_and_replays(byte_data, tmp_path):
    """--logit-alarm-above is edge-triggered (one alarm per crossing above X, not one per step above X),
    and --logit-alarm-keep K pins only the newest K alarm checkpoints."""
    ref, alarm = tmp_path / "ref", tmp_path / "alarm"
    steps = 16
    run(data_args(byte_data) + COMMON + ["-o", ref, "-x", steps])
    maxima = step_maxima(ref)
    overall = {s: max(m) for s, m in maxima.items()}
    m = {s: v for s, (v, _, _) in overall.items()}
    # the X (a midpoint between two maxima of the run) with the most crossings: the run dips below it
    values = sorted(set(m.values()))
    x = max(((a + b) / 2 for a, b in zip(values, values[1:])), key=lambda t: (len(crossings(m, t)), -t))
    flagged = crossings(m, x)
    above = [s for s in sorted(m) if m[s] > x]
    assert len(flagged) >= 2, f"the run's maxima {m} should cross some X twice; the test would show little"
    assert len(above) > len(flagged), "and stay above X for a while: a level-triggered alarm would fire more"
    p = run(data_args(byte_data) + COMMON + ["-o", alarm, "-x", steps, "--logit-alarm-above", x,
                                              "--logit-alarm-cooldown", 1, "--logit-alarm-keep", 1,
                                              "--keep-checkpoints", 1])
    # the alarm observes, it never changes the training (its state file also holds the alarm's window)
    assert [r["loss"] for r in train_records(ref / "metrics.jsonl")] == \
           [r["loss"] for r in train_records(alarm / "metrics.jsonl")]
    assert (ref / f"model_{steps:08d}.bin").read_bytes() == (alarm / f"model_{steps:08d}.bin").read_bytes()
    recs = {r["step"]: r for r in train_records(alarm / "metrics.jsonl")}
    assert [s for s in sorted(recs) if "logit_alarm" in recs[s]] == flagged
    for s in flagged:
        a, (v, li, hi) = recs[s]["logit_alarm"], overall[s]
        assert (a["layer"], a["head"], a["by_above"], a["by_z"], a["checkpoint"]) == (li, hi, True, False, True)
        assert f"logit alarm at step {s}: layer {li} head {hi} max logit" in p.stdout
        assert f"checkpoint of step {s} (logit alarm): {alarm}/model_{s:08d}.bin" in p.stdout
    assert p.stdout.count("logit alarm at step") == len(flagged)
    # --logit-alarm-keep 1: only the newest alarm checkpoint is left, with the newest checkpoint before it
    # (here the previous alarm's: the weights the spiking step's forward started from), besides the newest
    # regular one; a fork from that one replays the spike bit for bit
    done = sorted(int(f.name[5:]) for f in alarm.glob("DONE_*"))
    assert done == sorted({flagged[-2], flagged[-1], steps})
    fork = tmp_path / "fork"
    run(["--fork-from", alarm / f"model_{flagged[-2]:08d}.bin", "-o", fork, "-x", flagged[-1], "--threads", 1])
    spike = {r["step"]: r for r in train_records(fork / "metrics.jsonl")}[flagged[-1]]
    assert (spike["loss"], spike["max_attn_logit"], spike["logit_alarm"]) == \
           (recs[flagged[-1]]["loss"], recs[flagged[-1]]["max_attn_logit"], recs[flagged[-1]]["logit_alarm"])
    # replay: lose the final checkpoint; -y 1 resumes from the last alarm checkpoint (taken while above X:
    # the rule disarmed) and repeats the run, alarms included
    replay = tmp_path / "replay"
    shutil.copytree(alarm, replay)
    for f in [f"DONE_{steps:08d}", f"model_{steps:08d}.bin", f"state_{steps:08d}_00000.bin"]:
        (replay / f).unlink()
    q = run(data_args(byte_data) + COMMON + ["-o", replay, "-x", steps, "--logit-alarm-above", x,
                                              "--logit-alarm-cooldown", 1, "--logit-alarm-keep", 1,
                                              "--keep-checkpoints", 1, "-y", 1])
    assert "resumed from" in q.stdout and f"at step {flagged[-1]}" in q.stdout
    assert "logit alarm at step" not in q.stdout
    assert_same_run(alarm, replay, steps)
    assert [r.get("logit_alarm") for r in train_records(alarm / "metrics.jsonl")] == \
           [r.get("logit_alarm") for r in train_records(replay / "metrics.jsonl")]
    # --logit-alarm-keep 0 pins every alarm checkpoint
    every = tmp_path / "every"
    run(data_args(byte_data) + COMMON + ["-o", every, "-x", steps, "--logit-alarm-above", x,
                                          "--logit-alarm-cooldown", 1, "--logit-alarm-keep", 0, "--keep-checkpoints", 1])
    assert sorted(int(f.name[5:]) for f in every.glob("DONE_*")) == sorted(set(flagged) | {steps})


def test_logit_alarm_z_rule_waits_for_a_full_window(byte_data, tmp_path):
    """--logit-alarm Z: nothing can be flagged before --spike-window steps of history; the z in the
    record is (M - mean) / std over the previous W maxima, recomputed here from logit_stats.jsonl."""
    out, w, z = tmp_path / "z", 4, 0.5
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 14, "--logit-alarm", z, "--spike-window", w])
    maxima = {s: max(m)[0] for s, m in step_maxima(out).items()}
    recs = {r["step"]: r for r in train_records(out / "metrics.jsonl")}
    n_flagged = 0
    for s in sorted(recs):
        prev = [maxima[t] for t in range(s - w, s) if t >= 1]
        if len(prev) < w:
            assert "logit_alarm" not in recs[s]
            continue
        zs = (maxima[s] - np.mean(prev)) / np.std(prev)
        assert ("logit_alarm" in recs[s]) == (zs > z), f"step {s}: z {zs}"
        if "logit_alarm" in recs[s]:
            n_flagged += 1
            assert abs(recs[s]["logit_alarm"]["z"] - zs) < 1e-3 * max(1.0, abs(zs))
    assert n_flagged > 0, "with Z = 0.5 some step should be flagged; the test would show nothing"


def test_resume_switching_the_alarm_on_and_off(byte_data, tmp_path):
    """A checkpoint without the alarm's state section resumes with the alarm on (its window starts
    empty), and one with the section resumes with the alarm off; the training is unchanged by both."""
    ref, d = tmp_path / "ref", tmp_path / "d"
    base = data_args(byte_data) + COMMON + ["-n", 4, "--keep-checkpoints", 0]
    run(base + ["-o", ref, "-x", 12])
    run(base + ["-o", d, "-x", 4])                                                   # no alarm
    p = run(base + ["-o", d, "-x", 8, "-y", 1, "--logit-alarm-above", 1e-6])        # alarm on: step 5 crosses
    assert "logit alarm at step 5" in p.stdout
    run(base + ["-o", d, "-x", 12, "-y", 1, "--logit-alarm-above", 0])              # alarm off again
    assert [r["loss"] for r in train_records(ref / "metrics.jsonl")] == \
           [r["loss"] for r in train_records(d / "metrics.jsonl")]
    assert (ref / "model_00000012.bin").read_bytes() == (d / "model_00000012.bin").read_bytes()
    assert [r["step"] for r in train_records(d / "metrics.jsonl") if "logit_alarm" in r] == [5]  # edge-triggered
