"""The trainer in every USE_MPI x USE_NCCL combination (build/matrix/, built by `make test`), a
GPU test built without what it tests reporting SKIPPED (exit 77) instead of passing, and `make` on a
machine without nvcc (the last test: nvcc hidden from PATH) building a trainer and a generator for
the CPU that train and generate. No GPU needed: nothing here touches CUDA before it answers."""
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from run_helpers import TINY, write_byte_tokenizer, write_shard

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "build" / "matrix"
COMBOS = ["mpi0-ncclauto", "mpiauto-nccl0", "mpi0-nccl0"]
MPIRUN = shutil.which("mpirun")


def binary(name):
    p = MATRIX / name
    if not p.exists():
        pytest.fail(f"{p} is missing; `make dist-matrix` builds it (part of `make test`)")
    return p


@pytest.mark.parametrize("combo", COMBOS)
def test_every_combination_builds_and_runs(combo):
    p = subprocess.run([binary(f"train_gpt2_ls-{combo}"), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--rendezvous" in p.stdout and "--device" in p.stdout


@pytest.mark.parametrize("combo", ["mpi0-ncclauto", "mpi0-nccl0"])
def test_mpirun_of_a_build_without_mpi_says_what_is_missing(combo, tmp_path):
    if MPIRUN is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but mpirun is missing (install_deps installs Open MPI)")
        pytest.skip("mpirun not found")
    cmd = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2", binary(f"train_gpt2_ls-{combo}"),
           "--device", "cpu", "-i", str(tmp_path / "none_*.bin"), "-x", "1"]
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "2 processes (from mpirun (Open MPI)) but this build has no MPI" in p.stderr, p.stderr


def test_nccl_test_without_nccl_is_skipped_not_passed():
    p = subprocess.run([binary("test_collective_nccl-nccl0")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 77, (p.returncode, p.stdout, p.stderr)
    assert "test_collective_nccl: SKIPPED: built without NCCL" in p.stderr


def path_without_nvcc():
    """PATH minus every directory holding an nvcc (as a machine without the CUDA toolkit has it)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    return os.pathsep.join(dirs)


def test_make_without_nvcc_builds_cpu_programs_that_train_and_generate(tmp_path):
    """`make train_gpt2_ls generate_gpt2_ls` in a copy of the sources, nvcc off PATH: one line says the
    programs are built for the CPU by the host compiler; they train (loss finite, a checkpoint),
    generate from it, and --device cuda names the missing CUDA backend."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ["Makefile", "train_gpt2_ls.cu", "generate_gpt2_ls.cu"]:
        shutil.copy(REPO / f, src / f)
    shutil.copytree(REPO / "llmc", src / "llmc")
    env = {k: v for k, v in os.environ.items()
           if k not in ("NVCC", "CUDA_HOME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LLMC_NO_NVCC_SAID", "HOST_BUILD")}
    env["PATH"] = path_without_nvcc()
    assert shutil.which("nvcc", path=env["PATH"]) is None
    # -O0: this test is about the build path (and a few tiny steps), not the programs' speed
    p = subprocess.run(["make", "-j2", "HOST_OPT=-O0", "train_gpt2_ls", "generate_gpt2_ls"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout + p.stderr
    said = [line for line in p.stderr.splitlines() if "no nvcc" in line]  # a notice: on stderr
    assert len(said) == 1 and "building train_gpt2_ls and generate_gpt2_ls with" in said[0], p.stderr
    assert "no nvcc" not in p.stdout, p.stdout
    assert not re.search(r"^\S*nvcc ", p.stdout, re.M), p.stdout

    data = tmp_path / "data"
    data.mkdir()
    tokens = np.frombuffer(b"the king shall not be so, and my lord is good.\n" * 400, dtype=np.uint8)
    write_shard(data / "train_000000.bin", tokens.astype(np.uint16))
    (data / "meta.json").write_text('{"vocab_size": 256, "eot": 10}')
    write_byte_tokenizer(data / "tokenizer.bin", 10)
    out = tmp_path / "out"
    train = [str(src / "train_gpt2_ls"), "-i", f"{data}/train_*.bin", "-o", str(out), "-x", "3", "-v", "0",
             "-s", "0"] + TINY
    p = subprocess.run(train, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    losses = [float(m) for m in re.findall(r"^step \d+/3 \| loss ([0-9.]+)", p.stdout, re.M)]
    assert len(losses) == 3 and all(np.isfinite(losses)), p.stdout
    assert "device cpu (" in p.stdout
    model = sorted(out.glob("model_*.bin"))[-1]
    g = subprocess.run([str(src / "generate_gpt2_ls"), "-e", str(model), "--prompt-ids", "116,104", "-n", "5",
                        "--print-ids", "--seed", "1"], capture_output=True, text=True, timeout=300, env=env)
    assert g.returncode == 0, g.stderr
    assert len(g.stdout.split()) == 5 and all(0 <= int(t) < 256 for t in g.stdout.split()), g.stdout
    c = subprocess.run(train[:1] + ["--device", "cuda"] + train[1:3], capture_output=True, text=True, timeout=60,
                       env=env)
    assert c.returncode == 1
    assert c.stderr.startswith("error: this build has no CUDA backend (compiled without nvcc)"), c.stderr


def fake_compiler(path, name, log):
    """A stand-in compiler `name`: logs its call to `log` and writes its -o file as a script that logs its
    own calls (so a build takes no time and a run of the built program is seen)."""
    path.write_text(f"""#!/bin/sh
echo "{name} $*" >> {log}
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
printf '#!/bin/sh\\necho "run {name}-built $0 $*" >> {log}\\n' > "$out"
chmod +x "$out"
""")
    path.chmod(0o755)


def fake_build(tmp_path):
    """A copy of the Makefile with placeholder sources, stand-in compilers (fake_compiler) and a stand-in
    nvidia-smi listing one GPU, so that no build takes time: (src, env, make), where make(*args) runs make
    there and returns its stdout and the calls of the compilers and the built programs."""
    src = tmp_path / "src"
    (src / "llmc").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", src / "Makefile")
    for f in ["train_gpt2_ls.cu", "generate_gpt2_ls.cu"]:
        (src / f).write_text("int main() {}\n")
    (src / "llmc" / "cuda").mkdir()
    (src / "llmc" / "cuda" / "backend_entry.cu").write_text("// the kernels\n")
    (src / "llmc" / "cuda" / "cublaslt_loader.cpp").write_text("// cuBLASLt, loaded on first use\n")
    (src / "llmc" / "cpu").mkdir()
    (src / "llmc" / "cpu" / "kernel_instances.cpp").write_text("// the CPU kernel drivers, compiled once\n")
    (src / "llmc" / "app").mkdir()
    (src / "llmc" / "app" / "launch_collective.cpp").write_text("// MPI and NCCL, once per combination\n")
    ts = src / "data" / "shards" / "tinyshakespeare_gpt2"  # make train's data, already prepared
    ts.mkdir(parents=True)
    (ts / "meta.json").write_text("{}")
    log = tmp_path / "calls"
    fake_compiler(tmp_path / "fake-nvcc", "nvcc", log)
    fake_compiler(tmp_path / "fake-cxx", "cxx", log)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "HOST_BUILD")}
    smi = tmp_path / "fake-nvidia-smi"  # a machine with one GPU
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    env.update(NVCC=str(tmp_path / "fake-nvcc"), CXX=str(tmp_path / "fake-cxx"), NVIDIA_SMI=str(smi))

    def make(*args):
        log.write_text("")
        p = subprocess.run(["make", "--no-print-directory"] + list(args), cwd=src, env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        # (a new-user trial) make's notices go to stderr: stdout carries make train's run
        assert not any(ln.startswith(("make train:", "make generate_gpt2_ls:", "make: no nvcc")) for ln in
                       p.stdout.splitlines()), p.stdout
        return p.stderr, log.read_text().splitlines()

    return src, env, make


def test_make_train_after_make_cpu_trains_with_the_host_build(tmp_path):
    """`make cpu`, then `make train`: the trainer of `make cpu` trains (no nvcc rebuild), and one line says so;
    `make train HOST_BUILD=0` and `make train_gpt2_ls` rebuild it with nvcc. The compilers are stand-ins
    (fake_build), so no build takes time."""
    src, env, make = fake_build(tmp_path)

    _, calls = make("cpu")
    assert [c.split()[0] for c in calls] == ["cxx", "cxx"], calls
    out, calls = make("train")
    said = [line for line in out.splitlines() if line.startswith("make train:")]
    assert said == ["make train: train_gpt2_ls is the host build of `make cpu` (CPU only): training with it; "
                    "`make train HOST_BUILD=0` rebuilds it with nvcc"], out
    assert len(calls) == 1 and calls[0].startswith("run cxx-built ./train_gpt2_ls -i "), calls  # no rebuild
    out, calls = make("train", "TRAIN_ARGS=-x 7")  # again, other flags: still the host build
    assert len(calls) == 1 and calls[0].startswith("run cxx-built ") and calls[0].endswith(" -x 7"), calls
    (src / "train_gpt2_ls.cu").write_text("int main() { return 0; }\n")  # a source changed: the host compiler
    _, calls = make("train")
    assert [c.split()[0] for c in calls] == ["cxx", "run"] and calls[1].startswith("run cxx-built "), calls
    # asked for nvcc: the kernels by nvcc, the CPU kernel drivers, cuBLASLt's loader, the host unit and
    # launch_collective.cpp (MPI and NCCL as detected) by the host compiler, linked by nvcc without
    # -lcublasLt, no note
    out, calls = make("train", "HOST_BUILD=0")
    assert "make train:" not in out
    assert [c.split()[0] for c in calls] == ["nvcc", "cxx", "cxx", "cxx", "cxx", "nvcc", "run"], calls
    assert " -c llmc/cuda/backend_entry.cu " in calls[0] and " -c llmc/cpu/kernel_instances.cpp " in calls[1], calls
    assert " -c llmc/cuda/cublaslt_loader.cpp " in calls[2], calls
    assert "-DLLMC_CUDA_BACKEND=1" in calls[3] and "-include llmc/cpu/kernel_instances.h" in calls[3], calls
    assert " -c train_gpt2_ls.cu " in calls[3] and "USE_MPI" not in calls[3] and "USE_NCCL" not in calls[3], calls
    assert " -c llmc/app/launch_collective.cpp -o build/obj/launch_collective-mpiauto-ncclauto.o" in calls[4], calls
    assert " build/obj/cublaslt_loader.o " in calls[5] and "-lcublasLt" not in calls[5], calls
    assert " build/obj/train_gpt2_ls.o build/obj/launch_collective-mpiauto-ncclauto.o " in calls[5], calls
    assert calls[6].startswith("run nvcc-built "), calls
    _, calls = make("train")  # the last build was nvcc's: it stays
    assert len(calls) == 1 and calls[0].startswith("run nvcc-built "), calls
    # a machine without a GPU: make train builds and trains with the host compiler, and says so
    env["NVIDIA_SMI"] = "false"
    out, calls = make("train")
    said = [line for line in out.splitlines() if line.startswith("make train:")]
    assert said == ["make train: no GPU on this machine (nvidia-smi lists none): training with the host build of "
                    "train_gpt2_ls (CPU only); `make train HOST_BUILD=0` builds it with nvcc"], out
    assert [c.split()[0] for c in calls][-1] == "run" and calls[-1].startswith("run cxx-built "), calls
    assert all(not c.startswith("nvcc") for c in calls), calls
    make("cpu")
    # any goal but train: the CUDA build, as the help says `make` does (its objects are current: a link)
    _, calls = make("train_gpt2_ls")
    assert [c.split()[0] for c in calls] == ["nvcc"] and " build/obj/train_gpt2_ls.o " in calls[0], calls


def test_cublaslt_lazy_0_links_the_library_and_a_switch_relinks(tmp_path):
    """`make CUBLASLT_LAZY=0` links -lcublasLt instead of the loader (the fallback should the loader fail on
    a machine); switching either way relinks the programs (build/cublaslt-link), and then nothing more."""
    src, env, make = fake_build(tmp_path)
    _, calls = make("train_gpt2_ls", "generate_gpt2_ls", "HOST_BUILD=0")
    links = [c for c in calls if c.startswith("nvcc") and " -c " not in c]
    assert len(links) == 2 and all("cublaslt_loader.o" in c and "-lcublasLt" not in c for c in links), calls
    _, calls = make("train_gpt2_ls", "generate_gpt2_ls", "HOST_BUILD=0", "CUBLASLT_LAZY=0")
    links = [c for c in calls if c.startswith("nvcc") and " -c " not in c]
    assert len(links) == 2 and all("cublaslt_loader.o" not in c and "-lcublasLt" in c for c in links), calls
    assert (src / "build" / "cublaslt-link").read_text().strip() == "linked"
    _, calls = make("train_gpt2_ls", "generate_gpt2_ls", "HOST_BUILD=0", "CUBLASLT_LAZY=0")
    assert not [c for c in calls if c.startswith(("nvcc", "cxx"))], calls  # up to date
    _, calls = make("train_gpt2_ls", "generate_gpt2_ls", "HOST_BUILD=0")
    links = [c for c in calls if c.startswith("nvcc") and " -c " not in c]
    assert len(links) == 2 and all("cublaslt_loader.o" in c for c in links), calls


def test_another_cuda_arch_rebuilds_the_device_code(tmp_path):
    """A new-user trial: after a build with CUDA_ARCH=90 (exp_pg19.sh's), `make` (default "80 90") said the
    trainer was up to date: an sm_90-only binary, no kernel image for an A100. build/cuda-arch names the list;
    another one recompiles the device code and relinks, the same one does nothing."""
    src, env, make = fake_build(tmp_path)
    make("train_gpt2_ls", "HOST_BUILD=0", "CUDA_ARCH=90")
    q = subprocess.run(["make", "-q", "train_gpt2_ls", "HOST_BUILD=0", "CUDA_ARCH=80 90"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=60)
    assert q.returncode != 0, q.stdout + q.stderr
    _, calls = make("train_gpt2_ls", "HOST_BUILD=0", "CUDA_ARCH=80 90")
    device = [c for c in calls if c.startswith("nvcc") and "backend_entry.cu" in c]
    assert len(device) == 1 and "arch=compute_80" in device[0] and "arch=compute_90" in device[0], calls
    assert any(c.startswith("nvcc") and " -c " not in c and "-o train_gpt2_ls" in c for c in calls), calls
    assert (src / "build" / "cuda-arch").read_text().strip() == "80 90"
    _, calls = make("train_gpt2_ls", "HOST_BUILD=0", "CUDA_ARCH=80 90")
    assert calls == [], calls


def test_each_program_rebuilds_only_when_its_own_compiler_changes(tmp_path):
    """Each program has its own compiler stamp: on a machine without a GPU, `make train` (the host build of
    the trainer) and an nvcc build of the generator alternate without rebuilding either, and a switch of one
    program's compiler rebuilds that program only. `make generate_gpt2_ls` there follows `make train`: the
    host build, one line says so."""
    src, env, make = fake_build(tmp_path)
    env["NVIDIA_SMI"] = "false"  # no GPU
    _, calls = make("train")
    assert [c.split()[0] for c in calls] == ["cxx", "run"], calls
    _, calls = make("generate_gpt2_ls", "HOST_BUILD=0")
    assert [c.split()[0] for c in calls] == ["nvcc", "cxx", "cxx", "cxx", "nvcc"], calls
    out, calls = make("train")  # the trainer's compiler did not change: no rebuild
    assert len(calls) == 1 and calls[0].startswith("run cxx-built ./train_gpt2_ls "), calls
    _, calls = make("generate_gpt2_ls", "HOST_BUILD=0")
    assert calls == [], calls
    for args in (["train_gpt2_ls", "HOST_BUILD=1"], ["generate_gpt2_ls", "HOST_BUILD=0"]):  # -q and -n say so too
        q = subprocess.run(["make", "-q"] + args, cwd=src, env=env, capture_output=True, text=True, timeout=60)
        assert q.returncode == 0, (args, q.stdout + q.stderr)
    out, calls = make("generate_gpt2_ls")  # as make train: the host build, rebuilt by the host compiler
    said = [line for line in out.splitlines() if line.startswith("make generate_gpt2_ls:")]
    assert said == ["make generate_gpt2_ls: no GPU on this machine (nvidia-smi lists none): the host build of "
                    "generate_gpt2_ls (CPU only), as make train's; `make generate_gpt2_ls HOST_BUILD=0` builds it "
                    "with nvcc"], out
    assert [c.split()[0] for c in calls] == ["cxx"] and " generate_gpt2_ls.cu -o generate_gpt2_ls" in calls[0], calls
    _, calls = make("train")
    assert len(calls) == 1 and calls[0].startswith("run cxx-built "), calls
    env["NVIDIA_SMI"] = str(tmp_path / "fake-nvidia-smi")  # a GPU: the host build of make cpu stays
    out, calls = make("generate_gpt2_ls")
    assert calls == [] and "make generate_gpt2_ls: generate_gpt2_ls is the host build of `make cpu` (CPU only): " \
        "keeping it; `make generate_gpt2_ls HOST_BUILD=0` rebuilds it with nvcc" in out, out


def test_make_help_prints_the_makefiles_header():
    """`make help` is the Makefile's header comment (its one list of targets and variables), every
    target the README's commands use included."""
    p = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert p.returncode == 0, p.stderr
    header = []
    for line in (REPO / "Makefile").read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(re.sub(r"^# ?", "", line))
    assert [line for line in p.stdout.splitlines() if not line.startswith("make: no nvcc")] == header
    for target in ["make ", "make cpu", "make train", "make test", "make deps", "make help", "HOST_BUILD", "NVCC"]:
        assert target in p.stdout, target


def documented_make_commands():
    """{file name: [argument lists of the `make ...` commands]} in README.md and docs/*.md: code spans and
    lines of code blocks that start with `make` (up to a `&&`, a `;` or a comment)."""
    found = {}
    for f in [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md")):
        text = f.read_text()
        cmds = re.findall(r"`(make(?: [^`]*)?)`", text)
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
            cmds += [line.split("#")[0] for line in block.splitlines() if re.match(r"\s*make( |$)", line)]
        found[f.name] = [shlex.split(re.split(r"&&|;", c)[0])[1:] for c in cmds]
    return found


def test_make_help_names_every_target_and_variable_the_docs_use():
    """Every target and variable of a `make` command in README.md or docs/*.md is in `make help` (a target
    as a word, a path target as itself or its folder + /NAME, a variable as NAME=); upper-case words without
    `=` are placeholders (`make deps X`). The help shows make train's defaults as the Makefile sets them."""
    p = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert p.returncode == 0, p.stderr
    help_text = p.stdout
    commands = documented_make_commands()
    assert len(commands["README.md"]) >= 10, commands["README.md"]  # the extraction finds the README's commands
    missing = []
    for doc, cmds in commands.items():
        for args in cmds:
            for a in args:
                if "=" in a:
                    name = a.split("=", 1)[0]
                    ok = f"{name}=" in help_text
                elif "/" in a:
                    ok = re.search(rf"(^|\s){re.escape(a)}(\s|$)", help_text, re.M) is not None or \
                        f"{a.rsplit('/', 1)[0]}/NAME" in help_text
                elif a.isupper() or a.startswith("-"):
                    continue
                else:
                    ok = re.search(rf"(?<![\w/-]){re.escape(a)}(?![\w-])", help_text) is not None
                if not ok:
                    missing.append(f"{doc}: make {' '.join(args)}: {a}")
    assert not missing, "not in `make help`:\n" + "\n".join(missing)
    for var in ["TRAIN_ARGS", "TRAIN_OUT"]:
        value = subprocess.run(["make", "--no-print-directory", "-s", "--eval", f"print-value: ; @echo '$({var})'",
                                "print-value"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout.strip()
        value = (value.splitlines() or [""])[-1]  # after a possible "no nvcc" line; TRAIN_ARGS is empty
        assert re.search(rf"{var}=\"?{re.escape(value)}\"?(\s|$)", help_text, re.M), (var, value)


@pytest.mark.parametrize("nvcc, expect", [
    ("nvcc", "== in the background, log B/background.log: the emulated GPU tests and kernels (make test-emu: "
     "scripts/gpu_check.sh --emulate; ASan + UBSan, two schedules), then the fuzz smoke test (make fuzz-smoke), "
     "then pytest P =="),
    ("", "== in the background, log B/background.log: the fuzz smoke test (make fuzz-smoke) =="),
])
def test_make_test_says_what_runs_in_the_background(tmp_path, nvcc, expect):
    """make test's '== in the background' line, its recipe line run alone in a scratch Makefile (with the
    Makefile's helper variables such as $(comma)): a comma inside $(if ...) once made "then" the else branch,
    so the line dropped "then" with nvcc and began with it without."""
    lines = (REPO / "Makefile").read_text().splitlines()
    recipe = [ln for ln in lines if ln.startswith('\t@echo "== in the background')]
    assert len(recipe) == 1, recipe
    helpers = [ln for ln in lines if re.match(r"(comma|empty|space) :?=", ln)]
    (tmp_path / "Makefile").write_text("\n".join(helpers + ["line:", recipe[0]]) + "\n")
    background = "P" if nvcc else ""  # PYTEST_BACKGROUND is set only where nvcc is found
    p = subprocess.run(["make", "--no-print-directory", "-s", "line", f"NVCC_FOUND={nvcc}", "BUILD=B",
                        f"PYTEST_BACKGROUND={background}"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert p.returncode == 0 and p.stdout == expect + "\n", p.stdout + p.stderr
