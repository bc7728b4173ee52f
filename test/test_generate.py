"""End-to-end tests of generate_gpt2_ls (built by `make generate_gpt2_ls`), run from the repository
root, on a tiny LS model trained for a few steps by train_gpt2_ls on byte-level tiny Shakespeare
(the helpers and the data fixture come from test_e2e.py): KV-cached output equals the uncached
path (--no-cache) token for token, greedy and sampled, with the context window sliding; the same
seed reproduces the output; text is the tokenizer's decoding of the ids; bad input fails with one
line and exit code 1.
"""
import os
import subprocess
from pathlib import Path

import pytest

from test_e2e import TINY, byte_data, data_args, run  # noqa: F401  (byte_data is a fixture)

REPO = Path(__file__).resolve().parents[1]
GEN = Path(os.environ.get("GENERATE_GPT2_LS", REPO / "generate_gpt2_ls"))  # override to test another build


def gen(args, check=True):
    if not GEN.exists():
        pytest.fail(f"{GEN} is missing; build it with `make generate_gpt2_ls`")
    p = subprocess.run([str(GEN)] + [str(a) for a in args], cwd=REPO, capture_output=True, timeout=300)
    if check and p.returncode != 0:
        pytest.fail(f"generate_gpt2_ls {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr.decode()}")
    return p


def ids(p):
    return [int(x) for x in p.stdout.decode().split()]


@pytest.fixture(scope="module")
def model(byte_data, tmp_path_factory):  # noqa: F811
    """A 30-step checkpoint of the tiny LS model (max_seq_len 64, window 8) and its tokenizer."""
    out = tmp_path_factory.mktemp("gen_model")
    run(data_args(byte_data) + TINY + ["-o", out, "-x", 30, "-l", "3e-3", "-u", 3, "-v", 0, "-s", 0])
    ckpts = sorted(out.glob("model_*.bin"))
    assert ckpts, f"no checkpoint in {out}"
    return ckpts[-1], byte_data / "tokenizer.bin"


# max-len 64 = the model's; 20 < prompt + 60 tokens makes the window slide (re-prefill per token)
@pytest.mark.parametrize("mode", [["--greedy"], ["--temperature", "1.0"], ["--temperature", "0.8", "--top-k", "5"]])
@pytest.mark.parametrize("max_len", [64, 20])
def test_cached_equals_uncached(model, mode, max_len):
    ckpt, _ = model
    common = ["-e", ckpt, "--prompt-ids", "70,105,114,115,116", "-n", 60, "--seed", 5, "--max-len", max_len,
              "--print-ids", "--threads", 1] + mode
    cached = ids(gen(common))
    uncached = ids(gen(common + ["--no-cache"]))
    assert len(cached) == 60
    assert all(0 <= t < 256 for t in cached)
    assert cached == uncached


def test_reproducible_and_seeded(model):
    ckpt, tok = model
    common = ["-e", ckpt, "--tokenizer", tok, "-n", 80, "--threads", 1]
    a = gen(common + ["--seed", 11])
    b = gen(common + ["--seed", 11])
    c = gen(common + ["--seed", 12])
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout
    assert "tok/s" in a.stderr.decode() and "KV cache" in a.stderr.decode()


def test_text_is_the_decoding_of_the_ids(model):
    ckpt, tok = model
    common = ["-e", ckpt, "-n", 50, "--seed", 3, "--threads", 1]
    text = gen(common + ["--tokenizer", tok]).stdout
    token_ids = ids(gen(common + ["--prompt-ids", "10", "--print-ids"]))  # the tokenizer's EOT is 10
    assert text == bytes(token_ids) + b"\n"  # byte-level tokenizer: token i is byte i


def test_help_lists_every_flag():
    out = gen(["--help"]).stdout.decode()
    for flag in ["--model", "--prompt-ids", "--tokenizer", "--tokens", "--temperature", "--top-k", "--seed",
                 "--greedy", "--max-len", "--device", "--no-cache", "--print-ids", "--threads"]:
        assert flag in out


@pytest.mark.parametrize("extra, expect", [
    ([], "--model"),                                        # no checkpoint given
    (["-e", "no/such/model.bin"], "no/such/model.bin"),
    (["--prompt-ids", "1,x"], "'x' is not a token id"),
    (["--prompt-ids", "999"], "outside the model's vocabulary"),
    pytest.param(["--device", "cuda"], "use --device cpu",   # only meaningful where no GPU exists
                 marks=pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a GPU is present")),
    (["--temperature", "0"], "--temperature must be > 0"),
    (["--max-len", "65"], "exceeds the model's max_seq_len 64"),
    (["--top-k", "-1"], "top-k"),
])
def test_bad_input_fails_with_one_line(model, extra, expect):
    ckpt, _ = model
    model_arg = [] if extra == [] or extra[0] == "-e" else ["-e", ckpt]  # [] = no checkpoint or a given one
    prompt_arg = [] if "--prompt-ids" in extra else ["--prompt-ids", "1"]
    p = gen(model_arg + prompt_arg + extra + ["-n", 3], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and expect in err, err
