"""docs/from_llmc.md's table of llm.c's flags cannot rot: every flag of ours it names (the "here" and
"what differs" columns) is one that `./train_gpt2_ls --help` lists, and each of llm.c's flags has a row."""
import re
import subprocess

import pytest

from run_helpers import BIN, REPO

DOC = REPO / "docs" / "from_llmc.md"
FLAG = re.compile(r"`(-{1,2}[A-Za-z][\w-]*)[` ]")  # `-x`, `--model`, `--global-heads N`
# llm.c's train_gpt2.cu flags (its usage text): the table has a row for each
LLMC_FLAGS = ["-i", "-j", "-e", "-o", "-lg", "-n", "-nk", "-nm", "-y", "-b", "-t", "-d", "-x", "-k", "-l", "-u",
              "-q", "-c", "-sl", "-sg", "-v", "-m", "-s", "-g", "-h", "-a", "-f", "-w", "-ge", "-z", "-r", "-pn",
              "-pr", "-pg", "-pm", "-ps", "-pp"]


def table_rows():
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and not set(cells[0]) <= set("-") and cells[0] != "llm.c":
            rows.append(cells)
    assert len(rows) > 20, f"no flag table found in {DOC}"
    return rows


def help_flags():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    p = subprocess.run([str(BIN), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return set(re.findall(r"(?<![\w-])(-{1,2}[A-Za-z][\w-]*)", p.stdout))


def test_every_flag_of_ours_in_the_table_is_in_help():
    listed = help_flags()
    ours = [f for _, here, differs in table_rows() for f in FLAG.findall(here + " " + differs)]
    assert len(ours) > 30
    missing = sorted(set(ours) - listed)
    assert not missing, f"docs/from_llmc.md names flags that ./train_gpt2_ls --help does not list: {missing}"


def test_every_llmc_flag_has_a_row():
    named = {f for llmc, _, _ in table_rows() for f in FLAG.findall(llmc)}
    missing = [f for f in LLMC_FLAGS if f not in named]
    assert not missing, f"docs/from_llmc.md has no row for llm.c's {missing}"
