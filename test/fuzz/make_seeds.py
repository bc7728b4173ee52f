#!/usr/bin/env python3
"""Regenerate the fuzzing seed corpora under test/fuzz/corpus/<harness>/ (docs/reliability.md).

Real files made by our writers and tools, each a few KB at most:
  - test/fuzz/make_seeds.cpp (built here with $CXX, default clang++): shards (write_shard), model files
    (save_model_checkpoint: fp32, bf16, QK-norm/soft-cap/untied), llm.c checkpoints (v3, v5), training
    states (save_train_state with the loop's sections), the byte tokenizer.bin, config files
    (TrainCli::config_file_text, as the trainer writes config.toml);
  - data/prepare.py on the first lines of tiny Shakespeare ($SHARED_DATA, default ../shared/data):
    --tokenizer sp --vocab-size 360 (tokenizer.model, tokenizer.bin, shards) and --dataset synthetic
    (tokenizer.bin, shards); a unigram model (which the encoder refuses);
  - prompt texts for the encoders;
  - data_vocab: a selector byte (0: meta.json, 1: tokenizer.bin) + the meta.json and tokenizer.bin
    data/prepare.py wrote above;
  - checkpoint_dir: the bytes keep, protected and pinned step + the names an output directory holds
    (llmc/io/checkpoint_dir.h's names for a 2-rank run with three checkpoints, an unfinished save and
    its temporaries, the trainer's other files).
Usage: python3 test/fuzz/make_seeds.py   (from the repository root; rewrites test/fuzz/corpus)
"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "test", "fuzz", "corpus")
SHARED_DATA = os.environ.get("SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
HARNESSES = ["shard", "checkpoint", "llmc_checkpoint", "train_state", "tokenizer", "sp_model", "sp_encode",
             "bpe_encode", "config", "data_vocab", "checkpoint_dir"]
MAX_SEED_BYTES = 8192

TEXTS = {
    "shakespeare.txt": b"First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
    "contractions.txt": b"I'm sure we'll see; they've said it's what you'd DO. 'Tis 'S 're\n",
    "whitespace.txt": b"a  b   c\t\td \n\n\n  x \r\n end   ",
    "numbers_symbols.txt": b"3.14159 + 2,718 = $5.86!? (100%) #tag @user ~~~ ...",
    "unicode.txt": "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600 \u0391\u03b8\u03ae\u03bd\u03b1 \u2581x \u00a0nbsp"
                   .encode("utf-8"),
    "invalid_utf8.bin": b"ok \xff\xfe \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \x80 end",
    "endoftext.txt": b"<|endoftext|>Hello<|endoftext|> world",
    "empty.txt": b"",
}

# A 2-rank run's output directory: complete checkpoints 100, 200, 300, a save of 400 cut short (no
# marker, a temporary left), and the trainer's other files (checkpoint_dir seed).
CHECKPOINT_DIR_NAMES = [f"{kind}_{step:08d}{suffix}" for step in (100, 200, 300)
                        for kind, suffix in (("model", ".bin"), ("state", "_00000.bin"), ("state", "_00001.bin"),
                                             ("DONE", ""))] + \
    ["model_00000400.bin", "state_00000400_00000.bin", "state_00000400_00001.bin.tmp.Xq3k9P",
     "config.json", "config.toml", "metrics.jsonl", "logit_stats.jsonl", ".lock"]


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def copy(src, harness, name):
    dst = os.path.join(CORPUS, harness, name)
    shutil.copyfile(src, dst)


def main():
    for h in HARNESSES:
        shutil.rmtree(os.path.join(CORPUS, h), ignore_errors=True)
        os.makedirs(os.path.join(CORPUS, h))
    build = os.path.join(ROOT, "build", "fuzz")
    os.makedirs(build, exist_ok=True)
    exe = os.path.join(build, "make_seeds")
    cxx = os.environ.get("CXX", "clang++")
    run(["nice", "-n", "19", cxx, "-std=c++17", "-O1", "-I" + ROOT, os.path.join(ROOT, "test", "fuzz", "make_seeds.cpp"),
         "-o", exe])
    run([exe, CORPUS])

    source = os.path.join(SHARED_DATA, "tinyshakespeare", "input.txt")
    # Relative paths inside a fixed work directory: SentencePiece records its input and model prefix
    # in the model, so absolute temporary paths would make the seeds differ from run to run.
    tmp = os.path.join(build, "seeds_work")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(source, "rb") as f:
        lines = f.read().split(b"\n")[:600]
    with open(os.path.join(tmp, "text.txt"), "wb") as f:
        f.write(b"\n".join(lines))
    prepare = [sys.executable, os.path.join(ROOT, "data", "prepare.py"), "--workers", "1"]
    run(["nice", "-n", "19"] + prepare + ["--dataset", "text", "--source", "text.txt", "--out", "sp", "--tokenizer", "sp",
                                        "--vocab-size", "360", "--shard-tokens", "400", "--val-fraction", "0.02"], cwd=tmp)
    sp = os.path.join(tmp, "sp")
    copy(os.path.join(sp, "tokenizer.model"), "sp_model", "prepare_sp360.model")
    copy(os.path.join(sp, "tokenizer.bin"), "tokenizer", "prepare_sp360.bin")
    copy(os.path.join(sp, "train_000000.bin"), "shard", "prepare_sp360_train_000000.bin")
    for selector, name in ((0, "meta.json"), (1, "tokenizer.bin")):
        with open(os.path.join(sp, name), "rb") as f, \
                open(os.path.join(CORPUS, "data_vocab", "prepare_sp360_" + name), "wb") as out:
            out.write(bytes([selector]) + f.read())
    vals = sorted(n for n in os.listdir(sp) if n.startswith("val_"))
    copy(os.path.join(sp, vals[-1]), "shard", "prepare_sp360_val_last.bin")  # the short last shard
    run(["nice", "-n", "19"] + prepare + ["--dataset", "synthetic", "--out", "syn", "--syn-vocab", "16",
                                        "--syn-length", "3000", "--syn-doc-len", "300", "--shard-tokens", "500"], cwd=tmp)
    syn = os.path.join(tmp, "syn")
    copy(os.path.join(syn, "tokenizer.bin"), "tokenizer", "prepare_synthetic16.bin")
    copy(os.path.join(syn, "val_000000.bin"), "shard", "prepare_synthetic16_val_000000.bin")
    # a model our encoder refuses but whose protobuf is valid: a unigram model (identity normalization:
    # the default rule's charsmap alone is 240 KB)
    import sentencepiece as spm
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        spm.SentencePieceTrainer.train(input="text.txt", model_prefix="unigram", vocab_size=200, num_threads=1,
                                       normalization_rule_name="identity", minloglevel=2)
    finally:
        os.chdir(cwd)
    copy(os.path.join(tmp, "unigram.model"), "sp_model", "spm_unigram200_identity.model")
    shutil.rmtree(tmp)

    with open(os.path.join(CORPUS, "checkpoint_dir", "two_ranks_three_steps.txt"), "wb") as f:
        f.write(bytes([2, 1, 1]) + "\n".join(CHECKPOINT_DIR_NAMES).encode() + b"\n")

    for name, data in TEXTS.items():
        for h in ("bpe_encode", "sp_encode"):
            with open(os.path.join(CORPUS, h, name), "wb") as f:
                f.write(data)

    too_big = []
    for h in HARNESSES:
        for n in sorted(os.listdir(os.path.join(CORPUS, h))):
            size = os.path.getsize(os.path.join(CORPUS, h, n))
            print(f"  {h}/{n}: {size} bytes")
            if size > MAX_SEED_BYTES:
                too_big.append(f"{h}/{n}")
    if too_big:
        sys.exit("seeds over %d bytes: %s" % (MAX_SEED_BYTES, ", ".join(too_big)))


if __name__ == "__main__":
    main()
