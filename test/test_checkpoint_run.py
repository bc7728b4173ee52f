"""A checkpoint's run directory as the source of what --eval-only and generate_gpt2_ls were not given
(llmc/app/checkpoint_run.h), and the trained sequence length in the checkpoint (header[19],
docs/formats.md) with its note when evaluation or generation goes past it.

The run: the tiny LS model TINY of run_helpers.py (maxT 64) trained 4 steps at -t 32, -b 4 on byte_data.
"""
import shutil
import sys

import numpy as np
import pytest

from run_helpers import REPO, TINY, data_args, run
from test_generate import gen

T_TRAINED = 32  # TINY's -t


@pytest.fixture(scope="module")
def trained_run(byte_data, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("ckrun")
    run(data_args(byte_data) + TINY + ["-o", out, "-x", 4, "-v", 0, "-s", 0])
    return out, out / "model_00000004.bin"


def eval_loss(p):
    return float(p.stdout.split("eval loss ")[1].split()[0])


def test_checkpoint_records_the_trained_sequence_length(trained_run):
    _, ckpt = trained_run
    header = np.fromfile(ckpt, dtype=np.int32, count=20)
    assert header[18] == 4 and header[19] == T_TRAINED


def test_eval_only_takes_val_data_seq_len_and_batch_from_the_run(trained_run, byte_data):  # noqa: F811
    out, ckpt = trained_run
    implicit = run(["--eval-only", "-e", ckpt, "--threads", 1])
    lines = [ln for ln in implicit.stderr.splitlines() if "--eval-only:" in ln]
    assert lines == [f"note: --eval-only: -j '{byte_data}/val_*.bin', -t {T_TRAINED}, -b 4 from {out}/config.json "
                     "(flags given win)"], implicit.stderr
    explicit = run(["--eval-only", "-e", ckpt, "-j", f"{byte_data}/val_*.bin", "-t", T_TRAINED, "-b", 4,
                    "--threads", 1])
    assert "--eval-only:" not in explicit.stderr
    assert eval_loss(implicit) == eval_loss(explicit)
    assert f"B 4 x T {T_TRAINED}" in implicit.stdout


@pytest.mark.parametrize("extra", [["-t", 65], ["--dump-attention", "0:0"], ["--dump-logits", "/no/such/dir/x.bin"]])
def test_a_failing_eval_only_prints_only_its_error(trained_run, extra):
    """The "--eval-only: ... from config.json" line came before a later error (two lines for one mistake); it now
    comes once the evaluation succeeded. The cases fail while planning, while checking flags and after the
    evaluation ran."""
    _, ckpt = trained_run
    p = run(["--eval-only", "-e", ckpt, "--threads", 1] + extra, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr


def test_eval_only_takes_the_val_data_a_resume_changed(trained_run, byte_data, tmp_path):  # noqa: F811
    """A -j changed on resume is in config.json's history: eval takes the run's current -j, not the first."""
    src, _ = trained_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    val2 = tmp_path / "val2"  # the same data set's validation shard in another directory
    val2.mkdir()
    for name in ("val_000000.bin", "tokenizer.bin", "meta.json"):
        shutil.copy(byte_data / name, val2 / name)
    run(["-o", out, "-y", 1, "-x", 5, "-j", f"{val2}/val_*.bin", "-v", 0, "-s", 0, "--threads", 1])
    p = run(["--eval-only", "-e", out / "model_00000005.bin", "--threads", 1])
    assert f"--eval-only: -j '{val2}/val_*.bin'" in p.stderr, p.stderr


def test_eval_only_flags_given_win(trained_run):
    out, ckpt = trained_run
    p = run(["--eval-only", "-e", ckpt, "-t", 16, "--batch-size=2", "--threads", 1])
    assert "B 2 x T 16" in p.stdout
    taken = [ln for ln in p.stderr.splitlines() if ln.startswith("note: --eval-only:")]
    assert len(taken) == 1 and "-t" not in taken[0] and "-b" not in taken[0] and "-j '" in taken[0]


def test_eval_only_refuses_an_empty_val_data(trained_run, tmp_path):
    """trial 9: --eval-only -j '' evaluated on the run's recorded -j, though flags given win: refused, naming
    both fixes; nothing is written."""
    out, ckpt = trained_run
    p = run(["--eval-only", "-e", ckpt, "-j", "", "-o", tmp_path / "ev", "--threads", 1], check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith("error: --eval-only with -j '' names no shards to evaluate on; give -j 'DIR/val_*.bin', "
                               "or drop -j to evaluate on the run's -j '") and f"({out}/config.json)" in lines[0], lines
    assert "eval loss" not in p.stdout and not (tmp_path / "ev").exists()


def test_eval_only_refuses_data_tokenized_unlike_the_run(trained_run, byte_data, tmp_path):  # noqa: F811
    """Same vocabulary (256), other token bytes: -j from another tokenizer than the run's -i."""
    _, ckpt = trained_run
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(byte_data / "val_000000.bin", other / "val_000000.bin")
    tok = bytearray((byte_data / "tokenizer.bin").read_bytes())
    tok[1024 + 2 * 65 + 1] = ord("?")  # token 65 ('A') decodes to another byte
    (other / "tokenizer.bin").write_bytes(bytes(tok))
    p = run(["--eval-only", "-e", ckpt, "-j", f"{other}/val_*.bin", "--threads", 1], check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "tokenizer.bin differs" in lines[0] and f"-j '{other}/val_*.bin'" in lines[0]
    assert "config.json" in lines[0] and f"{byte_data}/train_*.bin" in lines[0]


def fnv1a64(data):
    """64-bit FNV-1a (docs/formats.md), written here from its definition."""
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def other_tokenizer_data(byte_data, folder):  # noqa: F811
    """byte_data's shards beside a tokenizer.bin of the same vocabulary (256) with token 65 decoding to '?'."""
    folder.mkdir()
    for name in ("train_000000.bin", "val_000000.bin"):
        shutil.copy(byte_data / name, folder / name)
    tok = bytearray((byte_data / "tokenizer.bin").read_bytes())
    tok[1024 + 2 * 65 + 1] = ord("?")
    (folder / "tokenizer.bin").write_bytes(bytes(tok))
    return folder


def test_a_model_file_alone_keeps_its_tokenizer(trained_run, byte_data, tmp_path):  # noqa: F811
    """(a new-user trial) A checkpoint copied away from its run was evaluated, fine-tuned and decoded with another
    tokenizer of the same vocabulary, without a word. The model file (version 4) records its training data's
    tokenizer.bin in header words 24-25; each reader refuses another one in one line, and reads the right one
    without the "check that it was tokenized like it" note."""
    _, ckpt = trained_run
    header = np.fromfile(ckpt, dtype="<u4", count=26)
    assert header[1] == 4
    recorded = int(header[24]) | (int(header[25]) << 32)
    assert recorded == fnv1a64((byte_data / "tokenizer.bin").read_bytes()) != 0
    # dev/reference/checkpoint.py reads the same words, and knows version 4's word damaged from another build's
    sys.path.insert(0, str(REPO / "dev" / "reference"))
    from checkpoint import read_model_with_tokenizer
    assert read_model_with_tokenizer(str(ckpt))[3] == recorded
    flipped = bytearray(ckpt.read_bytes())
    flipped[4:8] = np.array([7], dtype="<i4").tobytes()
    (tmp_path / "flipped.bin").write_bytes(bytes(flipped))
    with pytest.raises(ValueError, match="version word is 7, its header checksum says 4"):
        read_model_with_tokenizer(str(tmp_path / "flipped.bin"))
    lone = tmp_path / "lone" / "model.bin"
    lone.parent.mkdir()
    shutil.copy(ckpt, lone)
    other = other_tokenizer_data(byte_data, tmp_path / "other")
    said = (f": another tokenizer than {lone} was trained with (the model file records tokenizer.bin fnv1a64 "
            f"{recorded:016x}; this is tokenizer unnamed, vocabulary 256, tokenizer.bin fnv1a64 "
            f"{fnv1a64((other / 'tokenizer.bin').read_bytes()):016x} ({other}));")
    cases = [
        (run(["--eval-only", "-e", lone, "-j", f"{other}/val_*.bin", "-t", 16, "-m", 1, "--threads", 1], check=False),
         f"error: -j '{other}/val_*.bin'{said} give -j data prepared with that tokenizer (data/prepare.py)"),
        (run(["-i", f"{other}/train_*.bin", "-e", lone, "-o", tmp_path / "new", "-b", 2, "-t", 16, "-x", 1, "-v", 0,
              "-s", 0, "--threads", 1], check=False),
         f"error: -i '{other}/train_*.bin'{said} give -i data prepared with that tokenizer (data/prepare.py), or -e "
         "a model trained on this data"),
        (gen(["-e", lone, "--tokenizer", other / "tokenizer.bin", "--prompt", "A", "-n", 2, "--threads", 1],
             check=False),
         f"error: --tokenizer {other}/tokenizer.bin{said} pass the tokenizer.bin of the data the model was trained "
         "on")]
    for p, line in cases:
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode()
        assert p.returncode == 1 and err.strip().splitlines() == [line], err
    assert not (tmp_path / "new").exists()
    # a file that is no tokenizer.bin (here a SentencePiece model's first bytes) is named as such, not as another
    # tokenizer
    sp_model = tmp_path / "tokenizer.model"
    sp_model.write_bytes(b"\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02" * 128)
    p = gen(["-e", lone, "--tokenizer", sp_model, "--prompt-ids", "1", "-n", 2, "--threads", 1], check=False)
    lines = p.stderr.decode().strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and "it is not a tokenizer.bin" in lines[0], lines
    # the right tokenizer, the model's vocabulary padded above the data's: read without the lone-file note
    wide = tmp_path / "wide"
    run(data_args(byte_data) + TINY + ["--vocab", 300, "-o", wide, "-x", 1, "-v", 0, "-s", 0])
    lone_wide = tmp_path / "lone" / "wide.bin"
    shutil.copy(wide / "model_00000001.bin", lone_wide)
    for p in (run(["--eval-only", "-e", lone_wide, "-j", f"{byte_data}/val_*.bin", "-t", 16, "-m", 1,
                   "--threads", 1]),
              gen(["-e", lone_wide, "--tokenizer", byte_data / "tokenizer.bin", "--prompt", "A", "-n", 2,
                   "--threads", 1])):
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode()
        assert p.returncode == 0 and "has no config.json beside it" not in err and "error" not in err, err


def test_eval_only_of_data_with_a_smaller_vocabulary(trained_run, tmp_path):
    """The run's record refuses it; a checkpoint alone (no config.json: nothing to compare) gets a note."""
    _, ckpt = trained_run
    small = tmp_path / "small"
    small.mkdir()
    tokens = np.arange(2000, dtype=np.uint16) % 100
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    (small / "val_000000.bin").write_bytes(header.tobytes() + tokens.tobytes())
    (small / "meta.json").write_text('{"vocab_size": 100}')
    p = run(["--eval-only", "-e", ckpt, "-j", f"{small}/val_*.bin", "--threads", 1], check=False)
    assert p.returncode != 0 and p.stderr.startswith("error: ") and "the vocabulary differs" in p.stderr, p.stderr
    lone = tmp_path / "lone" / "model.bin"
    lone.parent.mkdir()
    shutil.copy(ckpt, lone)
    p = run(["--eval-only", "-e", lone, "-j", f"{small}/val_*.bin", "-t", T_TRAINED, "-m", 1, "--threads", 1])
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert notes == [f"note: -j '{small}/val_*.bin' has vocabulary 100 ({small}/meta.json) and the model 256, and "
                     f"{lone} has no config.json beside it naming its training data: check that -j was tokenized "
                     "like it"], p.stderr
    # a new run from that checkpoint on such data: the same note for -i (a new-user trial: it trained silently)
    train = small / "train_000000.bin"
    shutil.copy(small / "val_000000.bin", train)
    p = run(["-i", train, "-e", lone, "-b", 2, "-t", 16, "-x", 1, "-v", 0, "-s", 0, "--threads", 1])
    assert (f"note: -i '{train}' has vocabulary 100 ({small}/meta.json) and the model 256, and {lone} has no "
            "config.json beside it naming its training data: check that -i was tokenized like it") in p.stderr, \
        p.stderr


def test_eval_past_the_trained_length_prints_one_note(trained_run, tmp_path):
    _, ckpt = trained_run
    p = run(["--eval-only", "-e", ckpt, "-t", 64, "-m", 1, "--threads", 1])
    def notes(p):  # besides the line of what was taken from the run (note: --eval-only: -j ... from ...)
        return [ln for ln in p.stderr.splitlines() if ln.startswith("note:") and not ln.startswith("note: --eval-only:")]
    assert notes(p) == [f"note: --eval-only -t uses 64 positions, more than the {T_TRAINED} {ckpt} was trained at "
                        f"(-t {T_TRAINED}); positions beyond them were never trained"], p.stderr
    p = run(["--eval-only", "-e", ckpt, "-m", 1, "--threads", 1])
    assert notes(p) == [], p.stderr
    # a checkpoint from before the field (0 there; version 1 or 2, without the header checksum of words
    # 22-23 and the tokenizer of words 24-25): unknown, no note, same loss
    old = tmp_path / "model_00000004.bin"
    data = bytearray(ckpt.read_bytes())
    data[19 * 4:20 * 4] = bytes(4)
    data[4:8] = (1 if data[80:88] == bytes(8) else 2).to_bytes(4, "little")
    data[88:104] = bytes(16)
    old.write_bytes(bytes(data))
    a = run(["--eval-only", "-e", old, "-j", p.stdout.split("from '")[1].split("'")[0], "-t", 64, "-b", 4, "-m", 1,
             "--threads", 1])
    assert "note:" not in a.stderr
    b = run(["--eval-only", "-e", ckpt, "-t", 64, "-m", 1, "--threads", 1])
    assert eval_loss(a) == eval_loss(b)


def test_generate_takes_the_tokenizer_from_the_run(trained_run, byte_data):  # noqa: F811
    out, ckpt = trained_run
    common = ["-e", ckpt, "-n", 20, "--seed", 3, "--threads", 1]
    implicit = gen(common)
    explicit = gen(common + ["--tokenizer", byte_data / "tokenizer.bin"])
    assert implicit.stdout == explicit.stdout
    err = implicit.stderr.decode().splitlines()
    assert f"note: generate: --tokenizer {byte_data}/tokenizer.bin from {out}/config.json (the run's training " \
           f"data -i '{byte_data}/train_*.bin')" in err
    assert not any("generate: --tokenizer" in ln for ln in explicit.stderr.decode().splitlines())


def test_generate_past_the_trained_length_prints_one_note(trained_run, byte_data):  # noqa: F811
    _, ckpt = trained_run
    tok = ["--tokenizer", byte_data / "tokenizer.bin", "--seed", 3, "--threads", 1]
    def length_notes(p):  # (a machine without a GPU also gets a note about the device)
        return [ln for ln in p.stderr.decode().splitlines() if ln.startswith("note:") and "positions" in ln]

    within = gen(["-e", ckpt, "-n", T_TRAINED - 1] + tok)  # EOT + 31 tokens = 32 positions
    assert length_notes(within) == []
    past = gen(["-e", ckpt, "-n", T_TRAINED] + tok)
    assert length_notes(past) == [f"note: generation uses {T_TRAINED + 1} positions, more than the {T_TRAINED} {ckpt} was "
                     f"trained at (-t {T_TRAINED}); positions beyond them were never trained"]
    capped = gen(["-e", ckpt, "-n", 40, "--max-len", T_TRAINED] + tok)  # the context kept is at most 32
    assert length_notes(capped) == []


@pytest.mark.parametrize("key,value,flag", [("warmup_steps", -5, "warmup-steps"), ("learning_rate", "fast", "learning")])
def test_every_reader_refuses_a_record_value_its_flag_refuses(trained_run, tmp_path, key, value, flag):
    """config.json has one reader (llmc/app/run_record.h): a recorded value that its flag refuses is refused by
    --eval-only and generate_gpt2_ls of a checkpoint as by -y 1, in one line naming the file and the setting
    (eval and generate read only four fields and took the rest; -y 1 named -u, which nobody typed, not the file)."""
    import json
    src, _ = trained_run
    out = tmp_path / "run"
    shutil.copytree(src, out)
    conf = json.loads((out / "config.json").read_text())
    conf["train"][key] = value
    (out / "config.json").write_text(json.dumps(conf))
    ckpt = out / "model_00000004.bin"
    for p in (run(["-o", out, "-y", 1, "-x", 5, "--threads", 1], check=False),
              run(["--eval-only", "-e", ckpt, "--threads", 1], check=False),
              gen(["-e", ckpt, "-n", 2, "--threads", 1], check=False)):
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode()
        lines = err.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and lines[0].startswith("error: "), err
        assert str(out / "config.json") in lines[0] and flag in lines[0] and "restore the file" in lines[0], lines[0]


def test_eval_only_of_a_run_directory_or_a_missing_step_names_the_checkpoints(byte_data, tmp_path):
    """trial 5 F10: --eval-only -e RUNDIR said "needs -j" (no checkpoint's run to take -j from); -e is checked
    first: a run directory gets its newest complete checkpoint named, a missing model file the steps there."""
    out = tmp_path / "run"
    run(data_args(byte_data) + TINY + ["-o", out, "-x", 8, "-n", 1, "-v", 0, "-s", 0])
    cases = {
        str(out): f"'{out}' is a run directory: did you mean -e {out}/model_00000008.bin? (its newest complete "
                  "checkpoint)",
        str(out) + "/": f"'{out}/' is a run directory: did you mean -e {out}/model_00000008.bin? (its newest "
                        "complete checkpoint)",
        str(out / "model_00000009.bin"): f"'{out}/model_00000009.bin' does not exist; {out} holds the complete "
                                         f"checkpoints of steps 1, 2, ..., 6, 7, 8 (8; the newest: -e "
                                         f"{out}/model_00000008.bin)",
        str(tmp_path): f"'{tmp_path}' is a directory without a complete checkpoint; give RUN/model_NNNNNNNN.bin",
        str(tmp_path / "x.bin"): f"'{tmp_path}/x.bin' is not a file"}
    for model, said in cases.items():
        p = run(["--eval-only", "-e", model, "-m", 1, "--threads", 1], check=False)
        assert p.returncode == 1 and p.stderr.strip().splitlines() == [
            f"error: --eval-only needs -e CHECKPOINT (a model file); {said}"], p.stderr
    p = run(["--eval-only", "-e", out / "model_00000008.bin", "-m", 1, "--threads", 1])
    assert "eval loss" in p.stdout
    # a training run's -e (review of 53a942e): the same account, where it said "neither ... nor a preset"
    gone = out / "model_00000009.bin"
    p = run(data_args(byte_data) + ["-e", gone, "-o", tmp_path / "new", "-x", 1, "--threads", 1], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        f"error: -e '{gone}' does not exist; {out} holds the complete checkpoints of steps 1, 2, ..., 6, 7, 8 (8; the "
        f"newest: -e {out}/model_00000008.bin)"], p.stderr
    assert not (tmp_path / "new").exists()
    # --fork-from of that step (a new-user trial: it said only "no such file; check the path"): the same list
    p = run(["--fork-from", gone, "-o", tmp_path / "new", "-x", 10, "--threads", 1], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        f"error: --fork-from {gone}: no such file; {out} holds the complete checkpoints of steps 1, 2, ..., 6, 7, 8 "
        f"(8; the newest: --fork-from {out}/model_00000008.bin)"], p.stderr
    assert not (tmp_path / "new").exists()


def test_a_checkpoint_beside_another_models_record_is_refused(trained_run, byte_data, tmp_path):
    """A new-user trial: a model file copied beside another run's config.json (another vocabulary) was
    evaluated on that run's data and decoded with its tokenizer, exit 0. Each reader of -e compares the
    checkpoint's header with the record's "model" and refuses, naming the fields; the run's own
    checkpoint beside its own record still reads."""
    out, ckpt = trained_run
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(out / "config.json", mixed / "config.json")
    other = tmp_path / "other"
    run(data_args(byte_data) + TINY + ["--vocab", 300, "-o", other, "-x", 1, "-v", 0, "-s", 0])
    shutil.copy(other / "model_00000001.bin", mixed / "model_00000004.bin")
    model = mixed / "model_00000004.bin"
    expect = f"{model} is another model than {mixed / 'config.json'} beside it records (vocab_size 300 vs 256):"
    for p in (run(["--eval-only", "-e", model, "--threads", 1], check=False),
              gen(["-e", model, "-n", 2, "--prompt", "ab"], check=False),
              run(data_args(byte_data) + ["-e", model, "-x", 1, "-b", 2, "-t", 16, "-s", 0, "-v", 0], check=False)):
        err = p.stderr if isinstance(p.stderr, str) else p.stderr.decode()
        lines = err.strip().splitlines()
        assert p.returncode == 1 and lines[-1].startswith("error: ") and expect in lines[-1], err
    assert run(["--eval-only", "-e", ckpt, "--threads", 1]).returncode == 0


def llmc_gpt2_file(path, maxT=64, nl=1, nh=2, C=16):
    """An llm.c GPT-2 file (magic 20240326, version 3) with GPT-2's vocabulary, small random weights."""
    V, Vp = 50257, 50304
    sizes = [Vp * C, maxT * C, nl * C, nl * C, nl * 3 * C * C, nl * 3 * C, nl * C * C, nl * C, nl * C, nl * C,
             nl * 4 * C * C, nl * 4 * C, nl * C * 4 * C, nl * C, C, C]
    params = np.concatenate([np.random.default_rng(7).normal(0, 0.05, n) for n in sizes]).astype(np.float32)
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [20240326, 3, maxT, V, nl, nh, C, Vp]
    path.write_bytes(h.tobytes() + params.tobytes())
    return path


def shards(folder, meta):
    """A train and a val shard of 2000 tokens below 100, and meta.json `meta`."""
    folder.mkdir()
    tokens = np.arange(2000, dtype=np.uint16) % 100
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    for name in ("train_000000.bin", "val_000000.bin"):
        (folder / name).write_bytes(header.tobytes() + tokens.tobytes())
    (folder / "meta.json").write_text(meta)
    return folder


def test_gpt2_weights_alone_refuse_data_of_another_tokenizer(byte_data, tmp_path):  # noqa: F811
    """(a new-user trial) llm.c's GPT-2 weights on SentencePiece data trained with a note only: the data's
    token ids index GPT-2's embeddings as other tokens. A checkpoint with GPT-2's vocabulary and no run
    beside it now refuses data whose meta.json names another tokenizer, for -i and -j, and generate_gpt2_ls such
    a data set's tokenizer, in one line; GPT-2 data is taken."""
    llmc = llmc_gpt2_file(tmp_path / "gpt2_tiny.bin")
    sp = shards(tmp_path / "sp", '{"vocab_size": 100, "tokenizer": "sp"}')
    said = (f"is tokenized with 'sp' ({sp}/meta.json) and {llmc} is an llm.c GPT-2 checkpoint (vocabulary 50257), "
            "so its token ids would mean other tokens to it; give GPT-2 BPE data (data/prepare.py --tokenizer gpt2) "
            "or a model trained on this data")
    out = tmp_path / "out"
    p = run(["-i", f"{sp}/train_*.bin", "-e", llmc, "-o", out, "-b", 1, "-t", 16, "-x", 1, "-v", 0, "-s", 0,
             "--threads", 1], check=False)
    assert p.returncode == 1 and p.stdout == "", p.stdout
    assert p.stderr.strip().splitlines() == [f"error: -i '{sp}/train_*.bin' {said}"], p.stderr
    assert not out.exists()
    p = run(["--eval-only", "-e", llmc, "-j", f"{sp}/val_*.bin", "-b", 1, "-t", 16, "-m", 1, "--threads", 1],
            check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [f"error: -j '{sp}/val_*.bin' {said}"], p.stderr
    # generate_gpt2_ls with that data set's tokenizer: the same refusal (it generated from SentencePiece ids)
    shutil.copy(byte_data / "tokenizer.bin", sp / "tokenizer.bin")  # a real tokenizer file; meta.json names sp
    p = gen(["-e", llmc, "--tokenizer", sp / "tokenizer.bin", "--prompt", "A", "-n", 2, "--threads", 1],
            check=False)
    assert p.returncode == 1 and p.stderr.decode().strip().splitlines() == [
        f"error: --tokenizer {sp}/tokenizer.bin is the 'sp' tokenizer ({sp}/meta.json) and {llmc} is an llm.c GPT-2 "
        "checkpoint (vocabulary 50257), so its token ids would mean other tokens to it; give GPT-2's tokenizer.bin (the one beside GPT-2 BPE data, or llm.c's gpt2_tokenizer.bin) or "
        "a model trained with this tokenizer"], p.stderr
    gpt2 = shards(tmp_path / "gpt2", '{"vocab_size": 50257, "tokenizer": "gpt2"}')
    p = run(["--eval-only", "-e", llmc, "-j", f"{gpt2}/val_*.bin", "-b", 1, "-t", 16, "-m", 1, "--threads", 1])
    assert "eval loss" in p.stdout and "error" not in p.stderr, p.stderr
