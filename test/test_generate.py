"""End-to-end tests of generate_gpt2_ls (built by `make generate_gpt2_ls`), run from the repository
root, on a tiny LS model trained for a few steps by train_gpt2_ls on byte-level tiny Shakespeare
(the helpers and the data fixture come from run_helpers.py and conftest.py): KV-cached output equals the uncached
path (--no-cache) token for token, greedy and sampled, with the context window sliding; the same
seed reproduces the output; text is the tokenizer's decoding of the ids, after the prompt's text; bad
input fails with one line and exit code 1.

Text prompts (--prompt, --prompt-file, llmc/text/bpe_encoder.h): --encode-only's ids must equal
tiktoken's GPT-2 encode_ordinary exactly (after the EOT put first) on the whole tiny Shakespeare,
PG-19 excerpts, WikiText-2 and a string of unicode edge cases; the GPT-2 tokenizer.bin is written
with data/text_tokenizers.py from the local BPE files ($SHARED_DATA/gpt2; skipped without them or
without tiktoken).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from run_helpers import SHARED, TINY, data_args, run

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "data"))
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


def test_a_prompt_longer_than_the_context_is_cut_with_a_note(model):
    """trial 5 F12: a prompt longer than the context (--max-len, else the model's max_seq_len 64) keeps its newest
    tokens, as nanoGPT's sample.py crops idx to block_size, and says so in one note on stderr; a prompt that fits
    gets none."""
    ckpt, _ = model
    prompt = [70 + i % 50 for i in range(100)]
    common = ["-n", 5, "--seed", 5, "--print-ids", "--threads", 1, "--device", "cpu", "-e", ckpt]

    def notes(p):
        return [ln for ln in p.stderr.decode().splitlines() if "prompt" in ln and ln.startswith("note:")]

    for max_len, limit in [([], "the model's max_seq_len 64"), (["--max-len", 40], "--max-len 40")]:
        keep = 64 if not max_len else 40
        p = gen(common + max_len + ["--prompt-ids", ",".join(map(str, prompt))])
        assert notes(p) == [f"note: the prompt has 100 tokens, more than {limit}: its first {100 - keep} are "
                            f"dropped and the newest {keep} kept (pass a shorter prompt"
                            + (", or --max-len up to 64)" if max_len else ")")], p.stderr
        # the behaviour is unchanged: the same tokens as the newest `keep` prompt tokens alone
        alone = gen(common + max_len + ["--prompt-ids", ",".join(map(str, prompt[-keep:]))])
        assert ids(p) == ids(alone) and notes(alone) == [], alone.stderr
    # the bench path refuses a prompt it cannot hold (nothing is cut there)
    p = gen(["-e", ckpt, "--bench", "--bench-prompt", 65, "--bench-contexts", 64], check=False)
    assert p.returncode == 1 and "--bench-prompt 65 exceeds the model's max_seq_len 64" in p.stderr.decode(), p.stderr


def test_reproducible_and_seeded(model):
    ckpt, tok = model
    common = ["-e", ckpt, "--tokenizer", tok, "-n", 80, "--threads", 1]
    a = gen(common + ["--seed", 11])
    b = gen(common + ["--seed", 11])
    c = gen(common + ["--seed", 12])
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout
    assert "tok/s" in a.stderr.decode() and "KV cache" in a.stderr.decode()
    # --cuda-graph auto and --pdl auto (the defaults) on the CPU backend: neither (the summary says "cached" alone)
    assert ", cached, KV cache" in a.stderr.decode() and "CUDA graphs" not in a.stderr.decode(), a.stderr


def test_flag_values_are_read_like_the_trainers(model):
    # llmc/app/cli_checks.h (docs/reliability.md fixes 16, 17): white space around a number is removed and an
    # on/off flag takes a word or an integer, as in the trainer
    ckpt, _ = model
    common = ["-e", ckpt, "--prompt-ids", "1", "-n", 20, "--threads", 1, "--print-ids"]
    assert ids(gen(common + ["--seed", " 7 "])) == ids(gen(common + ["--seed", 7]))
    assert ids(gen(common + ["--greedy=yes", "--seed", 1])) == ids(gen(common + ["--greedy", "--seed", 2]))
    assert ids(gen(common + ["--greedy=0", "--seed", 7])) == ids(gen(common + ["--seed", 7]))


def test_text_is_the_decoding_of_the_ids(model):
    ckpt, tok = model
    common = ["-e", ckpt, "-n", 50, "--seed", 3, "--threads", 1]
    text = gen(common + ["--tokenizer", tok]).stdout
    token_ids = ids(gen(common + ["--prompt-ids", "10", "--print-ids"]))  # the tokenizer's EOT is 10
    assert text == bytes(token_ids) + b"\n"  # byte-level tokenizer: token i is byte i


def test_the_text_is_the_prompt_then_the_continuation(model):
    """As nanoGPT's sample.py prints the decoded start and its continuation: stdout is the prompt's text,
    then the generated text, then a newline. A leading EOT (the document start of --prompt TEXT and of the
    default prompt) is not echoed; --print-ids prints the new tokens' ids only."""
    ckpt, tok = model
    common = ["-e", ckpt, "-n", 20, "--seed", 9, "--threads", 1, "--tokenizer", tok]
    for prompt in [["--prompt", "First"], ["--prompt-ids", "10,70,105,114,115,116"],
                   ["--prompt-ids", "70,105,114,115,116"]]:
        text = gen(common + prompt).stdout
        new = ids(gen(common + prompt + ["--print-ids"]))
        assert len(new) == 20 and text == b"First" + bytes(new) + b"\n", (prompt, text, new)
    # a mid-prompt EOT (byte 10, a newline) is the prompt's own: echoed
    text = gen(common + ["--prompt-ids", "10,70,10,105"]).stdout
    assert text.startswith(b"F\ni") and len(text) == 3 + 20 + 1, text


def test_the_text_ends_its_line_before_the_summary_in_one_stream(model):
    """stdout and stderr into one file (2>&1, a log): the text's final newline comes before the summary
    line, not after it (stdout to a pipe is buffered; the summary on stderr is not)."""
    ckpt, tok = model
    args = ["-e", str(ckpt), "--tokenizer", str(tok), "-n", "20", "--seed", "3", "--threads", "1", "--device", "cpu"]
    p = subprocess.run([str(GEN)] + args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert p.returncode == 0, p.stdout
    text = gen(args).stdout
    assert text.endswith(b"\n") and p.stdout.startswith(text + b"generated 20 tokens"), p.stdout


def test_help_lists_every_flag():
    out = gen(["--help"]).stdout.decode()
    for flag in ["--model", "--prompt-ids", "--prompt", "--prompt-file", "--encode-only", "--tokenizer", "--tokens", "--temperature", "--top-k", "--seed",
                 "--greedy", "--max-len", "--device", "--no-cache", "--cuda-graph", "--pdl", "--fused-decode", "--print-ids",
                 "--threads", "--sp-model"]:
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
    (["--seed", ""], "--seed: an empty value is not a number"),        # not read as 0 (docs/reliability.md)
    (["--temperature", ""], "--temperature: an empty value is not a number"),
    (["--top-k", "  "], "--top-k: an empty value is not a number"),    # only white space is empty (fix 16)
    (["--greedy=2x"], "--greedy: is not a value for an on/off flag"),  # not read with stoll as on (fix 17)
    (["--temperature", "inf"], "--temperature: 'inf' is not a finite number"),  # trial 3 F5
    # (trial 9: it suggested "give 0 or a magnitude in [...]", and 0 is refused for --temperature)
    (["--temperature", "1e-50"], "--temperature: '1e-50' is below the smallest normal float (it would be read as 0 "
     "or lose precision); give a magnitude in [1.17549435e-38, 3.40282347e+38]; run with --help"),
    # --greedy takes the argmax: a sampling flag beside it would be ignored
    (["--greedy", "--temperature", "0.5"], "--temperature shapes sampling, and --greedy takes the argmax instead; "
     "drop --temperature, or --greedy to sample"),
    (["--top-k", "5", "--greedy"], "--top-k shapes sampling, and --greedy takes the argmax instead"),
    (["--cuda-graph", "1", "--no-cache"], "--cuda-graph 1 runs the KV cache's decode steps as graphs"),
    (["--cuda-graph", "1", "--device", "cpu"], "--cuda-graph 1 needs the CUDA backend"),
    (["--cuda-graph", "2"], "--cuda-graph: must be auto, 0 or 1 (got 2)"),
    (["--pdl", "1", "--device", "cpu"], "--pdl 1 needs the CUDA backend"),
    (["--pdl", "2"], "--pdl: must be auto, 0 or 1 (got 2)"),
    (["--fused-decode", "1", "--device", "cpu"], "--fused-decode 1 needs the CUDA backend; this run uses the cpu "
     "backend (give --device cuda, or drop --fused-decode)"),
    (["--fused-decode", "1", "--no-cache"], "--fused-decode 1 runs the KV cache's decode steps; --no-cache has none"),
    (["--fused-decode", "2"], "--fused-decode: must be 0 or 1 (got 2)"),
    (["--fused-decode", "0x1"], "--fused-decode: must be 0 or 1 (got 0x1)"),
    (["--bench", "--bench-contexts", "64", "--bench-prompt", "8", "--device", "cpu", "--fused-decode", "1"],
     "--fused-decode 1 needs the CUDA backend"),
    (["--bench-profile"], "--bench-profile sets up the latency benchmark, which runs only with --bench; add --bench, "
     "or drop --bench-profile"),
    # every --bench-* flag: without --bench it would generate text and ignore the flag
    (["--bench-batch", "4"], "--bench-batch sets up the latency benchmark, which runs only with --bench"),
    (["--bench-prompt", "8"], "--bench-prompt sets up the latency benchmark, which runs only with --bench"),
    (["--bench-contexts", "64"], "--bench-contexts sets up the latency benchmark, which runs only with --bench"),
    (["--bench-steps", "2"], "--bench-steps sets up the latency benchmark, which runs only with --bench"),
    (["--bench-repeats", "2"], "--bench-repeats sets up the latency benchmark, which runs only with --bench"),
    (["--bench", "--bench-prompt", "8,x", "--bench-contexts", "64"], "--bench-prompt: '8,x' is not a list of positive lengths"),
    (["--bench", "--bench-prompt", "8,0", "--bench-contexts", "64"],
     "--bench-prompt: '8,0' is not a list of positive lengths"),
    (["--bench", "--bench-prompt", "8,65", "--bench-contexts", "64"], "--bench-prompt 65 exceeds the model's max_seq_len 64"),
    # --bench times the cache on random tokens: a text generation flag beside it would be ignored
    (["--bench", "--no-cache"], "--no-cache is a flag of text generation, and --bench times the KV cache on random "
     "tokens instead; drop --no-cache (--bench reads -e, --device, --cuda-graph, --pdl, --fused-decode, --threads, "
     "--seed and the --bench-* flags)"),
    (["--bench", "--prompt-ids", "1,2"], "--prompt-ids is a flag of text generation"),
    (["--bench", "-n", "5"], "--tokens is a flag of text generation"),
    (["--bench", "--max-len", "10"], "--max-len is a flag of text generation"),
    (["--bench", "--greedy"], "--greedy is a flag of text generation"),
    (["--bench", "--print-ids"], "--print-ids is a flag of text generation"),
    (["--bench", "--bench-profile", "--bench-contexts", "64", "--bench-prompt", "8", "--device", "cpu"],
     "--bench-profile times GPU kernels; the cpu backend has none: use --device cuda, or drop --bench-profile"),
    (["--bench", "--bench-contexts", "64", "--bench-prompt", "8", "--device", "cpu", "--pdl", "1"],
     "--pdl 1 needs the CUDA backend"),
    (["--bench", "--bench-profile", "--bench-contexts", "64", "--bench-prompt", "8", "--pdl", "1"],
     "--bench-profile times each kernel alone, and --pdl 1 lets a kernel start before the one ahead of it ends"),
])
def test_bad_input_fails_with_one_line(model, extra, expect):
    ckpt, _ = model
    model_arg = [] if extra == [] or extra[0] == "-e" else ["-e", ckpt]  # [] = no checkpoint or a given one
    text = "--bench" not in extra  # --bench refuses the text flags (below); the other cases get a prompt and -n
    prompt_arg = [] if "--prompt-ids" in extra or not text else ["--prompt-ids", "1"]
    p = gen(model_arg + prompt_arg + extra + (["-n", 3] if text else []), check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and expect in err, err


def test_a_padding_id_in_the_prompt_is_named_as_such(byte_data, tmp_path):  # noqa: F811
    """A new-user trial: a model trained with --vocab above its tokenizer's, given --prompt-ids with a padding
    id, was told the id is "outside the vocabulary of tokenizer ...; use the tokenizer.bin that matches": the
    tokenizer was the right one. The error names the padding rows."""
    out = tmp_path / "padded"
    run(data_args(byte_data) + TINY + ["--vocab", 384, "-o", out, "-x", 2, "-v", 0, "-s", 0])
    p = gen(["-e", out / "model_00000002.bin", "--tokenizer", byte_data / "tokenizer.bin", "--prompt-ids", "1,300",
             "-n", 2], check=False)
    assert p.returncode == 1 and p.stderr.decode().strip() == (
        "error: --prompt-ids: token 300 is one of the model's padding rows (256..383: its vocabulary 384 is above "
        "the tokenizer's 256, and no text has those ids); give ids below 256"), p.stderr.decode()


def test_a_directory_for_a_file_names_the_file(model):
    """A new-user trial: -e RUN said "not a regular file" (where --eval-only names the newest checkpoint), and
    --tokenizer DIR said "file is 9223372036854775807 bytes" (a directory's size as a FILE). Each names the file."""
    ckpt, tok = model
    p = gen(["-e", ckpt.parent, "--prompt-ids", "1", "-n", 3], check=False)
    assert p.returncode == 1 and p.stderr.decode().strip() == (
        f"error: generate_gpt2_ls -e needs a model file; '{ckpt.parent}' is a run directory: did you mean -e "
        f"{ckpt}? (its newest complete checkpoint)"), p.stderr.decode()
    p = gen(["-e", ckpt, "--tokenizer", tok.parent, "--prompt-ids", "1", "-n", 3], check=False)
    assert p.returncode == 1 and p.stderr.decode().strip() == (
        f"error: tokenizer '{tok.parent}' is a directory; give a file: {tok}"), p.stderr.decode()


def test_a_pruned_step_names_the_steps_that_exist(model):
    """trial 10: -e of a step --keep-checkpoints pruned said "cannot open: No such file or directory" where
    --eval-only lists the complete checkpoints of the run; generate_gpt2_ls lists them too."""
    ckpt, _ = model
    gone = ckpt.parent / "model_00000003.bin"
    assert not gone.exists()
    p = gen(["-e", gone, "--prompt-ids", "1", "-n", 3], check=False)
    assert p.returncode == 1 and p.stderr.decode().strip() == (
        f"error: generate_gpt2_ls -e needs a model file; '{gone}' does not exist; {ckpt.parent} holds the complete "
        f"checkpoint of step 30 (-e {ckpt})"), p.stderr.decode()  # one: "step 30", not "steps 30 (1; ...)"


@pytest.mark.parametrize("extra, expect", [
    (["-n", "0"], "error: --tokens: must be >= 1 (got 0)"), (["-n", "-1"], "error: --tokens: must be >= 1 (got -1)"),
    (["--top-k", "-5"], "error: --top-k: must be >= 0 (got -5)"),
    (["--bench-steps", "0"], "error: --bench-steps: must be >= 1 (got 0)"),
])
def test_an_integer_below_its_range_gets_one_clean_line(model, extra, expect):
    """trial 3 F4: -n 0 printed CLI11's "Value 0 not in range 0.000000 to 1797693134862315708...": the whole of
    DBL_MAX, with a lower bound that admits 0."""
    ckpt, _ = model
    p = gen(["-e", ckpt, "--prompt-ids", "1"] + extra, check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.strip().splitlines() == [expect + "; run with --help for the flags"], err


@pytest.mark.parametrize("extra, expect", [
    (["-n", "1e3"], "error: --tokens takes an integer in digits (e.g. 1000, not 1e3), not '1e3'; fix its value"),
    (["--top-k", "1,000"], "error: --top-k takes an integer in digits (e.g. 1000, not 1e3), not '1,000' (a comma is "
     "not read as a thousands separator: write 1000, not 1,000); fix its value"),
    (["-n", "99999999999"], "error: --tokens 99999999999 is too large: it takes an integer in "
     "-2147483648..2147483647; fix its value"),
    (["--temperature", "1,5"], "error: --temperature takes a number (e.g. 6e-4), not '1,5' (a comma is not read as a "
     "decimal point: write 1.5, not 1,5); fix its value"),
])
def test_a_value_that_is_not_a_number_names_the_flag_and_the_fix(model, extra, expect):
    """generate's integer flags printed CLI11's raw "Could not convert: --tokens = 1e3"; the trainer's line (its
    helper, llmc/app/cli_checks.h) names the flag, the value and the fix."""
    ckpt, _ = model
    p = gen(["-e", ckpt, "--prompt-ids", "1"] + extra, check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and err.strip().splitlines() == [expect], err


def test_bench_defaults_fit_a_model_of_a_smaller_max_seq_len(model):
    """trial 3 F18: the --bench defaults (prompt 2048, contexts 1024..16384) exceed every preset's maxT, so --bench
    never ran without --bench-contexts: now fitted to the model, with a note; given values are still checked."""
    ckpt, _ = model
    p = gen(["-e", ckpt, "--bench", "--bench-repeats", 1, "--threads", 1, "--device", "cpu"])
    out = json.loads(p.stdout.decode())
    notes = [ln for ln in p.stderr.decode().splitlines() if ln.startswith("note: --bench")]
    assert notes == ["note: --bench: --bench-prompt 64 (default 2048), --bench-contexts 64 (default "
                     "1024,2048,4096,8192,16384): the defaults exceed the model's max_seq_len 64 (give the flags "
                     "to choose)"], p.stderr
    assert out["config"]["max_seq_len"] == 64, out
    assert out["cuda_graph"] == 0, "--cuda-graph auto on the CPU backend: no graphs ran, and the JSON says so"
    assert out["pdl"] == 0, "--pdl auto on the CPU backend: no programmatic launch, and the JSON says so"
    p = gen(["-e", ckpt, "--bench", "--bench-contexts", "128"], check=False)
    assert p.returncode == 1 and "--bench-contexts: 128 must be in" in p.stderr.decode(), p.stderr


def test_bench_times_each_prompt_length_in_the_order_given(model):
    """--bench-prompt takes a list: one prefill record per length, in the order given, each with its own
    --bench-repeats timings (issue 52: LS against MHSA at several prompt lengths in one run)."""
    ckpt, _ = model
    p = gen(["-e", ckpt, "--bench", "--bench-prompt", "16,8,64", "--bench-contexts", "64", "--bench-repeats", 2,
             "--bench-batch", 2, "--threads", 1, "--device", "cpu"])
    out = json.loads(p.stdout.decode())
    assert [r["T"] for r in out["prefill"]] == [16, 8, 64], out["prefill"]
    for r in out["prefill"]:
        assert len(r["ms"]) == 2 and r["ms_median"] == pytest.approx(sum(r["ms"]) / 2, abs=1e-4), r
    assert [d["context"] for d in out["decode"]] == [64] and out["batch"] == 2 and out["seed"] == 1337  # the default


# ----------------------------------------------------------------------------------------------------------
# text prompts

GPT2_EOT = 50256


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """(tiktoken GPT-2 Encoding, tokenizer.bin path, token bytes), built from the local BPE files."""
    pytest.importorskip("tiktoken")
    bpe_dir = SHARED / "gpt2"
    if not (bpe_dir / "vocab.bpe").exists():
        pytest.skip(f"no GPT-2 BPE files in {bpe_dir} (set SHARED_DATA)")
    import text_tokenizers as tk
    enc = tk.load_gpt2(tk.resolve_gpt2_dir(str(bpe_dir)))
    token_bytes = tk.gpt2_token_bytes(enc)
    path = tmp_path_factory.mktemp("gpt2_tok") / "tokenizer.bin"
    assert tk.write_tokenizer_bin(path, token_bytes, GPT2_EOT) == 0  # no GPT-2 token is cut
    return enc, path, token_bytes


def encode_file(tok_path, data, tmp_path, name="prompt.txt"):
    """The C++ encoder's ids for the bytes `data` (--encode-only --prompt-file)."""
    f = tmp_path / name
    f.write_bytes(data)
    return ids(gen(["--encode-only", "--tokenizer", tok_path, "--prompt-file", f]))


def shared_text(rel):
    path = SHARED / rel
    if not path.exists():
        pytest.skip(f"{path} missing (set SHARED_DATA)")
    return path.read_bytes().decode("utf-8")


def pg19_excerpts():
    """Two PG-19 excerpts: the raw file (CRLF, Gutenberg header) of a book with many non-ASCII
    characters, and a book body as data/prepare.py encodes it (header/footer stripped, LF)."""
    from gutenberg import strip_gutenberg
    raw = shared_text("pg19/pg1257.txt")[:300_000]
    body, _ = strip_gutenberg(shared_text("pg19/pg113.txt"))
    return [raw, body[100_000:400_000]]


UNICODE_EDGES = (
    "Hello world! I'm here, you're there; they'll've we'd IT'S x''s \u2019s 'rex rock 'n' roll\n"
    "  two spaces\t\ttabs \n\n\nnewlines   \r\n trailing   \n"
    "na\u00efve caf\u00e9 e\u0301t\u00e9 \u03a9\u03bc\u03ad\u03b3\u03b1 \u041f\u0440\u0438\u0432\u0435\u0442 "
    "\u65e5\u672c\u8a9e\u3002 \ud55c\uad6d\uc5b4 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea "
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u0e44\u0e17\u0e22\n"
    "123 4567 3.14159 \u00bd \u2167 \u0663\u0664 \u00b2 1,000,000 0x1F\n"
    "\U0001F44B\U0001F3FD! \U0001F600\U0001F600 \U0001F468\u200d\U0001F469\u200d\U0001F467 \u2764\ufe0f a\U0001F600b\n"
    "nbsp\u00a0nbsp\u00a0\u00a0x ideographic\u3000space em\u2003space \u2028line\u2029para \x1c\x1d\x85 \x0b\x0c\n"
    "<|endoftext|> <|endoftext|>x ...!!! ??? --- ___ \\\\ \"\" \u00ab\u00bb \u20ac100 $5 @user #tag\n"
    "\x00\x01 ctrl \x7f del \ud7ff \ue000 \uffff \U0010ffff \U00020000 end   "
)


def corpus_texts(source, edges):
    """The texts of a prompt-encoding comparison: the whole tiny Shakespeare ("tinyshakespeare"), PG-19
    excerpts ("pg19"), both WikiText-2 files and 100 of their single lines ("wikitext2"), else `edges`."""
    if source == "tinyshakespeare":
        return [shared_text("tinyshakespeare/input.txt")]  # the whole file
    if source == "pg19":
        return pg19_excerpts()
    if source == "wikitext2":
        texts = [shared_text("wikitext2/valid.txt"), shared_text("wikitext2/test.txt")]
        return texts + [ln for ln in texts[0].split("\n")[:400] if ln.strip()][:100]  # single lines too
    return edges


def assert_same_ids(got, want, what, reference, near):
    """The C++ encoder's ids `got` equal the reference encoder's `want`; else a failure at the first difference
    k, with near(k), the reference's text around it."""
    if got != want:
        k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
        pytest.fail(f"{what}: first difference at id {k}: C++ {got[k:k + 8]} vs {reference} {want[k:k + 8]} "
                    f"near {near(k)!r}")


@pytest.mark.parametrize("source", ["tinyshakespeare", "pg19", "wikitext2", "unicode"])
def test_prompt_encoding_equals_tiktoken(gpt2, tmp_path, source):
    enc, tok, _ = gpt2
    edges = [UNICODE_EDGES, UNICODE_EDGES.strip(), " " + UNICODE_EDGES, "", " ", "\n", "a", "'s", " \t\n "]
    for i, text in enumerate(corpus_texts(source, edges)):
        want = [GPT2_EOT] + enc.encode_ordinary(text)
        got = encode_file(tok, text.encode("utf-8"), tmp_path, f"p{i}.txt")
        assert_same_ids(got, want, f"{source} text {i}", "tiktoken", lambda k: enc.decode(want[max(0, k - 8):k + 8]))


def test_prompt_flag_equals_prompt_file(gpt2, tmp_path):
    enc, tok, _ = gpt2
    text = "First Citizen:\nBefore we proceed any further, hear me speak. \u00e9\U0001F600"
    a = ids(gen(["--encode-only", "--tokenizer", tok, "--prompt", text]))
    assert a == encode_file(tok, text.encode(), tmp_path)
    assert a == [GPT2_EOT] + enc.encode_ordinary(text)


def test_invalid_utf8_round_trips(gpt2, tmp_path):
    """Invalid bytes are kept (llmc/text/bpe_encoder.h): the ids decode to the input bytes exactly, and the
    valid text before the first bad byte (at a piece boundary) encodes as tiktoken does."""
    enc, tok, token_bytes = gpt2
    head = "The quick brown fox. "
    data = head.encode() + b"\xff\xfe bad \xc3 x\xe2\x82\xac\xe2\x82 ok \xed\xa0\x80 \xc0\xaf end\x80"
    got = encode_file(tok, data, tmp_path)
    assert got[0] == GPT2_EOT
    assert b"".join(token_bytes[i] for i in got[1:]) == data
    want_head = enc.encode_ordinary(head.rstrip(" "))
    assert got[1:1 + len(want_head)] == want_head


def test_text_prompt_generates_like_the_ids(model):
    """On the byte-level model: --prompt TEXT == --prompt-ids EOT,bytes (the EOT of byte_data is 10)."""
    ckpt, tok = model
    common = ["-e", ckpt, "--tokenizer", tok, "-n", 20, "--seed", 9, "--print-ids", "--threads", 1]
    text = ids(gen(common + ["--prompt", "First"]))
    by_ids = ids(gen(common + ["--prompt-ids", "10,70,105,114,115,116"]))
    assert len(text) == 20 and text == by_ids
    assert ids(gen(["--encode-only", "--tokenizer", tok, "--prompt", "First"])) == [10, 70, 105, 114, 115, 116]
    # -e of a run's checkpoint: the run's tokenizer, as for generation (docs/generation.md)
    p = gen(["--encode-only", "-e", ckpt, "--prompt", "First"])
    assert ids(p) == [10, 70, 105, 114, 115, 116]
    assert f"note: generate: --tokenizer {tok} from " in p.stderr.decode(), p.stderr


def test_text_prompt_refused_for_other_tokenizers(tmp_path):
    """A tokenizer that is neither GPT-2 BPE nor byte-level (e.g. SentencePiece): one line naming --prompt-ids."""
    import text_tokenizers as tk
    path = tmp_path / "tokenizer.bin"
    tk.write_tokenizer_bin(path, [b"<unk>", b"</s>", b"\n"] + [bytes([b]) for b in range(256)] + [b" the"], 1)
    p = gen(["--encode-only", "--tokenizer", path, "--prompt", "the"], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and "--prompt-ids" in err, err


@pytest.mark.parametrize("args, expect", [
    (["--encode-only", "--prompt", "x"], "need --tokenizer"),
    (["--encode-only"], "--encode-only needs --prompt"),
    (["--encode-only", "--prompt", "x", "--prompt-ids", "1"], "excludes"),
    (["--encode-only", "--prompt", "x", "--prompt-file", "f"], "excludes"),
    (["--encode-only", "--prompt-file", "no/such/prompt.txt", "--tokenizer", "TOK"], "no/such/prompt.txt"),
    (["--prompt", "x"], "--model is required"),
    # a flag the other settings make do nothing (a new-user trial): refused, not ignored
    (["--encode-only", "--prompt", "x", "--tokenizer", "TOK", "-n", "5"],
     "--tokens is a flag of generation, and --encode-only prints the prompt's ids and exits; drop --tokens"),
    (["--encode-only", "--prompt", "x", "--tokenizer", "TOK", "--no-cache"], "--no-cache is a flag of generation"),
    (["--encode-only", "--prompt", "x", "--tokenizer", "TOK", "--pdl", "1"], "--pdl is a flag of generation"),
    (["--encode-only", "--prompt", "x", "--tokenizer", "TOK", "--fused-decode", "1"],
     "--fused-decode is a flag of generation"),
    (["--encode-only", "--prompt", "x", "--tokenizer", "TOK", "--temperature", "0.5"],
     "--temperature is a flag of generation"),
    (["-e", "CKPT", "--prompt-ids", "1", "--sp-model", "x.model"],
     "--sp-model encodes --prompt or --prompt-file text, and --prompt-ids gives the ids: drop --sp-model"),
    (["-e", "CKPT", "--prompt-ids", ""], "--prompt-ids '' gives no ids: pass ids (e.g. '50256,464'), or drop "
     "--prompt-ids for the tokenizer's EOT"),
    # a new-user trial: CLI11's "not expected: 40 --top_k" named no fix; the trainer's "did you mean" here too
    (["-e", "CKPT", "--top_k", "40"], "error: unknown flag --top_k; did you mean --top-k?"),
    (["-e", "CKPT", "--temprature", "0.5", "--topk", "3"],
     "error: unknown flag --temprature; did you mean --temperature? (also unknown: --topk)"),
    # a review: nanoGPT's training settings without a flag here are the trainer's notes, not the generator's
    (["-e", "CKPT", "--init_from", "resume"], "error: unknown flag --init_from; run with --help for the flags"),
])
def test_text_prompt_bad_input_fails_with_one_line(model, args, expect):
    ckpt, tok = model
    p = gen([{"TOK": tok, "CKPT": ckpt}.get(a, a) for a in args], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and expect in err, err


def test_unicode_table_is_what_the_generator_writes():
    """llmc/text/unicode_classes.h == scripts/gen_unicode_classes.py's output (same Unicode version only)."""
    import re
    import unicodedata
    header = (REPO / "llmc" / "text" / "unicode_classes.h").read_text()
    version = re.search(r'kUnicodeVersion = "([^"]+)"', header).group(1)
    if version != unicodedata.unidata_version:
        pytest.skip(f"header is Unicode {version}, this python has {unicodedata.unidata_version}")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_classes.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_an_on_off_flag_given_off_is_not_refused(model):
    """--greedy=0 (off) beside --bench is no text flag given: the refusals read an on/off flag's value."""
    ckpt, _ = model
    p = gen(["-e", ckpt, "--bench", "--greedy=0", "--no-cache=false", "--bench-prompt", 8, "--bench-contexts", 16,
             "--bench-steps", 2, "--bench-repeats", 1, "--threads", 1, "--device", "cpu"])
    assert json.loads(p.stdout.decode())["prefill"][0]["T"] == 8
    p = gen(["-e", ckpt, "--bench", "--greedy=1", "--bench-contexts", 16], check=False)
    assert p.returncode == 1 and "--greedy is a flag of text generation" in p.stderr.decode()
