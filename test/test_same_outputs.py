"""scripts/same_outputs.sh compares the outputs of two trainer builds; it must not call two builds the
same when there was nothing to compare (a trial: two binaries that fail every command gave "same outputs:
17 files identical", exit 0)."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data/shards/tinyshakespeare_gpt2/meta.json"


def run_script(before, after, work):
    return subprocess.run(["scripts/same_outputs.sh", before, after, str(work)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(not DATA.is_file(), reason="needs make data-tinyshakespeare (make test builds it first)")
@pytest.mark.parametrize("binary", ["/bin/false", "/bin/true"])
def test_commands_that_fail_or_write_nothing_are_no_match(tmp_path, binary):
    p = run_script(binary, binary, tmp_path / "w")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "same outputs" not in p.stdout
    if binary == "/bin/false":
        for side in ("before", "after"):
            assert f"failed ({side}): ls rc=1" in p.stdout and f"failed ({side}): eval rc=1" in p.stdout
    for f in ("ls/config.json", "resume/config.json", "evaldump/eval.json"):
        assert f"no output (before): {f} was not written" in p.stdout, p.stdout
    assert p.stdout.rstrip().endswith(f"outputs differ ({tmp_path / 'w'})")


@pytest.mark.skipif(not DATA.is_file(), reason="needs make data-tinyshakespeare (make test builds it first)")
def test_one_failing_side_is_named(tmp_path):
    p = run_script("/bin/true", "/bin/false", tmp_path / "w")
    assert p.returncode == 1
    assert "failed (after): mhsa rc=1" in p.stdout and "failed (before)" not in p.stdout, p.stdout
