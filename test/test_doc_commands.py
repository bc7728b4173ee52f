"""The quick-start commands of docs/training.md, run in order as a reader would type them (in a
scratch directory holding the trainer and the tokenized tiny Shakespeare), with a tiny model added to
the first run and the machine flags to every run: a doc whose commands drift from what the trainer
does fails here."""
import re
import shlex
import subprocess

import pytest

from run_helpers import BIN, REPO, gpt2_tinyshakespeare

# The test is about the commands (flags, files, resume, fork, eval), not the model: the smallest shapes that
# keep one global and one local head. The doc's 600 steps and the eval over the whole validation shard
# cost a step's fixed work (the GPT-2 vocabulary's embedding and its AdamW at C 16) times the steps.
TINY_MODEL = ["--layers", "1", "--channels", "16", "--heads", "2", "--global-heads", "1", "--window", "8",
              "--max-seq-len", "16", "-b", "1", "-t", "16", "-v", "0", "-s", "0"]
MACHINE = ["--device", "cpu", "--threads", "1"]


def quick_start_commands(doc):
    """The trainer's command lines of the first ``` block of `doc` (continuation lines joined,
    comments dropped)."""
    block = re.search(r"```\n(.*?)```", (REPO / doc).read_text(), re.S).group(1)
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.startswith("./train_gpt2_ls")]


def test_training_md_quick_start_runs_as_written(tmp_path):
    gpt2_tinyshakespeare()
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make cpu`")
    (tmp_path / "data" / "shards").mkdir(parents=True)
    (tmp_path / "data" / "shards" / "tinyshakespeare_gpt2").symlink_to(REPO / "data" / "shards" / "tinyshakespeare_gpt2")
    (tmp_path / "train_gpt2_ls").symlink_to(BIN)
    commands = quick_start_commands("docs/training.md")
    assert [c[1] for c in commands] == ["-i", "-o", "--fork-from", "--eval-only"], commands  # the doc's four
    for i, cmd in enumerate(commands):
        extra = MACHINE + (TINY_MODEL if i == 0 else [])
        p = subprocess.run(cmd + extra, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"{shlex.join(cmd)}: {p.stderr[-2000:]}"
    assert (tmp_path / "out" / "ts" / "DONE_00000400").exists()
    assert (tmp_path / "out" / "ts-clip" / "config.json").exists()
