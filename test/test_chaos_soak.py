"""The chaos soak (scripts/chaos_soak.py, docs/reliability.md "Chaos soak") in its quick mode, and the
end-to-end regression tests of what it found:

- the quick soak: a tiny run driven to its last step through about 40 random kills, signals, full
  disks and damaged checkpoints, equal to the uninterrupted run byte for byte (timings masked), no
  temporary file left; a failure names the seed that reproduces it (CHAOS_SOAK_SEED picks one);
- a killed run's temporary files (checkpoint files, config.json, config.toml, the JSONL files) are
  removed by the next run on the directory, others' are left;
- a flipped bit in the newest checkpoint's header (a model field that keeps the parameter count, a
  reserved field) makes -y 1 fall back to the previous checkpoint and finish bit-identically, instead
  of refusing the run as another model's;
- the soak's bookkeeping of pruned checkpoints, and its following of the trainer's advice when every
  checkpoint is damaged (the trainer's real error line).

The soak runs in its own process group and is killed as a group when it fails or times out.
"""
import os
import signal
import subprocess
import sys

import pytest

from run_helpers import BIN, REPO, TINY, assert_same_run, data_args, run

SOAK = REPO / "scripts" / "chaos_soak.py"
BASE = TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 5, "-m", 2, "-s", 0, "--logit-stats-every", 1]


def test_quick_chaos_soak(tmp_path):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    seed = os.environ.get("CHAOS_SOAK_SEED")
    # --disk fsize: no tmpfs mount that a killed test could leave behind (the long soak uses tmpfs as root)
    cmd = [sys.executable, str(SOAK), "--quick", "--disk", "fsize", "--work", str(tmp_path / "soak"), "--json",
           str(tmp_path / "c.json")]
    p = subprocess.Popen(cmd + (["--seed", seed] if seed else []), cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None or p.returncode != 0:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the soak and any trainer it started
            except ProcessLookupError:
                pass
            p.wait()
    assert p.returncode == 0, f"{err}\n{out[-3000:]}"
    import json
    counts = json.loads((tmp_path / "c.json").read_text())
    assert counts["ok"] and sum(counts["interruptions"].values()) >= 40, counts
    assert counts["episodes_byte_identical"] == counts["episodes"] >= 1, counts


def test_a_killed_runs_temporaries_are_removed(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + BASE + ["-o", out, "-x", 6, "-n", 3])
    ours = ["config.json.tmp.AbC123", "config.toml.tmp.dEf456", "metrics.jsonl.tmp.gHi789",
            "logit_stats.jsonl.tmp.jKl012", "model_00000006.bin.tmp.mNo345", "state_00000003_00000.bin.tmp.pQr678",
            "DONE_00000006.tmp.sTu901", "model_00000020.bin.tmp.vWx234"]
    others = ["eval.json.tmp.yZa567", "notes.txt.tmp.bCd890"]  # --eval-only's, a user's
    for n in ours + others:
        (out / n).write_text("x")
    run(data_args(byte_data) + BASE + ["-o", out, "-x", 7, "-n", 3, "-y", 1])
    assert sorted(p.name for p in out.iterdir() if ".tmp." in p.name) == sorted(others)


@pytest.mark.parametrize("victim, index, value", [("model", 9, 9), ("model", 200, 1), ("state", 100, 7)])
def test_a_flipped_header_field_falls_back(byte_data, tmp_path, victim, index, value):
    """Header field `index` of the newest checkpoint's model or state file set to `value` (window 8 -> 9:
    the parameter count stays; reserved fields are 0)."""
    ref, out = tmp_path / "ref", tmp_path / "run"
    run(data_args(byte_data) + BASE + ["-o", ref, "-x", 9, "-n", 3])
    run(data_args(byte_data) + BASE + ["-o", out, "-x", 6, "-n", 3])
    path = out / ("model_00000006.bin" if victim == "model" else "state_00000006_00000.bin")
    b = bytearray(path.read_bytes())
    b[4 * index:4 * index + 4] = int(value).to_bytes(4, "little", signed=True)
    path.write_bytes(bytes(b))
    p = run(data_args(byte_data) + BASE + ["-o", out, "-x", 9, "-n", 3, "-y", 1], check=False)
    assert p.returncode == 0, p.stderr
    assert "warning: checkpoint step 6 is damaged" in p.stderr, p.stderr
    assert "resumed from" in p.stdout and "at step 3" in p.stdout, p.stdout[:1500]
    assert_same_run(ref, out, 9)


def test_the_soak_allows_a_prune_whose_newer_checkpoints_it_damaged_later(tmp_path):
    """The bookkeeping behind a CI failure at aa6f463 (seed 946412927): with --keep-checkpoints 2 the
    trainer deleted checkpoint 7 while 27 and 30 were complete; the soak then damaged 27 and 30, and
    called 7 "reported complete, destroyed". The check after the deleting round sees the deletion with
    two newer complete checkpoints: allowed, whatever the soak damages later. A deletion without two
    newer complete ones, or with --keep-checkpoints 0, stays a failure."""
    import hashlib
    import importlib.util
    import types
    spec = importlib.util.spec_from_file_location("chaos_soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    fake = types.SimpleNamespace(ranks=1, ref_ckpt={}, forget_repaired=soak.Soak.forget_repaired)
    trainer = types.SimpleNamespace(stdout=lambda: "", stderr=lambda: "")

    def run_dir(name, steps):
        out = tmp_path / name
        out.mkdir()
        for s in steps:
            for f in soak.ckpt_files(out, s, 1):
                f.write_bytes(b"%d" % s)
            (out / f"DONE_{s:08d}").write_text("")
        return out

    def reported_7(keep):
        return {"keep": keep, "reported": {7: ["sha of 7"]}, "damaged": {}}

    out = run_dir("pruned", [27, 30])
    st = reported_7(2)
    soak.Soak.check_checkpoints(fake, trainer, out, st)  # the round that wrote 27 and 30 and deleted 7
    (out / "model_00000027.bin").write_bytes(b"flipped")  # the soak's next faults: 27 flipped, 30 unmarked
    st["damaged"][27] = {"model_00000027.bin": (b"27", hashlib.sha256(b"flipped").digest())}
    (out / "DONE_00000030").unlink()
    st["damaged"][30] = {"DONE_00000030": (b"", None)}
    soak.Soak.check_checkpoints(fake, trainer, out, st)
    for name, keep, steps in (("keep0", 0, [27, 30]), ("one_newer", 2, [30])):
        with pytest.raises(soak.SoakFailure, match="checkpoint 7, reported complete, was destroyed"):
            st = reported_7(keep)
            st["damaged"] = {s: {f"DONE_{s:08d}": (b"", None)} for s in steps}
            out = run_dir(name, steps)
            for s in steps:
                (out / f"DONE_{s:08d}").unlink()
            soak.Soak.check_checkpoints(fake, trainer, out, st)


def test_the_soak_allows_the_retirement_of_a_checkpoint_it_damaged_only(tmp_path):
    """-y 1 renames the marker of a damaged step it fell back past to DAMAGED_ (llmc/io/checkpoint_dir.h):
    that step is no longer the run's. Allowed for a step the soak damaged, even after its damage is
    restored; a failure for a reported step the soak did not damage (a good checkpoint retired)."""
    import hashlib
    import importlib.util
    import types
    spec = importlib.util.spec_from_file_location("chaos_soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    fake = types.SimpleNamespace(ranks=1, ref_ckpt={}, forget_repaired=soak.Soak.forget_repaired)
    trainer = types.SimpleNamespace(stdout=lambda: "", stderr=lambda: "")

    def run_dir(name):
        out = tmp_path / name
        out.mkdir()
        for s in (4, 8):
            for f in soak.ckpt_files(out, s, 1):
                f.write_bytes(b"%d" % s)
        (out / "DONE_00000004").write_text("")
        (out / "DAMAGED_00000008").write_text("")  # retired by the trainer's fallback to step 4
        return out

    out = run_dir("damaged")
    st = {"keep": 0, "reported": {4: [soak.sha(f) for f in soak.ckpt_files(out, 4, 1)], 8: ["sha of 8"]},
          "damaged": {8: {"model_00000008.bin": (b"8", hashlib.sha256(b"8").digest())}}}
    soak.Soak.check_checkpoints(fake, trainer, out, st)
    assert 8 not in st["reported"] and 4 in st["reported"]
    st["damaged"].clear()  # the soak's user restored the files: the retired step stays retired, no failure
    soak.Soak.check_checkpoints(fake, trainer, out, st)
    out = run_dir("good")
    st = {"keep": 0, "reported": {8: ["sha of 8"]}, "damaged": {}}
    with pytest.raises(soak.SoakFailure, match="checkpoint 8 was retired .DAMAGED_00000008., but the soak did not"):
        soak.Soak.check_checkpoints(fake, trainer, out, st)
    # a CI failure (seed 208011478): the run retired step 8, wrote it again (which removes DAMAGED_) and was
    # killed before its DONE_: no marker at all, the damage gone with the file; the trainer's note tells
    out = run_dir("rewritten")
    (out / "DAMAGED_00000008").unlink()
    (out / "model_00000008.bin").write_bytes(b"written again")
    note = "note: -y 1: the damaged checkpoint of step 8 is left behind (this run continues from step 4): ..."
    noted = types.SimpleNamespace(stdout=lambda: "", stderr=lambda: note + "\n")
    st = {"keep": 0, "reported": {4: [soak.sha(f) for f in soak.ckpt_files(out, 4, 1)], 8: ["sha of 8"]},
          "damaged": {8: {"model_00000008.bin": (b"8", hashlib.sha256(b"8").digest())}}}
    soak.Soak.check_checkpoints(fake, noted, out, st)
    assert 8 not in st["reported"] and st["damaged"] == {}


def test_the_soak_follows_the_trainers_advice_when_every_checkpoint_is_damaged(byte_data, tmp_path):
    """The soak's user follows each error's advice. A CI failure at 73813f5 (seed 993419360): a bit flip
    damaged the only complete checkpoint, and the trainer's error ("restore them from a copy and resume
    again", since 4ce8f28) was one the soak did not recognise. Here the trainer's real line for that
    case goes to Soak.check_exit: it restores the damaged file and asks for another round."""
    import importlib.util
    import types
    spec = importlib.util.spec_from_file_location("chaos_soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(soak)
    out = tmp_path / "run"
    run(data_args(byte_data) + BASE + ["-o", out, "-x", 3, "-n", 3])
    state = out / "state_00000003_00000.bin"
    good = state.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x10
    state.write_bytes(bytes(bad))
    p = run(data_args(byte_data) + BASE + ["-o", out, "-x", 6, "-n", 3, "-y", 1], check=False)
    assert p.returncode == 1 and "all 1 complete checkpoints are damaged" in p.stderr, p.stderr
    fake = types.SimpleNamespace(ranks=1, counts={"user_actions": {}})
    fake.action = lambda what: soak.Soak.action(fake, what)
    trainer = types.SimpleNamespace(stdout=lambda: p.stdout, stderr=lambda: p.stderr)
    st = {"damaged": {3: {state.name: (good, None)}}}
    assert soak.Soak.check_exit(fake, trainer, "flip", 1, out, st) is False
    assert state.read_bytes() == good and st["damaged"] == {}
    assert fake.counts["user_actions"] == {"restore damaged checkpoint files": 1}
