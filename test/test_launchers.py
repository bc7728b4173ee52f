"""scripts/launch_multinode.sh: the mpirun command it runs (a stand-in mpirun on PATH records it)."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_multinode_forwards_only_the_variables_that_are_set(tmp_path):
    """Open MPI prints 'could not find environment variable' for each -x of an unset one (a trial: four such
    warnings before every run); the launcher forwards those that are set, and the trainer's flags as given."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "argv"
    (bindir / "mpirun").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >"{record}"\n')
    (bindir / "mpirun").chmod(0o755)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("node1 slots=2\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "OMP_NUM_THREADS", "MPIRUN_ARGS")}
    env.update(PATH=f"{bindir}:{env['PATH']}", NCCL_DEBUG="INFO", TRAIN_GPT2_LS="/opt/t")
    p = subprocess.run(["scripts/launch_multinode.sh", str(hosts), "2", "-i", "d/train_*.bin", "-o", "out/r"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    argv = record.read_text().splitlines()
    forwarded = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert forwarded == ["PATH", "NCCL_DEBUG"], argv
    assert argv[argv.index("/opt/t"):] == ["/opt/t", "--device", "cuda", "-i", "d/train_*.bin", "-o", "out/r"]
    assert argv[:4] == ["-np", "2", "--hostfile", str(hosts)]
