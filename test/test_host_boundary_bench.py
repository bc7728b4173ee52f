"""dev/bench/host_boundary.cpp (make host-boundary-bench, built by make test's test-build): its table's
shape at a small shape and its refusal of bad arguments. The times themselves are not tested."""
import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("HOST_BOUNDARY_BENCH", REPO / "build" / "host_boundary_bench"))


def test_table_has_every_piece_with_a_time():
    assert BENCH.exists(), f"{BENCH} missing: make host-boundary-bench (make test builds it)"
    p = subprocess.run([str(BENCH), "2", "64", "2", "3", "130"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0].endswith("B 2 T 64 L 2 NH 3 Vp 130"), p.stdout
    rows = [line for line in p.stdout.splitlines() if line.startswith("| ") and not line.startswith("| piece")]
    names = [r.split(" | ")[0][2:] for r in rows]
    assert names == ["token check (check_token_batch, inputs and targets)",
                     "staging copy (inputs and targets into the slot)",
                     "token grouping (group_tokens; while the device runs)",
                     "logit_stats line, with --near (logit_stats_line)", "logit_stats line, without --near"], names
    for r in rows:
        assert re.fullmatch(r"\| .+ \| \d+\.\d \|", r), r


def test_bad_arguments_are_refused():
    assert BENCH.exists(), f"{BENCH} missing: make host-boundary-bench (make test builds it)"
    for args in (["1", "2"], ["0", "64", "2", "3", "130"], ["2x", "64", "2", "3", "130"],
                 ["65536", "65536", "1", "1", "130"], ["1", "1", "100000000", "100000", "130"]):
        p = subprocess.run([str(BENCH)] + args, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stdout == "", (args, p.stdout, p.stderr)
        assert len(p.stderr.splitlines()) == 1, p.stderr
