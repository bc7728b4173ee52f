"""scripts/check_format.sh (make format-check): it passes a file formatted by .clang-format and fails,
naming the file, on one that is not. make test runs it on every tracked source."""
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check_format.sh"
HEADER = REPO / "llmc" / "core" / "rng.h"


def check(*files):
    return subprocess.run([str(SCRIPT), *map(str, files)], capture_output=True, text=True, timeout=300)


def test_a_formatted_file_passes(tmp_path):
    f = tmp_path / "rng.h"
    shutil.copy(HEADER, f)
    p = check(f)
    assert p.returncode == 0, p.stderr
    assert "1 files match" in p.stdout


def test_a_misformatted_file_fails_and_is_named(tmp_path):
    f = tmp_path / "rng.h"
    text = HEADER.read_text()
    assert "namespace llmc {\n" in text
    f.write_text(text.replace("namespace llmc {\n", "namespace llmc {\n  int   badly_spaced ;\n", 1))
    p = check(f)
    assert p.returncode == 1
    assert f"format: {f} differs" in p.stderr
