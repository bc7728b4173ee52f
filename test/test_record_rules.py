"""The run record's rules end to end, with the real binary on test_e2e's byte-level data and TINY model
(docs/training.md "Resuming and forking"):
  - a record never sets the machine (--threads, --device): not by -y 1, --config RUN/config.json or
    --config RUN/config.toml (an older one that holds threads= gets a note);
  - the end-of-run summary counts the tokens actually trained, each step at the -d then in effect;
  - config.json's history holds only what trained: a resume that trained nothing leaves no trace of
    its setting once another resume at the same step changes it, or changes it back;
  - -i/-j are recorded as absolute paths, so a run resumes from any directory; a relative record
    (older versions) fails naming the path it looked for;
  - command-line mistakes CLI11 would misreport, and a model flag in a fork: one error line each;
  - the run header says "1 thread" and names every stabilizer that is on.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from run_helpers import BIN, REPO, TINY, data_args, dir_hashes, read_jsonl, run

# constant LR and no samples: short runs whose only outputs are the ones looked at
COMMON = TINY + ["-k", "constant", "-u", 0, "-l", "2e-3", "-v", 0, "-s", 0, "--logit-stats-every", 0]


def run_in(cwd, args, env=None, check=True):
    """run() from another working directory and with another environment."""
    p = subprocess.run([str(BIN.resolve()), "--device", "cpu"] + [str(a) for a in args], cwd=cwd,
                       capture_output=True, text=True, timeout=300, env=env)
    if check and p.returncode != 0:
        pytest.fail(f"train_gpt2_ls {args} failed ({p.returncode}):\n{p.stderr}")
    return p


def summary(p):
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("done: ")]
    assert len(lines) == 1, p.stdout
    return lines[0]


def notes(p):
    return [ln for ln in p.stderr.splitlines() if ln.startswith("note: resuming")]


def history(out):
    return json.loads((out / "config.json").read_text()).get("history")


def one_error_line(p):
    err = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(err) == 1 and err[0].startswith("error: "), p.stderr
    return err[0]


def test_a_record_never_sets_the_thread_count(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2])  # TINY has --threads 1
    toml = (out / "config.toml").read_text()
    assert "threads" not in toml and "device" not in toml
    assert json.loads((out / "config.json").read_text())["train"]["threads"] == 1  # recorded all the same
    old = tmp_path / "old.toml"
    old.write_text(toml + "threads=1\n")  # as versions before wrote config.toml
    env = dict(os.environ, OMP_NUM_THREADS="3")
    for args in (["-o", out, "-y", 1, "-x", 3], ["--config", out / "config.json", "-o", tmp_path / "a", "-x", 1],
                 ["--config", old, "-o", tmp_path / "b", "-x", 1]):
        p = run_in(REPO, args, env)
        assert p.stdout.startswith("train_gpt2_ls | device cpu (3 threads, "), (args, p.stdout[:200])
    p = run_in(REPO, ["--config", old, "-o", tmp_path / "c", "-x", 1], env)
    assert f"note: config file {old}: threads=1 is not taken: --threads describes the machine" in p.stderr, p.stderr
    pdl = tmp_path / "pdl.toml"
    pdl.write_text(toml + "pdl=1\n")  # each machine flag's note names that flag
    p = run_in(REPO, ["--config", pdl, "-o", tmp_path / "e", "-x", 1], env)
    assert f"note: config file {pdl}: pdl=1 is not taken: --pdl describes the machine" in p.stderr, p.stderr
    assert json.loads((tmp_path / "e" / "config.json").read_text())["train"]["pdl"] == "auto"  # the default, not the file's
    p = run_in(REPO, ["--config", old, "-o", tmp_path / "d", "-x", 1, "--threads", 2], env)
    assert p.stdout.startswith("train_gpt2_ls | device cpu (2 threads, ")


def test_a_record_of_the_integer_cuda_graph_still_reads(byte_data, tmp_path):
    """Runs recorded before --cuda-graph and --pdl took auto hold "cuda_graph": 0 (or 1) and "pdl": 0:
    they resume, fork, take --config and evaluate as before, and the record's values set nothing (a
    record never sets the machine): the new run records its own --cuda-graph and --pdl."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2, "-n", 1])
    rec = json.loads((out / "config.json").read_text())
    assert rec["train"]["cuda_graph"] == "auto" and rec["train"]["pdl"] == "auto"
    rec["train"]["cuda_graph"] = 0  # as versions before wrote them
    rec["train"]["pdl"] = 0
    (out / "config.json").write_text(json.dumps(rec, indent=1))
    run(["-o", out, "-y", 1, "-x", 3])
    assert json.loads((out / "config.json").read_text())["train"]["cuda_graph"] == 0  # the record is the run's
    for args, new in ([["--fork-from", out / "model_00000002.bin", "-o", tmp_path / "fork", "-x", 3], "fork"],
                      [["--config", out / "config.json", "-o", tmp_path / "cfg", "-x", 1, "--cuda-graph", "0"], "cfg"]):
        run(args)
        assert json.loads((tmp_path / new / "config.json").read_text())["train"]["cuda_graph"] == \
            ("0" if "--cuda-graph" in args else "auto")
        assert json.loads((tmp_path / new / "config.json").read_text())["train"]["pdl"] == "auto"
    p = run(["--eval-only", "-e", out / "model_00000003.bin"] + data_args(byte_data)[2:])
    assert "val loss" in p.stdout or "loss" in p.stdout, p.stdout[-1000:]


def test_the_summary_counts_the_tokens_trained_at_each_d(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2])  # B 4 x T 32: 128 tokens a step
    p = run(["-o", out, "-y", 1, "-x", 4, "-d", 256, "-n", 1])
    assert summary(p).startswith("done: step 4 (2 in this run) | 768 tokens |"), summary(p)  # 2*128 + 2*256
    fork = tmp_path / "fork"
    p = run(["--fork-from", out / "model_00000003.bin", "-o", fork, "-x", 5, "-d", 128])
    assert json.loads((fork / "config.json").read_text())["forked_from"]["tokens"] == 2 * 128 + 256
    assert summary(p).startswith("done: step 5 (2 in this run) | 768 tokens |"), summary(p)  # 512 + 2*128


def test_the_history_holds_only_what_trained(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 4])
    p = run(["-o", out, "-y", 1, "-x", 4, "-l", "1e-3"])  # a resume that trains nothing records nothing
    assert "note: the checkpoint's step 4 is not below -x 4; nothing to train" in p.stderr
    assert "nothing to train" not in p.stdout  # a diagnostic: stderr only
    assert "note: --learning-rate 0.001 (was 0.002) is not recorded: no step is trained " \
        "(config.json unchanged)" in p.stderr and notes(p) == []
    assert history(out) is None
    p = run(["-o", out, "-y", 1, "-x", 6, "-l", "3e-3"])
    assert notes(p) == ["note: resuming at step 4 with --max-steps 6 (was 4)",
                        "note: resuming at step 4 with --learning-rate 0.003 (was 0.002)"]
    assert history(out) == [{"step": 4, "flag": "--max-steps", "old": 4, "new": 6},
                            {"step": 4, "flag": "--learning-rate", "old": 0.002, "new": 0.003}]
    # set at step 6, its step 7 rolled back (the checkpoint of step 7 lost), then set back to what
    # trained: no entry for it
    run(["-o", out, "-y", 1, "-x", 7, "-l", "1e-4"])
    (out / "DONE_00000007").unlink()
    p = run(["-o", out, "-y", 1, "-x", 8, "-l", "3e-3"])
    assert notes(p) == ["note: resuming at step 6 with --max-steps 8 (was 6)",
                        "note: resuming at step 6 drops the history entry --learning-rate 0.0001 (was 0.003) of "
                        "step 6: no step trained with it is kept"]
    assert history(out) == [{"step": 4, "flag": "--max-steps", "old": 4, "new": 6},
                            {"step": 4, "flag": "--learning-rate", "old": 0.002, "new": 0.003},
                            {"step": 6, "flag": "--max-steps", "old": 6, "new": 8}]


def test_a_run_resumes_from_another_directory(byte_data, tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    shutil.copytree(byte_data, work / "data")
    elsewhere.mkdir()
    run_in(work, ["-i", "data/train_*.bin", "-j", "./data/val_*.bin"] + COMMON + ["-o", "run", "-x", 2])
    conf = json.loads((work / "run" / "config.json").read_text())
    assert conf["train"]["train_data"] == f"{work}/data/train_*.bin"
    assert conf["train"]["val_data"] == f"{work}/data/val_*.bin"
    p = run_in(elsewhere, ["-o", work / "run", "-y", 1, "-x", 3])
    assert summary(p).startswith("done: step 3 (1 in this run)"), summary(p)
    # a record with a relative path (older versions): the error names the path looked for
    conf = json.loads((work / "run" / "config.json").read_text())
    conf["train"]["train_data"] = "data/train_*.bin"
    (work / "run" / "config.json").write_text(json.dumps(conf))
    before = dir_hashes(work / "run")
    line = one_error_line(run_in(elsewhere, ["-o", work / "run", "-y", 1, "-x", 4], check=False))
    assert f"'data/train_*.bin' (relative to the current directory: {elsewhere}/data/train_*.bin)" in line, line
    assert dir_hashes(work / "run") == before


@pytest.mark.parametrize("args, expect", [
    (["-lr", "1e-3"], "error: -lr: this trainer spells it -l/--learning-rate"),
    (["-nk", "4"], "error: -nk: this trainer spells it --keep-checkpoints"),
    # a new-user trial: llm.c's flag with its value attached, and '=' after a one-letter flag, were read as
    # another flag's value ("--checkpoint-every ... not 'k2'", "--val-batches ... not '=1'")
    (["-nk2"], "error: -nk2: this trainer spells it --keep-checkpoints"),
    (["-m=1"], "error: -m=1: a short flag's value follows a space (-m 1); '=' goes with the long name "
     "(--val-batches=1)"),
    (["-h", "1"], "error: -h is --help here; llm.c's -h 1 (HellaSwag evaluation) has no counterpart"),
    (["-y", "2"], "error: -y/--resume must be 0 or 1 (got 2)"),
    (["--config", "{data}"], "error: --config {data} is a directory; give a file: {data}/config.json"),
    (["-i", "{data}/train_000000.bin", "{data}/train_000001.bin"],
     "error: -i takes one value, but 1 more path(s) follow {data}/train_000000.bin ({data}/train_000001.bin): "
     "the shell expanded a glob; quote it"),
    (["-x", "1e3"], "error: --max-steps takes an integer in digits (e.g. 1000, not 1e3), not '1e3'"),
    (["-b", "4.0"], "error: --batch-size takes an integer in digits"),
    # trial 3 F3: digits, but beyond the flag's type: not "takes an integer in digits"
    (["-x", "3000000000"], "error: --max-steps 3000000000 is too large: it takes an integer in "
     "-2147483648..2147483647; fix its value"),
    (["--vocab", "-3000000000"], "error: --vocab -3000000000 is too small: it takes an integer in "
     "-2147483648..2147483647"),
    # a 64-bit flag's text past its range was clamped (to 2^63-1) before the checks, which named the clamped value
    (["-d", "99999999999999999999"], "error: --total-batch-size: 99999999999999999999 is outside "
     "-9223372036854775808..9223372036854775807; give an integer in that range"),
    # trial 3 F27: a thousands separator is not "given more than once"; a flag given twice still is
    (["-x", "1,000"], "error: --max-steps takes an integer in digits (e.g. 1000, not 1e3), not '1,000' (a comma is "
     "not read as a thousands separator: write 1000, not 1,000)"),
    # (a new-user trial) the repeated flag's values were quoted as CLI11 joins them ('1,1e3'): the last, which is
    # taken, is named, and each value given
    (["-x", "1e3", "-x", "2e3"], "error: --max-steps takes an integer in digits (e.g. 1000, not 1e3), not '2e3' "
     "(given 2 times: '1e3', '2e3'; the last one given is taken); fix its value"),
    (["-x", "1", "-x", "1e3"], "error: --max-steps takes an integer in digits (e.g. 1000, not 1e3), not '1e3' "
     "(given 2 times: '1', '1e3'; the last one given is taken); fix its value"),
    (["-x", "5", "-x", "99999999999"], "error: --max-steps 99999999999 is too large: it takes an integer in "
     "-2147483648..2147483647"),
    # a review: the comma of a repeated flag's own value is still the reason; a float's is a decimal comma
    (["-x", "5", "-x", "1,000"], "error: --max-steps takes an integer in digits (e.g. 1000, not 1e3), not '1,000' "
     "(a comma is not read as a thousands separator: write 1000, not 1,000)"),
    (["-l", "1,5"], "error: --learning-rate takes a number (e.g. 6e-4), not '1,5' (a comma is not read as a "
     "decimal point: write 1.5, not 1,5)"),
    (["-i", "{data}/*.bin"], "error: the shard pattern '{data}/*.bin' matches {data}/tokenizer.bin, which is not a "
     "token shard"),
    # trial 5 finding 12: the 0/1 flags are integers (llm.c's -y 1); a word is "0 or 1", not "in digits"; a code
    # review: in the words of the flag's range check (-y 2), not in other words for a value that is not an integer
    (["--bias", "false"], "error: --bias must be 0 (no biases, the paper's bias=False) or 1 (GPT-2's biases) (got false)"),
    # trial 6: an on/off flag's value after a space was "not expected: false", naming no fix
    (["--untie-embeddings", "false"], "error: --untie-embeddings false: an on/off flag takes its value after '=' "
     "(--untie-embeddings=false); --untie-embeddings alone is on"),
    (["--qk-norm", "0"], "error: --qk-norm 0: an on/off flag takes its value after '=' (--qk-norm=0)"),
    (["--shuffle", "false"], "error: --shuffle must be 0 or 1 (got false)"),
    (["-y", "true"], "error: -y/--resume must be 0 or 1 (got true); -y 1 resumes the run in -o"),
    (["-y", "1.0"], "error: -y/--resume must be 0 or 1 (got 1.0); -y 1 resumes the run in -o"),
    (["--cuda-graph", "on"], "error: --cuda-graph must be auto, 0 or 1 (got on)"),
    (["--shuffle", "3000000000"], "error: --shuffle must be 0 or 1 (got 3000000000)"),
    # a code review: CLI11 read integers with strtoll's base 0, so "-y 0x1" was -y 1 and "-x 0x10" 16 steps
    (["-y", "0x1"], "error: -y/--resume must be 0 or 1 (got 0x1); -y 1 resumes the run in -o"),
    (["--shuffle", "0X1"], "error: --shuffle must be 0 or 1 (got 0X1)"),
    (["-x", "0x10"], "error: --max-steps takes an integer in digits (e.g. 1000, not 1e3), not '0x10'; fix its value"),
    (["--seed", "0x10"], "error: --seed takes an integer in digits (e.g. 1000, not 1e3), not '0x10'; fix its value"),
    # and strtold read a float flag's hexadecimal float ("-l 0x1p-10" was 2^-10): refused in the same words
    (["-l", "0x1p-10"], "error: --learning-rate takes a number (e.g. 6e-4), not '0x1p-10'; fix its value"),
    (["--qk-clip", "+0X1p4"], "error: --qk-clip takes a number (e.g. 6e-4), not '+0X1p4'; fix its value"),
    # trial 5 finding 12: nanoGPT's names with no flag here are refused naming what does their job; the unknown
    # flag comes first (CLI11 printed its value first: "not expected: 6e-5 --min_lr")
    (["-l", "6e-4", "--min_lr", "6e-5"], "error: unknown flag --min_lr; did you mean --final-lr-frac? (nanoGPT's "
     "min_lr: -q is the final lr as a fraction of -l: min_lr / learning_rate)"),
    (["--dropout", "0.1"], "error: unknown flag --dropout; nanoGPT's dropout: this trainer has no dropout"),
    (["--lr_decay_iters", "600"], "error: unknown flag --lr_decay_iters; nanoGPT's lr_decay_iters: -k cosine "
     "(linear, wsd) decays from the end of warmup to the last step, -x, with no constant tail at the final lr; set "
     "-x to the decay span"),
    (["--decay_lr", "False"], "error: unknown flag --decay_lr; nanoGPT's decay_lr: False is a constant lr without "
     "warmup: -k constant -u 0"),
    (["--init_from=resume"], "error: unknown flag --init_from; nanoGPT's init_from: resume is -y 1"),
    (["--always_save_checkpoint"], "error: unknown flag --always_save_checkpoint; nanoGPT's "
     "always_save_checkpoint: checkpoints do not wait for a better validation loss: -n N"),
    (["--compile", "False", "--dropout", "0.0"], "error: unknown flag --compile; nanoGPT's compile: there is no "
     "torch.compile here (the kernels are compiled C++/CUDA); drop it (also unknown: --dropout)"),
    (["--bogus-setting", "3"], "error: unknown flag --bogus-setting; run with --help for the flags"),
    # a new-user trial: other trainers' spellings too far from ours got only the pointer to --help
    (["--lr", "1e-3"], "error: unknown flag --lr; did you mean --learning-rate?"),
    (["--softcap", "30"], "error: unknown flag --softcap; did you mean --attn-softcap?"),
])
def test_mistakes_get_one_line(byte_data, tmp_path, args, expect):
    out = tmp_path / "run"
    p = run([a.format(data=byte_data) for a in args] + ["-o", out], check=False)
    assert one_error_line(p).startswith(expect.format(data=byte_data)), p.stderr
    assert not out.exists()


def test_a_flag_under_both_its_names_in_a_config_file_is_refused(byte_data, tmp_path):
    """x=6 beside max-steps=3 (or l= beside learning-rate=) is refused as a key given twice is, whichever comes
    first (CLI11 would keep the first)."""
    base = f'train-data="{byte_data}/train_*.bin"\nlayers=2\nchannels=32\nheads=4\nbatch-size=4\nseq-len=32\n'
    for extra, names in (("max-steps=3\nx=6\n", "'max-steps' and 'x'"), ("x=5\nmax-steps=3\n", "'x' and 'max-steps'"),
                         ("learning-rate=0.0006\nl=0.003\nx=1\n", "'learning-rate' and 'l'")):
        conf = tmp_path / "c.toml"
        conf.write_text(base + extra)
        line = one_error_line(run(["--config", conf, "-o", tmp_path / "run"], check=False))
        assert f"{conf}: {names} are one flag" in line and "keep one" in line, line
        assert not (tmp_path / "run").exists()
    # the same key twice with another between (CLI11 keeps them apart): said as such (a new-user trial read
    # "'batch-size' and 'batch-size' are one flag")
    conf.write_text(base + "max-steps=3\nseed=1\nmax-steps=6\n")
    line = one_error_line(run(["--config", conf, "-o", tmp_path / "run"], check=False))
    assert line == (f"error: config file {conf}: the key 'max-steps' is given twice; every flag takes one value: "
                    "keep one"), line


def test_a_fork_refused_for_its_data_order_says_fork(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2])
    line = one_error_line(run(["--fork-from", out / "model_00000002.bin", "-o", tmp_path / "fork", "-t", 16],
                              check=False))
    assert "fork with the -b/-t, process count, shuffle, sampler, seed and shards of the checkpoint's run" in line
    assert "resume" not in line, line


def test_a_model_flag_in_a_fork_and_t_past_a_checkpoints_positions(byte_data, tmp_path):
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 2])
    ck = out / "model_00000002.bin"
    line = one_error_line(run(["--fork-from", ck, "-o", tmp_path / "fork", "--layers", 3], check=False))
    assert line == (f"error: --fork-from {ck}: --layers differs from the checkpoint's model (layers 2 there, 3 "
                    "here); a fork continues the checkpoint's weights, so model flags cannot change in a fork: "
                    "drop --layers")
    assert not (tmp_path / "fork").exists()
    # a stabilizer that is a model flag: the error names the ones a fork (or -y 1) can switch on
    line = one_error_line(run(["--fork-from", ck, "-o", tmp_path / "fork", "--attn-softcap", 5], check=False))
    assert line == (f"error: --fork-from {ck}: --attn-softcap differs from the checkpoint's model (attn-softcap 0 "
                    "there, 5 here); a fork continues the checkpoint's weights, so model flags cannot change in a "
                    "fork: drop --attn-softcap (the stabilizers a fork can switch on are training flags: "
                    "--qk-clip, --z-loss, --grad-clip, --skip-spikes)")
    assert not (tmp_path / "fork").exists()
    line = one_error_line(run(["-o", out, "-y", 1, "-x", 3, "--qk-norm"], check=False))
    assert line == (f"error: {ck}: checkpoint is for a different model (checkpoint vs this run: qk-norm 0 vs 1); "
                    "resume with the same model flags or use another output directory (the stabilizers -y 1 can "
                    "switch on are training flags: --qk-clip, --z-loss, --grad-clip, --skip-spikes)")
    # on a QK-norm model --qk-clip is refused, so the list leaves it out
    qn = tmp_path / "qknorm"
    run(data_args(byte_data) + COMMON + ["-o", qn, "-x", 1, "--qk-norm"])
    line = one_error_line(run(["-o", qn, "-y", 1, "-x", 2, "--attn-softcap", 5], check=False))
    assert line.endswith("(the stabilizers -y 1 can switch on are training flags: --z-loss, --grad-clip, "
                         "--skip-spikes)"), line
    p = run(["--eval-only", "-e", ck, "-t", 128], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines()[-1] == (
        f"error: -t 128 exceeds the model's --max-seq-len 64, which the checkpoint -e {ck} fixes; use -t <= 64")


def test_notes_write_a_near_not_given_as_the_split_it_made(byte_data, tmp_path):
    """trial 6 F10: a --near given on resume or in a fork of a run without one is noted with the split the run
    made (the window on the CPU), not as JSON null."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-o", out, "-x", 1])
    p = run(["--fork-from", out / "model_00000001.bin", "-o", tmp_path / "fork", "-x", 2, "--near", 4])
    assert "note: forking at step 1 with --near 4 (was not given: the window, 8)" in p.stderr.splitlines(), p.stderr
    p = run(["-o", out, "-y", 1, "-x", 2, "--near", 2])
    assert [n for n in notes(p) if "--near" in n] == ["note: resuming at step 1 with --near 2 (was not given: the "
                                                      "window, 8)"], p.stderr
    # the note on a config.toml beside a record that changed --near (the backend not known yet: both)
    p = run(["--config", out / "config.toml", "-o", tmp_path / "again", "-x", 1])
    assert ("the run changed settings while it trained (" + str(out / "config.json") + "): --near (not given: the "
            "window, 8, on the CPU, no split on CUDA at the start, 2 at the end)") in p.stderr, p.stderr


def test_the_header_says_1_thread_and_names_the_stabilizers(byte_data):
    p = run(data_args(byte_data) + COMMON + ["-x", 1, "--z-loss", "1e-4", "--qk-clip", 50, "--threads", 1])
    lines = p.stdout.splitlines()
    assert lines[0].startswith("train_gpt2_ls | device cpu (1 thread, "), lines[0]
    assert "  stabilizers: z-loss 0.0001, qk-clip 50" in lines[:6], lines[:6]
    p = run(data_args(byte_data) + COMMON + ["-x", 1])
    assert not any("stabilizers" in ln for ln in p.stdout.splitlines())


@pytest.mark.parametrize("args, expect, rates", [
    (["-k", "cosine", "-u", 3, "-q", "0.1"], "  lr: cosine: warmup 3 steps to 2.00e-03, decay over steps 4-8 to "
     "2.00e-04 (-q 0.1)", {2: 4e-3 / 3, 3: 2e-3, 4: 2e-3, 8: 2e-4}),
    (["-k", "linear", "-u", 0, "-q", "0.5"], "  lr: linear: no warmup, 2.00e-03 from step 1, decay over steps 1-8 "
     "to 1.00e-03 (-q 0.5)", {1: 2e-3, 8: 1e-3}),
    (["-k", "wsd", "-u", 2, "-q", "0", "--wsd-decay-frac", "0.5"], "  lr: wsd: warmup 2 steps to 2.00e-03, stable "
     "to step 5, decay over steps 6-8 to 0.00e+00 (-q 0) (--wsd-decay-frac 0.5)", {2: 2e-3, 5: 2e-3, 6: 4e-3 / 3,
                                                                                    8: 0.0}),
    (["-k", "constant", "-u", 2], "  lr: constant: warmup 2 steps to 2.00e-03, then 2.00e-03 to the end",
     {1: 1e-3, 2: 2e-3, 8: 2e-3}),
])
def test_the_header_names_the_whole_lr_schedule(byte_data, tmp_path, args, expect, rates):
    """A code review: the header's lr line named only the peak and the kind. It names the warmup, the final lr and
    the steps of the decay, as the steps' rates (metrics.jsonl) are."""
    out = tmp_path / "run"
    p = run(data_args(byte_data) + COMMON + ["-o", out, "-x", 8] + args)
    assert expect in p.stdout.splitlines()[:6], p.stdout.splitlines()[:6]
    lr = {r["step"]: r["lr"] for r in read_jsonl(out / "metrics.jsonl") if "lr" in r}
    assert {s: lr[s] for s in rates} == pytest.approx(rates, rel=1e-5, abs=1e-12), lr


def test_llmc_two_letter_flags_name_ours_as_docs_from_llmc_does(tmp_path):
    """Each row of docs/from_llmc.md with two-letter llm.c flags: the error names the row's flags of ours."""
    from test_from_llmc import FLAG, table_rows
    checked = 0
    for llmc, here, _ in table_rows():
        for flag in FLAG.findall(llmc):
            if len(flag) not in (2, 3) or flag == "--" or (len(flag) == 2 and FLAG.findall(here)):
                continue  # a one-letter flag of llm.c that is ours too (-i, -o, ...) is no mistake
            line = one_error_line(run([flag, "1", "-o", tmp_path / "run"], check=False))
            ours = FLAG.findall(here)
            if ours:
                assert any(f in line for f in ours) and "this trainer spells it" in line, (flag, line)
            else:
                assert "no counterpart" in line, (flag, line)
            checked += 1
    assert checked >= 16  # 12 of two letters, and llm.c's -a, -f, -w, -r (trial 3 F7)


@pytest.mark.parametrize("seed", ["-1", "-2", "18446744073709551616", "99999999999999999999"])
def test_a_seed_outside_64_bits_is_refused(byte_data, tmp_path, seed):
    """trial 3 S2: --seed out of 0..2^64-1 was wrapped (-1 = 2^64-1) or clamped (99999999999999999999 = 2^64-1)
    silently: several seeds of a sweep one run. Refused like the other integer flags; 2^64-1 itself trains."""
    out = tmp_path / "run"
    p = run(data_args(byte_data) + COMMON + ["-x", 1, "-o", out, "--seed", seed], check=False)
    assert one_error_line(p).startswith("error: --seed: " + seed + " is outside 0..18446744073709551615"), p.stderr
    assert not out.exists()
    run(data_args(byte_data) + COMMON + ["-x", 1, "--seed", "18446744073709551615"])


@pytest.mark.parametrize("value, expect", [
    ("inf", "'inf' is not a finite number"), ("-inf", "'-inf' is not a finite number"),
    ("nan", "'nan' is not a finite number"),  # was "must be >= 0"
    ("1e400", "'1e400' is not a finite number as a float (it would be inf)"),  # was taken: lr = inf
    ("1e-50", "'1e-50' is below the smallest normal float (it would be read as 0"),  # was 0 without a word
    ("1e-40", "'1e-40' is below the smallest normal float"),  # a denormal float
])
def test_a_float_flag_takes_a_finite_float(byte_data, tmp_path, value, expect):
    """trial 3 F5: -l inf / 1e400 trained with non-finite weights, -l nan was "must be >= 0", -l 1e-50 became 0
    silently. Every float flag (a training flag, a model flag, a config file's value) refuses such a value."""
    out = tmp_path / "run"
    for flag in ["-l", "--attn-softcap", "--z-loss"]:
        p = run(data_args(byte_data) + COMMON + ["-x", 1, "-o", out, flag, value], check=False)
        assert one_error_line(p).startswith("error: ") and expect in p.stderr, (flag, p.stderr)
        assert not out.exists()
    conf = tmp_path / "c.toml"
    conf.write_text(f'z-loss="{value}"\n')  # -l is on the command line (COMMON), which wins
    p = run(data_args(byte_data) + COMMON + ["-x", 1, "-o", out, "--config", conf], check=False)
    assert expect in one_error_line(p), p.stderr
    assert not out.exists()


def test_a_float_refusal_offers_0_where_the_flag_takes_it(byte_data, tmp_path):
    """(a new-user trial) `--z-loss 1e-50` was refused with "give a magnitude in [...]" alone, though 0 (off) is
    what such a value means to most; a flag whose rule refuses 0 (--eps, --spike-z, --temperature) is not offered
    it."""
    rng = "a magnitude in [1.17549435e-38, 3.40282347e+38]"
    for flag, zero in [("--z-loss", True), ("-l", True), ("--attn-softcap", True), ("--beta2", True),
                       ("--eps", False), ("--spike-z", False), ("--temperature", False)]:
        p = run(data_args(byte_data) + COMMON + ["-x", 1, flag, "1e-50"], check=False)
        line = one_error_line(p)
        assert line.endswith(f"give {'0 or ' if zero else ''}{rng}; run with --help for the flags"), (flag, line)


def test_the_smallest_normal_float_and_zero_are_taken(byte_data, tmp_path):
    p = run(data_args(byte_data) + COMMON + ["-x", 1, "-o", tmp_path / "run", "--z-loss", "1.2e-38", "-c", "0"])
    conf = json.loads((tmp_path / "run" / "config.json").read_text())
    assert conf["train"]["z_loss"] > 0 and conf["train"]["weight_decay"] == 0, conf["train"]
    assert p.returncode == 0
    # the bounds the refusal prints ("a magnitude in [1.17549435e-38, 3.40282347e+38]") are taken themselves
    bounds = re.search(r"magnitude in \[(\S+), (\S+)\]", run(data_args(byte_data) + COMMON + ["-x", 1, "--z-loss",
                                                                                        "1e-40"], check=False).stderr)
    for v in bounds.groups():
        run(data_args(byte_data) + COMMON + ["-x", 0, "--z-loss", v])


def test_y1_of_a_mistyped_o_names_the_run_it_may_mean(byte_data, tmp_path):
    """trial 3 F2 (trial 1 F3): -o out/cc -y 1 (a typo of out/c, no other flags) said "no training data"."""
    run(data_args(byte_data) + COMMON + ["-x", 1, "-o", tmp_path / "c"])
    line = one_error_line(run(["-o", tmp_path / "cc", "-y", 1, "-x", 2], check=False))
    assert line == (f"error: -y 1: {tmp_path / 'cc'} holds no run to resume (no config.json); did you mean -o "
                    f"{tmp_path / 'c'}? (to start a new run there: -i 'DIR/train_*.bin' without -y 1)"), line
    line = one_error_line(run(["-o", tmp_path / "zzzzzz", "-y", 1], check=False))
    assert "holds no run to resume (no config.json); give the -o of a run" in line, line
    assert not (tmp_path / "cc").exists() and not (tmp_path / "zzzzzz").exists()


def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(byte_data, tmp_path):
    """trial 3 F24: a data directory with a Latin-1 name trained, but config.json recorded its path with U+FFFD, so
    -y 1 and generate could not find the run's data. Refused at the start, for every path the record holds."""
    latin1 = tmp_path / os.fsdecode(b"caf\xe9")
    shutil.copytree(byte_data, latin1)
    out = tmp_path / "run"
    line = one_error_line(run(["-i", f"{latin1}/train_*.bin", "-o", out] + COMMON + ["-x", 1], check=False))
    assert line.startswith(f"error: -i '{tmp_path}/caf\\xe9/train_*.bin' is not valid UTF-8 (byte 0xe9 at offset "
                           f"{len(str(tmp_path)) + 4})"), line
    assert "rename it to a UTF-8 name" in line
    assert not out.exists()
    line = one_error_line(run(data_args(byte_data) + COMMON + ["-x", 1, "-o", latin1 / "run"], check=False))
    assert line.startswith(f"error: -o '{tmp_path}/caf\\xe9/run' is not valid UTF-8"), line
    assert not (latin1 / "run").exists()
    run(["-i", f"{latin1}/train_*.bin"] + COMMON + ["-x", 1])  # without -o nothing records it: it trains
    utf8 = tmp_path / "café"  # the same name in UTF-8 trains
    shutil.copytree(byte_data, utf8)
    run(["-i", f"{utf8}/train_*.bin", "-o", out] + COMMON + ["-x", 1])
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["train"]["train_data"] == f"{utf8}/train_*.bin"


def test_e_of_a_state_file_or_an_exported_folder_says_what_it_is(byte_data, tmp_path):
    """trial 3 F20: -e state_N_R.bin said "bad magic 20250522: not a train_gpt2_ls model"; -e of an exported HF
    folder's model.safetensors said its config.json "has no "train" object; ... restore the record of the run"."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-x", 1, "-o", out])
    state = out / "state_00000001_00000.bin"
    for extra in (["--eval-only", "-j", f"{byte_data}/val_*.bin", "-m", 1], data_args(byte_data)):
        p = run(extra + ["-e", state, "-o", tmp_path / "x"], check=False)
        line = p.stderr.strip().splitlines()[-1]  # --eval-only first says the -t, -b it took from the run
        assert p.returncode == 1 and line.startswith("error: "), p.stderr
        assert f"{state}: a training-state file (optimizer state), not a model; pass the model file " \
               f"{out}/model_00000001.bin" in line, line
    hf = tmp_path / "hf"  # as scripts/export_hf.py writes it (test_export_hf.py runs the script)
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "gpt2_ls", "architectures": ["GPT2LSForCausalLM"],
                                                "n_layer": 2}))
    (hf / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    line = one_error_line(run(["--eval-only", "-e", hf / "model.safetensors", "-j", f"{byte_data}/val_*.bin"],
                              check=False))
    assert f"-e {hf}/model.safetensors is in a Hugging Face folder exported by scripts/export_hf.py" in line, line
    assert "restore" not in line, line
    # (a new-user trial) the generator, which reads no folder around the file, said "bad magic 2552" of a
    # safetensors file and "bad magic 20240520" of a data shard; so did the trainer of a shard
    from test_generate import GEN
    loose = tmp_path / "loose.safetensors"
    header = b'{"__metadata__": {}}'.ljust(1200)  # a safetensors file: its header's length (u64), then the JSON
    loose.write_bytes(len(header).to_bytes(8, "little") + header)
    shard = sorted(byte_data.glob("train_*.bin"))[0]
    for model, said in [(loose, f"{loose}: a safetensors file (a Hugging Face export, scripts/export_hf.py), not a "
                                "model of ours; pass the model_NNNNNNNN.bin it was exported from"),
                        (shard, f"{shard}: a token shard (data, data/prepare.py's), not a model; pass a run's "
                                "model_NNNNNNNN.bin or an llm.c gpt2_*.bin")]:
        g = subprocess.run([str(GEN), "-e", str(model), "--prompt-ids", "1", "-n", "1", "--device", "cpu"],
                           capture_output=True, text=True, timeout=60)
        assert g.returncode == 1 and g.stderr.strip().splitlines()[-1] == f"error: {said}", g.stderr
    assert one_error_line(run(data_args(byte_data) + COMMON + ["-x", 1, "-e", shard], check=False)) == \
        f"error: {shard}: a token shard (data, data/prepare.py's), not a model; pass a run's model_NNNNNNNN.bin or " \
        "an llm.c gpt2_*.bin"


def test_eval_only_into_another_runs_directory_is_refused(byte_data, tmp_path):
    """(a new-user trial) --eval-only -e out/b/model_N.bin -o out/a wrote out/a/eval.json naming out/b's model,
    among out/a's run files, with no word (and out/a's own evaluation was then refused there). A run's directory
    takes the evaluations of its own checkpoints only."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        run(data_args(byte_data) + COMMON + ["-x", 1, "-o", d])
    evaluate = ["--eval-only", "-j", f"{byte_data}/val_*.bin", "-m", 1, "--threads", 1]
    before = dir_hashes(a)
    p = run(evaluate + ["-e", b / "model_00000001.bin", "-o", a], check=False)
    assert one_error_line(p) == (
        f"error: -o {a} holds a run (config.json), and -e {b / 'model_00000001.bin'} is not one of its checkpoints: "
        "the evaluation would sit among that run's files as one of its model; give -o the checkpoint's own run "
        "directory or a new directory"), p.stderr
    assert dir_hashes(a) == before
    run(evaluate + ["-e", a / "model_00000001.bin", "-o", a])
    run(evaluate + ["-e", b / "model_00000001.bin", "-o", tmp_path / "evals"])


def test_dump_logits_never_replaces_another_file(byte_data, tmp_path):
    """trial 3 D3: --dump-logits FILE wrote over any file, a checkpoint or a run's config.json included. Only an
    earlier dump of the same shape is replaced."""
    out = tmp_path / "run"
    run(data_args(byte_data) + COMMON + ["-x", 1, "-o", out])
    evaluate = ["--eval-only", "-e", out / "model_00000001.bin", "-j", f"{byte_data}/val_*.bin", "-m", 1, "-b", 2,
                "-t", 16, "--threads", 1]
    for target, expect in [("model_00000001.bin", "is a checkpoint's file"),
                           ("config.json", "exists and is not a logits dump of (2, 16, 256) (32768 bytes; it has")]:
        before = dir_hashes(out)
        p = run(evaluate + ["--dump-logits", out / target], check=False)
        assert one_error_line(p).startswith(f"error: --dump-logits {out / target}: {expect}"), p.stderr
        assert dir_hashes(out) == before
    dump = tmp_path / "logits.bin"
    run(evaluate + ["--dump-logits", dump])
    first = dump.read_bytes()
    run(evaluate + ["--dump-logits", dump])  # the same command again: its own dump is replaced
    assert dump.read_bytes() == first and len(first) == 2 * 16 * 256 * 4


def record_as_two_processes(run_dir):
    """Rewrites a one-process run's config.json (COMMON's flags) as an `mpirun -np 2` run of the same flags
    records it (B 4 x T 32 x 2 = 256 tokens per step)."""
    record = json.loads((run_dir / "config.json").read_text())
    record["train"]["world_size"] = 2
    record["derived"]["world_size"] = 2
    record["derived"]["tokens_per_step"] = 256
    (run_dir / "config.json").write_text(json.dumps(record, indent=2))
    # the checkpoints' settings fingerprints include the process count: a marker without one (an earlier
    # version's) is not checked, so the rewritten record stands for the run's
    for marker in run_dir.glob("DONE_*"):
        marker.write_text(marker.read_text().splitlines()[0] + "\n")


def test_config_of_a_run_on_the_same_processes_keeps_its_val_batches(byte_data, tmp_path):
    """The validation tokens are kept only across process counts (as the batch is): on the recorded number of
    processes a -b given is a choice of another set, and the recorded -m stays, with no note."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-x", 1, "-o", src, "-m", 2])
    p = run(["--config", src / "config.json", "-o", tmp_path / "copy", "-b", 2, "--threads", 1])
    assert "validation set" not in p.stderr, p.stderr
    assert json.loads((tmp_path / "copy" / "config.json").read_text())["train"]["val_batches"] == 2


def test_config_of_a_run_on_other_processes_keeps_its_batch(byte_data, tmp_path):
    """trial 3 S1: --config RUN/config.json of a 2-process run (-d -1: B*T*2 tokens per step), started with one
    process, trained half the tokens per step without a word. The batch is the experiment: kept with -d (gradient
    accumulation here), in one note, and recorded so that the new run's config.toml trains the same."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-x", 1, "-o", src])
    record_as_two_processes(src)
    out = tmp_path / "copy"
    p = run(["--config", src / "config.json", "-o", out, "--threads", 1])
    assert (f"note: --config {src / 'config.json'}: that run trained 256 tokens/step on 2 process(es); this run "
            "keeps that batch with -d 256") in p.stderr, p.stderr
    assert "x accum 2 x 1 process(es) = 256 tokens/step" in p.stdout
    assert json.loads((out / "config.json").read_text())["train"]["total_batch_size"] == 256
    assert "total-batch-size=256" in (out / "config.toml").read_text().replace(" ", "")
    # a batch these flags cannot divide on this process count: refused, naming the -b that keeps it
    p = run(["--config", src / "config.json", "-o", tmp_path / "odd", "-b", 3, "--threads", 1], check=False)
    lines = [ln for ln in p.stderr.splitlines() if "that run's recorded settings and model" not in ln]  # --config's
    assert p.returncode == 1 and len(lines) == 1 and not (tmp_path / "odd").exists(), p.stderr
    assert lines[0].startswith(f"error: --config {src / 'config.json'}: that run trained 256 tokens/step on "
                                        "2 process(es), which B 3 x T 32 x 1 process(es) = 96 tokens per micro-step "
                                        "cannot divide; give -b 8 (or a divisor) to keep that batch"), p.stderr


def test_config_and_eval_only_of_a_run_on_other_processes_keep_its_validation_set(byte_data, tmp_path):
    """trial 5 F3: -m counts global batches (B x T x processes tokens), so --config RUN/config.json of a 2-process
    run validated half the tokens with one process, and --eval-only -m of its checkpoint too, without a word.
    The --config copy keeps the recorded validation tokens with -m (one note, recorded); --eval-only of the
    checkpoint with the run's -m says which -m reads the run's set."""
    src = tmp_path / "src"
    run(data_args(byte_data) + COMMON + ["-x", 1, "-o", src, "-m", 2])
    record_as_two_processes(src)
    out = tmp_path / "copy"
    p = run(["--config", src / "config.json", "-o", out, "--threads", 1, "-v", 1])
    assert (f"note: --config {src / 'config.json'}: that run validated 512 tokens (-m 2 x B 4 x T 32 x 2 "
            "process(es)); this run keeps that validation set with -m 4 (B 4 x T 32 x 1 process(es) = 128 tokens "
            "per batch here)") in p.stderr, p.stderr
    assert " 4 of its " in p.stdout and "batches per validation" in p.stdout, p.stdout
    assert json.loads((out / "config.json").read_text())["train"]["val_batches"] == 4
    assert "val-batches=4" in (out / "config.toml").read_text().replace(" ", "")
    # -m given on the command line decides: no note
    p = run(["--config", src / "config.json", "-o", tmp_path / "m1", "--threads", 1, "-m", 1])
    assert "validated" not in p.stderr and json.loads((tmp_path / "m1" / "config.json").read_text())[
        "train"]["val_batches"] == 1, p.stderr
    # rows this process count cannot divide: the note names the -m that comes closest and what it reads
    p = run(["--config", src / "config.json", "-o", tmp_path / "odd", "--threads", 1, "-b", 3, "-d", 96])
    assert (f"note: --config {src / 'config.json'}: that run validated 512 tokens (-m 2 x B 4 x T 32 x 2 "
            "process(es)), which B 3 x T 32 x 1 process(es) = 96 tokens per batch cannot divide: this run validates "
            "192 (-m 2); give -m 5 for 480 tokens or -m 6 for 576") in p.stderr, p.stderr
    # --eval-only of the checkpoint with the run's -m: that -m reads half the run's set here
    p = run(["--eval-only", "-e", src / "model_00000001.bin", "-m", 2, "--threads", 1])
    assert (f"note: --eval-only -m 2 validates 256 tokens here (B 4 x T 32 x 1 process(es) per batch), but the run "
            f"of {src / 'model_00000001.bin'} validated 512 with -m 2 on 2 process(es) ({src / 'config.json'}); "
            "give -m 4 to evaluate the tokens of its validation losses") in p.stderr, p.stderr


@pytest.mark.parametrize("content, said", [
    ("heads=0", "--heads (from --config {conf}) must be >= 1 (got 0)"),
    ("channels=100\nheads=6", "--channels 100 (from --config {conf}) is not divisible by --heads 6 (from --config "
     "{conf}); pick channels = heads * head_size"),
    ("global-heads=7\nheads=6", "--global-heads 7 (from --config {conf}) must be in 0..--heads (6); use "
     "--global-heads 6 for plain MHSA"),
    ("window=-3", "--window -3 (from --config {conf}) must be >= 1 (a local head sees at least itself)"),
    ('batch-size="abc"', "--batch-size (from --config {conf}) takes an integer in digits (e.g. 1000, not 1e3), not "
     "'abc'; fix its value"),
    ('heads="x"', "--heads (from --config {conf}) takes an integer in digits"),
    ("seq-len=1e3", "--seq-len (from --config {conf}) takes an integer in digits (e.g. 1000, not 1e3), not "
     "'1e3'"),
    ("shuffle=2", "--shuffle (from --config {conf}) must be 0 or 1 (got 2)"),
    ("seed=-1", "--seed (from --config {conf}): -1 is outside 0..18446744073709551615"),
    # a new-user trial: the origin sat between the flag and its value, was missing from --gelu's and
    # --bias's own refusals, and tagged the 2^40 refusal's fix ("use smaller --layers (from --config F)/...")
    ("seq-len=99999999999", "--seq-len 99999999999 (from --config {conf}) is too large: it takes an integer in "),
    ('gelu="x"', "--gelu 'x' (from --config {conf}) is not an activation; use tanh"),
    ("bias=7", "--bias (from --config {conf}) must be 0 (no biases"),
    ("layers=100000000", "the model would have 44486400442752 parameters (--layers 100000000 (from --config {conf}), "
     "--channels 192, --vocab 256 padded to 256, --max-seq-len 2048), more than the 2^40 this trainer supports; "
     "use smaller values of them"),
])
def test_a_config_files_bad_value_names_the_file(byte_data, tmp_path, content, said):  # noqa: F811
    """(a new-user trial) a model flag's range and a value CLI11 cannot convert were refused without naming
    the --config file they came from, as the training flags' ranges did ("-b/--batch-size (from --config
    F) must be >= 1"); typed on the command line, the same value is refused without an origin."""
    conf = tmp_path / "c.toml"
    conf.write_text(content + "\n")
    out = tmp_path / "run"
    line = one_error_line(run(data_args(byte_data) + ["--config", conf, "-o", out, "-x", 1], check=False))
    assert line.startswith("error: " + said.format(conf=conf)), line
    assert not out.exists()
    key, value = content.split("\n")[0].split("=", 1)
    typed = one_error_line(run(data_args(byte_data) + [f"--{key}", value.strip('"'), "-o", out, "-x", 1],
                               check=False))
    assert "(from --config" not in typed and f"--{key}" in typed, typed
