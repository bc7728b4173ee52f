"""Helpers for the data-pipeline tests (imported by conftest.py and the test modules)."""
import os
import subprocess
import sys

DATA_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(DATA_DIR)
PREPARE = os.path.join(DATA_DIR, "prepare.py")
if DATA_DIR not in sys.path:
    sys.path.insert(0, DATA_DIR)


def shared_data_dir():
    """$SHARED_DATA (CI), else ../shared/data relative to the repository root."""
    return os.path.abspath(os.environ.get("SHARED_DATA") or os.path.join(REPO_ROOT, "..", "shared", "data"))


def run_prepare(*args, check=True, env=None, cwd=None):
    """Run data/prepare.py in a subprocess (in cwd, default this one); returns the CompletedProcess (stdout/stderr
    as text). A run past 10 minutes (a hang: the longest test run takes seconds) fails the test instead of the
    suite's time."""
    full_env = dict(os.environ)
    full_env.pop("GPT2_BPE_DIR", None)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, PREPARE, *map(str, args)], capture_output=True, text=True, env=full_env,
                          timeout=600, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"prepare.py {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def split_documents(tokens, eot):
    """Split a token stream that starts with EOT into the documents that follow each EOT."""
    starts = [i for i, t in enumerate(tokens) if t == eot]
    assert starts and starts[0] == 0, "a split must start with the EOT token"
    ends = starts[1:] + [len(tokens)]
    return [tokens[s + 1: e] for s, e in zip(starts, ends)]
