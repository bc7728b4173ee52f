"""scripts/export_hf.py (docs/export.md): tiny models trained by the train_gpt2_ls binary are exported
and loaded with Hugging Face transformers; their logits must equal the trainer's own
`--eval-only --dump-logits` on the same tokens. A plain GPT-2 must come out as a stock
GPT2LMHeadModel (no custom code), anything else (local heads, QK-norm, soft-cap, untied head, no
biases, erf GELU) as the exported modelling file loaded with trust_remote_code=True.

torch, transformers and safetensors are test dependencies (requirements-test.txt, installed by
scripts/install_deps.sh): without them this module fails to import, which fails the run.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local: never wait on a hub
import safetensors  # a missing test dependency must fail, not skip
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel

from run_helpers import REPO, SHARED, gpt2_tinyshakespeare, run, shakespeare_bytes, write_byte_data

EXPORT = REPO / "scripts" / "export_hf.py"

# fp32 on both sides, different summation orders: every logit within ATOL + RTOL * |logit|.
# Measured: the largest difference is about 1e-6 on logits of magnitude up to ~10 (docs/export.md).
ATOL, RTOL = 1e-5, 1e-5


def train(args, timeout=600):
    """The trainer on the CPU with one thread (run_helpers.run); a failure fails the test."""
    return run(["--threads", 1] + list(args), timeout=timeout)


def export(source, out, *extra, check=True):
    p = subprocess.run([sys.executable, str(EXPORT), str(source), str(out)] + [str(e) for e in extra], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        pytest.fail(f"export_hf.py {source} {out} failed ({p.returncode}):\n{p.stderr}")
    return p


def read_tokens(glob_dir, split, n):
    """The first n tokens of a split's first shard (all our eval batches start there)."""
    return np.fromfile(Path(glob_dir) / f"{split}_000000.bin", dtype=np.uint16, offset=1024)[:n].astype(np.int64)


@pytest.fixture(scope="module")
def byte_data(tmp_path_factory):
    """Byte-level shards (V = 256, EOT = '\\n') of tiny Shakespeare: 40 kB train, 4 kB val (this module's own,
    smaller than the session's byte_data of test/conftest.py)."""
    return write_byte_data(tmp_path_factory.mktemp("bytes"), shakespeare_bytes(44_000, required=True), [40_000],
                           meta={"vocab_size": 256, "eot_token": 10, "tokenizer": "bytes"})


@pytest.fixture(scope="module")
def gpt2_data():
    return gpt2_tinyshakespeare()


def trainer_logits(model_file, data, B, T, V, tmp_path):
    dump = tmp_path / "logits.bin"
    train(["--eval-only", "-e", model_file, "-j", f"{data}/val_*.bin", "-b", B, "-t", T, "-m", 1,
           "--dump-logits", dump])
    return np.fromfile(dump, dtype=np.float32).reshape(B, T, V)


def hf_logits(model, data, B, T):
    idx = torch.from_numpy(read_tokens(data, "val", B * T).reshape(B, T))
    with torch.no_grad():
        return model(input_ids=idx).logits.numpy()


def assert_logits_equal(hf, ref):
    """hf: the exported model's logits; ref: the trainer's (or the PyTorch reference's), float64."""
    assert hf.shape == ref.shape, (hf.shape, ref.shape)
    diff = np.abs(hf.astype(np.float64) - ref)
    worst = np.unravel_index(np.argmax(diff / (ATOL + RTOL * np.abs(ref))), ref.shape)
    assert np.all(diff <= ATOL + RTOL * np.abs(ref)), \
        f"max |diff| {diff.max():.3e} at {worst}: exported {hf[worst]:.6f} vs expected {ref[worst]:.6f}"
    assert ref.std() > 0.1, "the logits should not be near-constant (the comparison would be weak)"


def test_plain_gpt2_becomes_a_stock_gpt2_model_with_tokenizer(gpt2_data, tmp_path):
    run = tmp_path / "mhsa"
    train(["-i", f"{gpt2_data}/train_*.bin", "-o", run, "--layers", 2, "--channels", 32, "--heads", 4,
           "--global-heads", 4, "--max-seq-len", 64, "-b", 2, "-t", 64, "-x", 6, "-l", "1e-2", "-u", 2,
           "-v", 0, "-s", 0])
    out = tmp_path / "hf"
    p = export(run, out)
    assert "GPT2LMHeadModel" in p.stdout and "model_00000006.bin" in p.stdout
    assert "GPT-2 tokenizer" in p.stdout and "trust_remote_code" not in p.stdout
    assert p.stderr == ""  # the tokenizer was written: no note says otherwise
    conf = json.loads((out / "config.json").read_text())
    assert conf["model_type"] == "gpt2" and conf["architectures"] == ["GPT2LMHeadModel"]
    assert "auto_map" not in conf and not list(out.glob("*.py")), "a stock model needs no custom code"
    assert not (out / "generation_config.json").exists(), "the data's vocabulary is the model's: nothing to suppress"
    model = AutoModelForCausalLM.from_pretrained(out)  # no trust_remote_code
    assert type(model) is GPT2LMHeadModel
    model.eval()

    B, T = 2, 64
    assert_logits_equal(hf_logits(model, gpt2_data, B, T), trainer_logits(run / "model_00000006.bin", gpt2_data,
                                                                           B, T, 50257, tmp_path))

    # the exported GPT-2 tokenizer reproduces the shard's token ids from the text
    tok = AutoTokenizer.from_pretrained(out)
    ids = read_tokens(gpt2_data, "val", 2000)[1:1500].tolist()  # the val split starts with EOT
    text = tok.decode(ids)
    assert tok(text)["input_ids"] == ids
    assert tok.eos_token_id == 50256 == model.config.eos_token_id


@pytest.mark.parametrize("name,flags,stock", [
    ("ls_qknorm_softcap_untied", ["--global-heads", 1, "--window", 8, "--qk-norm", "--attn-softcap", 3,
                                  "--untie-embeddings"], False),
    ("ls_softcap", ["--global-heads", 2, "--window", 5, "--attn-softcap", 2], False),
    ("window_covers_max_seq_len", ["--global-heads", 1, "--window", 64], True),
    # the paper's configuration: no biases, exact GELU, untied head, local heads + one global head
    ("ls_nobias_erf_untied", ["--global-heads", 1, "--window", 8, "--bias", 0, "--gelu", "erf",
                              "--untie-embeddings"], False),
    # a plain GPT-2 with the exact GELU is still stock (activation_function "gelu"); without biases it
    # is not (GPT2LMHeadModel always has them)
    ("mhsa_erf", ["--global-heads", 4, "--gelu", "erf"], True),
    ("mhsa_nobias", ["--global-heads", 4, "--bias", 0], False),
])
def test_byte_level_models(byte_data, tmp_path, name, flags, stock):
    run = tmp_path / name
    erf = "erf" in flags
    # erf GELU runs train at lr 5e-2, so that the MLP's pre-activations grow to where the erf and tanh GELU
    # differ (measured: the tanh GELU then misses the bound 10x; after 8 steps at 1e-2 it stays within it)
    lr = "5e-2" if erf else "1e-2"
    train(["-i", f"{byte_data}/train_*.bin", "-o", run, "--layers", 2, "--channels", 32, "--heads", 4,
           "--max-seq-len", 64, "-b", 4, "-t", 32, "-x", 8, "-l", lr, "-u", 2, "-v", 0, "-s", 0] + flags)
    out = tmp_path / "hf"
    export(run / "model_00000008.bin", out)
    conf = json.loads((out / "config.json").read_text())
    assert not (out / "vocab.json").exists(), "a byte-level run has no GPT-2 tokenizer to export"
    assert not (out / "generation_config.json").exists(), "the data's vocabulary is the model's: nothing to suppress"
    # erf GELU is transformers' "gelu", the tanh approximation "gelu_new"
    assert conf["activation_function"] == ("gelu" if erf else "gelu_new")
    assert conf["train_gpt2_ls"]["bias"] == ("--bias" not in flags)
    assert conf["train_gpt2_ls"]["gelu"] == ("erf" if erf else "tanh")
    if stock:
        assert conf["model_type"] == "gpt2" and not list(out.glob("*.py"))
        model = AutoModelForCausalLM.from_pretrained(out)
        assert type(model) is GPT2LMHeadModel
    else:
        assert conf["model_type"] == "gpt2_ls" and (out / "modeling_gpt2_ls.py").exists()
        with pytest.raises(ValueError, match="trust_remote_code"):
            AutoModelForCausalLM.from_pretrained(out, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
        assert type(model).__name__ == "GPT2LSForCausalLM"
        assert conf["bias"] == ("--bias" not in flags)
        # every exported tensor was loaded (none left at its initialization) and, without biases, none exists
        names = set(safetensors.safe_open(str(out / "model.safetensors"), "pt").keys())
        assert names == set(model.state_dict().keys())
        assert any(n.endswith(".bias") for n in names) == conf["bias"]
    model.eval()
    # greedy generate (no KV cache in GPT2LSForCausalLM) continues exactly like repeated full forwards
    prompt = torch.from_numpy(read_tokens(byte_data, "val", 40)[None, :])
    seq = prompt
    with torch.no_grad():
        for _ in range(8):
            seq = torch.cat([seq, model(input_ids=seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
    gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False,
                         pad_token_id=0)
    n = gen.shape[1]  # shorter than seq only when it stopped at EOS
    assert n > prompt.shape[1] and gen.tolist() == seq[:, :n].tolist()
    # T = 64 > P: the local windows matter; the model's full context
    B, T = 2, 64
    ref = trainer_logits(run / "model_00000008.bin", byte_data, B, T, 256, tmp_path)
    assert_logits_equal(hf_logits(model, byte_data, B, T), ref)
    if erf:  # the comparison tells the GELUs apart: the same folder read with the tanh GELU misses the bound
        (out / "config.json").write_text(json.dumps(dict(conf, activation_function="gelu_new")))
        tanh_model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=not stock).eval()
        with pytest.raises(AssertionError, match=r"max \|diff\|"):
            assert_logits_equal(hf_logits(tanh_model, byte_data, B, T), ref)


@pytest.mark.parametrize("flags,stock", [(["--global-heads", 2], True), (["--global-heads", 1, "--window", 4], False)])
def test_a_vocab_padded_above_the_datas_is_never_sampled(byte_data, tmp_path, flags, stock):
    """trial 5 F11: a run with --vocab above its data's (nanoGPT's 50304 for 50257; here 384 for the bytes' 256)
    exported every row, and transformers' generate(do_sample=True) drew ids no token has, which the trainer and
    generate_gpt2_ls never draw. The rows stay (the logits still equal --dump-logits) and generation_config.json
    suppresses the ids [256, 384)."""
    run = tmp_path / "run"
    train(["-i", f"{byte_data}/train_*.bin", "-j", f"{byte_data}/val_*.bin", "-o", run, "--vocab", 384,
           "--layers", 1, "--channels", 16, "--heads", 2, "--max-seq-len", 32, "-b", 2, "-t", 32, "-x", 4,
           "-l", "1e-2", "-u", 1, "-v", 0, "-s", 0] + flags)
    out = tmp_path / "hf"
    p = export(run, out)
    assert "generation_config.json suppresses ids 256..383 (above the data's vocabulary of 256)" in p.stdout, p.stdout
    gen_conf = json.loads((out / "generation_config.json").read_text())
    assert gen_conf["suppress_tokens"] == list(range(256, 384)), gen_conf
    assert gen_conf["eos_token_id"] == gen_conf["bos_token_id"] == 10, gen_conf
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=not stock).eval()
    assert (type(model) is GPT2LMHeadModel) == stock and model.config.vocab_size == 384
    assert model.generation_config.eos_token_id == 10
    B, T = 2, 32
    assert_logits_equal(hf_logits(model, byte_data, B, T),
                        trainer_logits(run / "model_00000004.bin", byte_data, B, T, 384, tmp_path))

    prompt = torch.from_numpy(read_tokens(byte_data, "val", 8)[None, :])

    def sample(**kw):
        torch.manual_seed(0)
        with torch.no_grad():
            out_ids = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, max_new_tokens=24,
                                     min_new_tokens=24, num_return_sequences=8, pad_token_id=0, **kw)
        return out_ids[:, prompt.shape[1]:].flatten().tolist()

    drawn = sample()
    assert len(drawn) == 8 * 24 and max(drawn) < 256, sorted(set(drawn))[-5:]
    # the check has teeth: the same model sampled without the suppression draws padded ids
    assert max(sample(suppress_tokens=None)) >= 256  # measured: 12 and 15 of the 192


FIXTURES = ["ls", "mhsa", "local_qknorm_softcap", "ls_p1_qknorm", "paper", "ls_hd32", "mhsa_hd32",
            "local_qknorm_softcap_hd32", "paper_qknorm_hd32"]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixtures_match_the_pytorch_reference(name, tmp_path):
    """The committed fixtures (dev/reference/README.md: all-local, P = 1, QK-norm, soft-cap, untied,
    no biases with erf GELU, bf16 payloads) exported and run by transformers give the independent
    reference's float64 logits."""
    sys.path.insert(0, str(REPO / "dev" / "reference"))
    from debug_state import read_debug
    ref = read_debug(REPO / "test" / "fixtures" / f"{name}_debug.bin")
    out = tmp_path / "hf"
    export(REPO / "test" / "fixtures" / f"{name}_model.bin", out)
    stock = name.startswith("mhsa")
    assert json.loads((out / "config.json").read_text())["model_type"] == ("gpt2" if stock else "gpt2_ls")
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=not stock).eval()
    assert (type(model) is GPT2LMHeadModel) == stock
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ref.inputs.astype(np.int64))).logits.numpy()
    assert_logits_equal(logits, ref.logits.astype(np.float64))


def test_bad_input_fails_with_one_line_and_writes_nothing(byte_data, tmp_path):
    missing = export(tmp_path / "nope", tmp_path / "o1", check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("error: ") and missing.stderr.count("\n") == 1
    assert "run directory" in missing.stderr and not (tmp_path / "o1").exists()

    empty_run = tmp_path / "run"
    empty_run.mkdir()
    (empty_run / "model_00000004.bin").write_bytes(b"x" * 2000)  # no DONE_ marker: not a checkpoint
    p = export(empty_run, tmp_path / "o2", check=False)
    assert p.returncode == 1 and "no complete checkpoint" in p.stderr and not (tmp_path / "o2").exists()

    (empty_run / "DONE_00000004").write_text("step 4 world_size 1")
    p = export(empty_run, tmp_path / "o3", check=False)  # marked, but the model file is garbage
    assert p.returncode == 1 and p.stderr.startswith("error: ") and "magic" in p.stderr
    assert not (tmp_path / "o3").exists() and not list(tmp_path.glob("o3.tmp*"))

    small = REPO / "test" / "fixtures" / "ls_model.bin"  # V = 100: not a GPT-2 BPE model
    p = export(small, tmp_path / "o4", "--gpt2-bpe", SHARED / "gpt2", check=False)
    assert p.returncode == 1 and "drop --gpt2-bpe" in p.stderr and not (tmp_path / "o4").exists()
    p = export(small, tmp_path / "o5", "--gpt2-bpe", tmp_path, check=False)
    assert p.returncode == 1 and "--gpt2-bpe" in p.stderr and not (tmp_path / "o5").exists()

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    p = export(empty_run, taken, check=False)
    assert p.returncode == 1 and "already exists" in p.stderr
    assert [f.name for f in taken.iterdir()] == ["keep.txt"] and (taken / "keep.txt").read_text() == "mine"


def test_a_pruned_step_names_the_steps_that_exist(tmp_path):
    """trial 10: a model file --keep-checkpoints pruned said only "does not exist; give a run directory"; the
    export lists the run's complete checkpoints as the trainer's --eval-only does (first 2, newest 3)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for step in range(1, 9):
        (run_dir / f"DONE_{step:08d}").write_text(f"step {step} world_size 1")
    p = export(run_dir / "model_00000009.bin", tmp_path / "o", check=False)
    assert p.returncode == 1 and p.stderr == (
        f"error: {run_dir}/model_00000009.bin does not exist; {run_dir} holds the complete checkpoints of steps "
        f"1, 2, ..., 6, 7, 8 (8; the newest: {run_dir}/model_00000008.bin)\n"), p.stderr
    assert not (tmp_path / "o").exists()
    # one checkpoint: "step 2 (...)", not "steps 2 (1; the newest: ...)"
    one = tmp_path / "one"
    one.mkdir()
    (one / "DONE_00000002").write_text("step 2 world_size 1")
    p = export(one / "model_00000009.bin", tmp_path / "o", check=False)
    assert p.returncode == 1 and p.stderr == (
        f"error: {one}/model_00000009.bin does not exist; {one} holds the complete checkpoint of step 2 "
        f"({one}/model_00000002.bin)\n"), p.stderr


def test_a_training_state_file_and_an_llmc_checkpoint_are_named_with_the_fix(byte_data, tmp_path):
    """A new-user trial: RUN/state_N_R.bin and llm.c's gpt2_*.bin got "bad magic ... not one of our model
    checkpoints". Each is named for what it is, with what to export instead (the trainer's words for a state file);
    the llm.c one with the trainer command that writes its weights unchanged as a model file of ours, which is
    followed here (on byte-level data, as the file's vocabulary is 256) and exports."""
    import shlex
    sys.path.insert(0, str(REPO / "dev" / "reference"))
    from checkpoint import read_model
    out = tmp_path / "run"
    run(["-i", f"{byte_data}/train_*.bin", "-o", out, "--layers", 1, "--channels", 16, "--heads", 2, "--max-seq-len",
         16, "-b", 1, "-t", 16, "-x", 1, "-u", 1, "-v", 0, "-s", 0, "--threads", 1])
    p = export(out / "state_00000001_00000.bin", tmp_path / "o1", check=False)
    assert p.returncode == 1 and p.stderr == (f"error: {out}/state_00000001_00000.bin: a training-state file "
                                              f"(optimizer state), not a model; pass the model file "
                                              f"{out}/model_00000001.bin (or the run directory {out})\n"), p.stderr
    assert not (tmp_path / "o1").exists()

    maxT, V, nl, nh, C = 64, 256, 1, 2, 16  # llm.c's header: magic, version 3 (fp32), maxT, V, L, NH, C, Vp
    sizes = [V * C, maxT * C, nl * C, nl * C, nl * 3 * C * C, nl * 3 * C, nl * C * C, nl * C, nl * C, nl * C,
             nl * 4 * C * C, nl * 4 * C, nl * C * 4 * C, nl * C, C, C]
    params = np.random.default_rng(3).normal(0, 0.05, sum(sizes)).astype(np.float32)
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [20240326, 3, maxT, V, nl, nh, C, V]
    llmc = tmp_path / "gpt2_tiny.bin"
    llmc.write_bytes(h.tobytes() + params.tobytes())
    p = export(llmc, tmp_path / "o2", check=False)
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith(f"error: {llmc}: an llm.c GPT-2 checkpoint (magic 20240326), not a train_gpt2_ls model "
                               "file (magic 20250521); export_hf.py exports train_gpt2_ls checkpoints"), lines[0]
    assert "bad magic" not in lines[0] and not (tmp_path / "o2").exists()
    cmd = lines[0].split(": ./train_gpt2_ls ", 1)[1].split(", then ")[0]
    assert lines[0].endswith(", then python3 scripts/export_hf.py RUN OUT_DIR"), lines[0]
    words = [w.replace("data/shards/tinyshakespeare_gpt2", str(byte_data)) for w in shlex.split(cmd)]
    conv = tmp_path / "converted"
    run([str(conv) if w == "RUN" else w for w in words] + ["--threads", 1])
    cfg, flat, step = read_model(conv / "model_00000001.bin")
    assert np.array_equal(flat, params) and (cfg.vocab_size, cfg.max_seq_len, cfg.global_heads) == (V, maxT, nh)
    p = export(conv, tmp_path / "hf")
    assert "GPT2LMHeadModel" in p.stdout


def test_gpt2_data_prepared_with_gpt2_bpe_dir_exports_its_tokenizer(tmp_path):
    """A new-user trial from a clone not beside ../shared: make data-tinyshakespeare SHARED_DATA=DIR gives the BPE
    files in GPT2_BPE_DIR; meta.json recorded none, and the export fell back to ../shared/data/gpt2 beside the
    repository: "the data used GPT-2 BPE but its vocab files were not found". meta.json now records the directory
    used, and the export copies the tokenizer from it with no fallback to find (SHARED_DATA pointing nowhere)."""
    import shutil
    bpe = tmp_path / "elsewhere" / "gpt2"
    bpe.mkdir(parents=True)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(SHARED / "gpt2" / name, bpe / name)
    (tmp_path / "t.txt").write_text(shakespeare_bytes(30_000, required=True).decode("utf-8", "replace"))
    data = tmp_path / "data"
    subprocess.run([sys.executable, "data/prepare.py", "--dataset", "text", "--source", str(tmp_path / "t.txt"),
                    "--out", str(data), "--tokenizer", "gpt2", "--workers", "1"], cwd=REPO, check=True,
                   capture_output=True, env=dict(os.environ, GPT2_BPE_DIR=str(bpe)))
    out = tmp_path / "run"
    train(["-i", f"{data}/train_*.bin", "-o", out, "--layers", 1, "--channels", 16, "--heads", 2, "--max-seq-len", 16,
           "-b", 1, "-t", 16, "-x", 1, "-u", 1, "-v", 0, "-s", 0])
    p = subprocess.run([sys.executable, str(EXPORT), str(out), str(tmp_path / "hf")], cwd=REPO, capture_output=True,
                       text=True, timeout=600, env=dict(os.environ, SHARED_DATA=str(tmp_path / "nowhere")))
    assert p.returncode == 0 and p.stderr == "" and "GPT-2 tokenizer" in p.stdout, p.stderr
    assert (tmp_path / "hf" / "vocab.json").read_bytes() == (bpe / "encoder.json").read_bytes()


def test_a_checkpoint_beside_another_models_record_is_refused(byte_data, tmp_path):
    """A re-trial: a model file copied beside another run's config.json was exported with that run's data
    vocabulary and tokenizer (its suppress_tokens hid most of the model's vocabulary). Refused, as the
    trainer and the generator refuse it, naming the fields; the run's own checkpoint still exports."""
    import json
    import shutil
    out = tmp_path / "run"
    run(["-i", f"{byte_data}/train_*.bin", "-o", out, "--layers", 1, "--channels", 16, "--heads", 2, "--max-seq-len",
         16, "-b", 1, "-t", 16, "-x", 1, "-u", 1, "-v", 0, "-s", 0, "--threads", 1])
    other = tmp_path / "other"
    other.mkdir()
    record = json.loads((out / "config.json").read_text())
    record["model"]["vocab_size"], record["model"]["window"] = 300, 4
    (other / "config.json").write_text(json.dumps(record))
    shutil.copy(out / "model_00000001.bin", other / "model_00000001.bin")
    p = export(other / "model_00000001.bin", tmp_path / "hf", check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith(f"error: {other / 'model_00000001.bin'} is another model than "
                               f"{other / 'config.json'} beside it records (vocab_size 256 vs 300, window 50 vs 4): "
                               "the two files are of different runs"), p.stderr
    assert not (tmp_path / "hf").exists()
    export(out / "model_00000001.bin", tmp_path / "hf_own")


def test_export_of_a_run_whose_data_was_renamed_says_why_it_has_no_tokenizer(byte_data, tmp_path):
    """trial 3 F22: after the run's data directory was renamed, the export wrote "no tokenizer" without saying
    why; a note now names the training data config.json records, which is not found."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(byte_data, data)
    out = tmp_path / "run"
    run(["-i", f"{data}/train_*.bin", "-o", out, "--layers", 1, "--channels", 16, "--heads", 2, "--max-seq-len", 16,
         "-b", 1, "-t", 16, "-x", 1, "-u", 1, "-v", 0, "-s", 0, "--threads", 1])
    data.rename(tmp_path / "renamed")
    p = export(out, tmp_path / "hf")
    notes = [ln for ln in p.stderr.splitlines() if ln.startswith("note:")]
    assert any(f"{out}/config.json names the training data '{data}/train_*.bin'" in n and "not found" in n and
               "exported without a tokenizer" in n for n in notes), p.stderr


def test_ls_export_says_trust_remote_code_and_its_tokenizer_loads_with_it(gpt2_data, tmp_path):
    """An LS export's config.json names modeling_gpt2_ls.py: the summary line says trust_remote_code=True,
    and with it AutoTokenizer loads the GPT-2 tokenizer offline."""
    run = tmp_path / "ls"
    train(["-i", f"{gpt2_data}/train_*.bin", "-o", run, "--layers", 1, "--channels", 16, "--heads", 2,
           "--global-heads", 1, "--window", 4, "--max-seq-len", 16, "-b", 1, "-t", 16, "-x", 1, "-u", 1,
           "-v", 0, "-s", 0])
    out = tmp_path / "hf"
    p = export(run, out)
    assert p.stderr == "", p.stderr
    assert "GPT2LSForCausalLM, GPT-2 tokenizer; load with trust_remote_code=True" in p.stdout
    assert f"AutoTokenizer.from_pretrained('{out}', trust_remote_code=True)" in p.stdout
    tok = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    assert tok("Hello world")["input_ids"] == [15496, 995]


def test_sentencepiece_export_writes_the_tokenizer_model_and_says_how_to_load_it(tmp_path):
    """A run on SentencePiece data: the export holds the data's tokenizer.model, and one note on stderr says that
    transformers cannot load it here, and how to encode with it."""
    import sentencepiece
    data = tmp_path / "sp"
    (tmp_path / "sp.txt").write_text(shakespeare_bytes(40_000, required=True).decode("utf-8", "replace"))
    subprocess.run([sys.executable, "data/prepare.py", "--dataset", "text", "--source", str(tmp_path / "sp.txt"),
                    "--out", str(data), "--tokenizer", "sp", "--vocab-size", "400", "--workers", "1"], cwd=REPO,
                   check=True, capture_output=True)
    run = tmp_path / "run"
    train(["-i", f"{data}/train_*.bin", "-o", run, "--layers", 1, "--channels", 16, "--heads", 2,
           "--max-seq-len", 16, "-b", 1, "-t", 16, "-x", 1, "-u", 1, "-v", 0, "-s", 0])
    out = tmp_path / "hf"
    p = export(run, out)
    assert (out / "tokenizer.model").read_bytes() == (data / "tokenizer.model").read_bytes()
    assert "SentencePiece tokenizer.model" in p.stdout
    notes = p.stderr.strip().splitlines()
    assert len(notes) == 1 and notes[0].startswith("note: ") and "sentencepiece.SentencePieceProcessor" in notes[0]
    assert "without a tokenizer" not in p.stderr
    sp = sentencepiece.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    ids = read_tokens(data, "train", 300)[1:].tolist()  # the split starts with EOT
    ids = ids[:len(ids) - ids[::-1].index(sp.piece_to_id("\n"))]  # whole lines: a cut word encodes otherwise
    assert len(ids) > 100 and sp.encode(sp.decode(ids)) == ids


def test_a_run_being_written_exports_its_newest_readable_checkpoint(byte_data, tmp_path, monkeypatch):
    """A run directory as a trainer leaves it while it writes and is killed (scripts/chaos_soak.py's
    readers): a damaged newest checkpoint is named in a warning and the previous one exported, one
    pruned between the listing and the read is passed over; never a traceback, never a damaged file."""
    run = tmp_path / "run"
    train(["-i", f"{byte_data}/train_*.bin", "-o", run, "--layers", 2, "--channels", 32, "--heads", 4,
           "--max-seq-len", 64, "-b", 4, "-t", 32, "-x", 6, "-n", 3, "-v", 0, "-s", 0])
    newest = run / "model_00000006.bin"
    good = newest.read_bytes()
    newest.write_bytes(good[:-7] + bytes([good[-7] ^ 8]) + good[-6:])
    p = export(run, tmp_path / "hf")
    assert "(step 3)" in p.stdout and "warning: checkpoint step 6 is damaged" in p.stderr, p.stdout + p.stderr
    newest.write_bytes(good)

    # a flipped bit anywhere in the header of the trainer's file: refused as damaged by the reader, never
    # read as another model (every bit of words 0..23, one bit of each other byte)
    sys.path.insert(0, str(REPO / "scripts"))
    import export_hf  # noqa: E402 (also puts dev/reference on the path)
    from checkpoint import read_model
    flipped = tmp_path / "flipped.bin"
    for byte in range(1024):
        for bit in (range(8) if byte < 96 else [byte % 8]):
            b = bytearray(good)
            b[byte] ^= 1 << bit
            flipped.write_bytes(bytes(b))
            with pytest.raises(ValueError, match="damaged|bad magic"):
                read_model(str(flipped))

    # pruned by the trainer between the listing and the read: its marker goes first, then its files
    real = export_hf.read_model

    def pruned_meanwhile(path):
        if path.endswith("model_00000006.bin"):
            (run / "DONE_00000006").unlink()
            os.unlink(path)
        return real(path)
    monkeypatch.setattr(export_hf, "read_model", pruned_meanwhile)
    path, (_, _, step) = export_hf.newest_checkpoint(str(run))
    assert step == 3 and path.endswith("model_00000003.bin")
