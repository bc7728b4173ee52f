"""The OpenMP set-up of train_gpt2_ls and generate_gpt2_ls (llmc/app/threads.h, docs/training.md
"Threads"): with neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT in the environment the programs run with
OMP_WAIT_POLICY=PASSIVE, read back from libgomp itself (OMP_DISPLAY_ENV prints what libgomp read when
it was loaded, so this fails when the variable is set too late) and shown on the device line; a wait
policy the user set is kept; the thread count follows --threads, OMP_NUM_THREADS and the affinity mask."""
import os
import re
import shutil
import subprocess

import pytest

from run_helpers import BIN, REPO, TINY, data_args
from test_generate import GEN

TASKSET = shutil.which("taskset")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    env.update(extra)
    return env


def train(data, env, extra=(), prefix=()):
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing; build it with `make train_gpt2_ls`")
    cmd = list(prefix) + [str(BIN), "--device", "cpu"] + data_args(data) + TINY + ["-x", "1", "-v", "0", "-s", "0"]
    cmd += [str(a) for a in extra]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    return p


def device_line(stdout):
    m = re.search(r"^train_gpt2_ls \| device (cpu \(.*\)) \| model", stdout, re.M)
    assert m, stdout
    return m.group(1)


def libgomp_wait_policy(stderr):
    """OMP_WAIT_POLICY and GOMP_SPINCOUNT as libgomp read them, from the last OMP_DISPLAY_ENV block."""
    blocks = stderr.split("OPENMP DISPLAY ENVIRONMENT BEGIN")
    assert len(blocks) > 1, f"no OMP_DISPLAY_ENV block on stderr:\n{stderr}"
    last = blocks[-1]
    policy = re.search(r"OMP_WAIT_POLICY = '(\w+)'", last)
    spin = re.search(r"GOMP_SPINCOUNT = '(\d+)'", last)
    assert policy and spin, last
    return policy.group(1), int(spin.group(1))


def test_default_is_passive_as_libgomp_reads_it(byte_data):  # noqa: F811
    p = train(byte_data, clean_env(OMP_DISPLAY_ENV="VERBOSE"))
    assert libgomp_wait_policy(p.stderr) == ("PASSIVE", 0)
    assert "OMP_WAIT_POLICY=PASSIVE" in device_line(p.stdout)


@pytest.mark.parametrize("env, shown, libgomp", [
    ({"OMP_WAIT_POLICY": "active"}, "OMP_WAIT_POLICY=active", "ACTIVE"),
    ({"GOMP_SPINCOUNT": "300000"}, "GOMP_SPINCOUNT=300000", None),
])
def test_a_wait_policy_in_the_environment_is_kept(byte_data, env, shown, libgomp):  # noqa: F811
    p = train(byte_data, clean_env(OMP_DISPLAY_ENV="VERBOSE", **env))
    policy, spin = libgomp_wait_policy(p.stderr)
    assert spin > 0, "the user's wait policy was replaced by a passive one"
    if libgomp:
        assert policy == libgomp
    line = device_line(p.stdout)
    assert shown in line and "PASSIVE" not in line


@pytest.mark.parametrize("extra, env, prefix, threads", [
    (["--threads", 2], {}, (), 2),
    (["--threads", 2], {"OMP_NUM_THREADS": "3"}, (), 2),  # the flag wins
    (["--threads", 0], {"OMP_NUM_THREADS": "3"}, (), 3),
    (["--threads", 0], {}, ("taskset", "-c", "0"), 1),   # the affinity mask
])
def test_thread_count(byte_data, extra, env, prefix, threads):  # noqa: F811
    if prefix and TASKSET is None:
        pytest.fail("taskset (util-linux) is missing")
    p = train(byte_data, clean_env(**env), extra=extra, prefix=prefix)
    assert device_line(p.stdout).startswith(f"cpu ({threads} thread{'s' if threads > 1 else ''}, "), p.stdout


def test_generator_reports_the_wait_policy(byte_data, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    train(byte_data, clean_env(), extra=["-o", out])
    model = sorted(out.glob("model_*.bin"))[-1]
    if not GEN.exists():
        pytest.fail(f"{GEN} is missing; build it with `make generate_gpt2_ls`")
    p = subprocess.run([str(GEN), "-e", str(model), "--prompt-ids", "70,105", "-n", "4", "--device", "cpu",
                        "--print-ids"], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=clean_env(OMP_DISPLAY_ENV="VERBOSE"))
    assert p.returncode == 0, p.stderr
    assert libgomp_wait_policy(p.stderr) == ("PASSIVE", 0)
    assert re.search(r"generated 4 tokens .*cpu \((1 thread|\d+ threads), OMP_WAIT_POLICY=PASSIVE\)", p.stderr), p.stderr


@pytest.mark.parametrize("program", ["train", "generate"])
@pytest.mark.parametrize("env, said", [
    ({"OMP_NUM_THREADS": "abc"}, "OMP_NUM_THREADS='abc' is not a thread count (a positive integer); set one, unset "
     "it (all the CPUs this process may use), or give --threads N"),
    ({"OMP_NUM_THREADS": "0"}, "OMP_NUM_THREADS='0' is not a thread count"),
    ({"OMP_NUM_THREADS": "-1"}, "OMP_NUM_THREADS='-1' is not a thread count"),
    ({"OMP_NUM_THREADS": "4,"}, "OMP_NUM_THREADS='4,' is not a thread count"),
    ({"OMP_NUM_THREADS": "4,0"}, "OMP_NUM_THREADS='4,0' is not a thread count"),
    ({"OMP_NUM_THREADS": ""}, "OMP_NUM_THREADS='' is not a thread count"),
    # (a review) counts libgomp cannot hold: beyond unsigned long it warned and used every CPU; 3000000000
    # became -1294967296 threads and libgomp ran out of memory; 8193 is over the most CPUs Linux runs on
    ({"OMP_NUM_THREADS": "99999999999999999999"}, "OMP_NUM_THREADS='99999999999999999999' asks for more than 8192 "
     "threads, more than any machine's CPUs; set a count up to the CPUs this process may use, unset it (all of "
     "them), or give --threads N"),
    ({"OMP_NUM_THREADS": "3000000000"}, "OMP_NUM_THREADS='3000000000' asks for more than 8192 threads"),
    ({"OMP_NUM_THREADS": "8193"}, "OMP_NUM_THREADS='8193' asks for more than 8192 threads"),
    ({"OMP_NUM_THREADS": "2,4294967297"}, "OMP_NUM_THREADS='2,4294967297' asks for more than 8192 threads"),
    ({"OMP_WAIT_POLICY": "bogus"}, "OMP_WAIT_POLICY='bogus' is not ACTIVE or PASSIVE; set one of them, or unset it "
     "(the programs then wait PASSIVE, docs/training.md \"Threads\")"),
])
def test_an_openmp_variable_libgomp_would_ignore_is_refused(byte_data, program, env, said):  # noqa: F811
    """(a new-user trial) OMP_NUM_THREADS=abc (or 0, -1): libgomp warned twice (the re-execution) and the trainer
    quietly used every CPU; OMP_WAIT_POLICY=bogus was shown on the device line as the policy in effect while
    libgomp spun by its default. Refused with one line (after libgomp's own warning, which comes before main)."""
    binary = BIN if program == "train" else GEN
    p = subprocess.run([str(binary), "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=clean_env(**env))
    assert p.returncode == 1 and p.stdout == "", p.stdout[:300]
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {said}"), p.stderr
    assert p.stderr.count("libgomp: Invalid value") <= 1, p.stderr  # not again after a re-execution


def test_valid_openmp_variables_are_taken(byte_data):  # noqa: F811
    """What libgomp reads is taken: a nesting list, white space around a number or a policy, a '+' sign (a
    review: " 4", "+4" and " passive" were refused)."""
    for env in ({"OMP_NUM_THREADS": "2,1"}, {"OMP_NUM_THREADS": " 2 "}, {"OMP_NUM_THREADS": "+2"},
                {"OMP_NUM_THREADS": "0002"},
                {"OMP_WAIT_POLICY": "Passive"}, {"OMP_WAIT_POLICY": " passive "}):
        train(byte_data, clean_env(**env))


def test_the_largest_thread_count_is_taken():
    """8192 threads, the cap, is a count (libgomp makes no thread for --help); 8193 is refused (above)."""
    for count in ("8192", "1,8192"):
        p = subprocess.run([str(BIN), "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                           env=clean_env(OMP_NUM_THREADS=count))
        assert p.returncode == 0 and "error" not in p.stderr and "--threads" in p.stdout, p.stderr
    g = subprocess.run([str(GEN), "--threads", "8192", "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60, env=clean_env())
    assert g.returncode == 0 and "error" not in g.stderr and "--threads" in g.stdout, g.stderr


def test_a_thread_count_given_leaves_omp_num_threads_unread(byte_data):  # noqa: F811
    """(a review) --threads N > 0 does not use OMP_NUM_THREADS, so a value libgomp cannot read is no error then
    (the refusal's own advice was "or give --threads N", and it refused that too); --threads 0 reads it."""
    train(byte_data, clean_env(OMP_NUM_THREADS="abc"), extra=["--threads", 2])
    train(byte_data, clean_env(OMP_NUM_THREADS="abc"), extra=["--threads=1"])
    p = subprocess.run([str(BIN), "--threads", "0", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=clean_env(OMP_NUM_THREADS="abc"))
    assert p.returncode == 1 and "error: OMP_NUM_THREADS='abc' is not a thread count" in p.stderr, p.stderr


@pytest.mark.parametrize("count", [8193, 30000, 100000, 2147483647])
def test_a_thread_count_above_any_machine_is_refused(byte_data, count):  # noqa: F811
    """(a new-user trial) --threads had no upper bound: 100000 crashed libgomp (SIGSEGV) and 30000 hung making
    threads, in both programs. The flag now has OMP_NUM_THREADS's cap (8192, the most CPUs Linux runs on), with
    one line and exit 1 before a thread is made."""
    cmd = [str(BIN), "--device", "cpu"] + data_args(byte_data) + TINY + ["-x", "1", "-v", "0", "-s", "0",
                                                                          "--threads", str(count)]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, env=clean_env())
    assert p.returncode == 1 and p.stdout == "", p.stdout[:300]
    assert p.stderr.strip().splitlines() == [
        f"error: --threads must be 0 (automatic) to 8192, the most CPUs a Linux kernel runs on (got {count})"], \
        p.stderr
    g = subprocess.run([str(GEN), "--threads", str(count), "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60, env=clean_env())
    assert g.returncode == 1 and g.stdout == "", g.stdout[:300]
    assert g.stderr.strip().splitlines() == [
        f"error: --threads: must be <= 8192 (got {count}); run with --help for the flags"], g.stderr

