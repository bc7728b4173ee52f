"""The commit-msg hook (.githooks/commit-msg, enabled per clone by `git config core.hooksPath
.githooks`: docs/design.md): a subject of at most 72 characters passes, a longer one is refused with
one `error:` line that names the limit and where the detail goes; comment lines (git's template) and
leading blank lines are not the subject; characters are counted, not bytes."""
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOK = REPO / ".githooks" / "commit-msg"


def run_hook(tmp_path, message):
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(message, encoding="utf-8")
    return subprocess.run(["sh", str(HOOK), str(msg)], capture_output=True, text=True)


def test_hook_is_there_and_executable():
    assert HOOK.is_file(), f"{HOOK} is missing"
    assert HOOK.stat().st_mode & 0o111, f"{HOOK} is not executable (git skips it)"


@pytest.mark.parametrize("subject", ["a" * 72, "x", "µ" * 72, "attention: one launch per pass (B x NH on the grid's x)"])
def test_subject_within_72_characters_passes(tmp_path, subject):
    p = run_hook(tmp_path, f"{subject}\n\nThe body may be as long as it needs: {'word ' * 40}\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "" and p.stderr == ""


@pytest.mark.parametrize("subject", ["a" * 73, "µ" * 73, "b" * 200])
def test_long_subject_is_refused_in_one_line(tmp_path, subject):
    p = run_hook(tmp_path, f"{subject}\n\nbody\n")
    assert p.returncode != 0
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), p.stderr
    assert f"{len(subject)} characters" in lines[0] and "72" in lines[0] and "body" in lines[0]


def test_comments_and_leading_blank_lines_are_not_the_subject(tmp_path):
    long_comment = "# " + "c" * 100
    assert run_hook(tmp_path, f"\n\n{long_comment}\nshort subject\n\nbody\n").returncode == 0
    assert run_hook(tmp_path, f"{long_comment}\n\n{'s' * 80}\n").returncode != 0


def test_empty_message_is_left_to_git(tmp_path):
    # git itself aborts a commit whose message is empty; the hook does not add a second message
    p = run_hook(tmp_path, "# only comments\n\n")
    assert p.returncode == 0 and p.stderr == ""
