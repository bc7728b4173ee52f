#!/usr/bin/env python3
"""
Exports a train_gpt2_ls checkpoint as a Hugging Face `transformers` model folder (docs/export.md).

  python3 scripts/export_hf.py RUN_OR_CHECKPOINT OUT_DIR [--gpt2-bpe DIR]

RUN_OR_CHECKPOINT: a run directory (-o of the trainer: its newest complete checkpoint, i.e. the
newest step with a DONE_ marker, that reads; a damaged one is named in a warning and the previous one
is taken, as `-y 1` does; one deleted meanwhile by the run's pruning is passed over) or a model file
(model_NNNNNNNN.bin). A trainer may be writing the run meanwhile: its files are complete once marked.

- A plain GPT-2 (every head attends causally: G = NH, or local heads whose window P >= maxT; no
  QK-norm, no soft-cap, tied embeddings, GPT-2's biases; tanh or erf GELU, transformers' "gelu_new" or
  "gelu") becomes a stock GPT2LMHeadModel: config.json + model.safetensors, loadable without custom code.
- Anything else (local heads, QK-norm, soft-cap, untied head, no biases) gets the model code of
  scripts/hf_modeling_gpt2_ls.py as modeling_gpt2_ls.py, loadable with
  AutoModelForCausalLM.from_pretrained(OUT_DIR, trust_remote_code=True).
Both drop the padded vocabulary rows (logits over the real vocabulary V, as --dump-logits). A model whose
V is above its data's vocabulary (--vocab, e.g. nanoGPT's 50304 for GPT-2's 50257) keeps those rows and
gets a generation_config.json whose suppress_tokens are the ids no token has, so generate() never draws
them, as the trainer and generate_gpt2_ls do not.
When the run's data used GPT-2 BPE (meta.json "tokenizer": "gpt2"), GPT-2's vocab.json and
merges.txt (from --gpt2-bpe, else the data set's own gpt2_bpe source, else ../shared/data/gpt2)
and a tokenizer_config.json are added, so AutoTokenizer.from_pretrained(OUT_DIR) works offline
(with trust_remote_code=True for an LS export: its config.json names the modelling file).
SentencePiece data ("tokenizer": "sp"): the data's tokenizer.model is copied; the installed
transformers cannot load it as an AutoTokenizer without protobuf (a note says so): use sentencepiece.
The run's config.json "data" records its tokenizer; an export whose data was prepared again with
another tokenizer is refused.

Needs numpy and safetensors (not torch). Reads the checkpoint with dev/reference/checkpoint.py.
"""
import argparse
import glob
import json
import os
import re
import shutil
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "dev", "reference"))
from checkpoint import NotAModel, read_model  # noqa: E402
from model_config import param_shapes  # noqa: E402

MODELING_SOURCE = os.path.join(REPO, "scripts", "hf_modeling_gpt2_ls.py")
MODELING_NAME = "modeling_gpt2_ls"
MARKER_RE = re.compile(r"^DONE_(\d{8})$")
EOT_TEXT = "<|endoftext|>"


class ExportError(Exception):
    """A one-line message naming the problem and the fix."""


def newest_checkpoint(run_dir):
    """(model file, read_model's (config, params, step)) of the newest step of run_dir that has a DONE_
    marker (docs/formats.md) and reads: a damaged one gets a warning on stderr and the previous one is
    tried; one gone meanwhile (pruned by a trainer writing the run) is passed over."""
    steps = sorted((int(m.group(1)) for m in map(MARKER_RE.match, os.listdir(run_dir)) if m), reverse=True)
    damaged = []
    for step in steps:
        path = os.path.join(run_dir, f"model_{step:08d}.bin")
        try:
            model = read_model(path)
        except FileNotFoundError:
            continue  # pruned since the listing (its marker goes first), or never there
        except (ValueError, OSError) as e:
            damaged.append((step, str(e)))
            continue
        for s, e in damaged:  # said only when a fallback is taken: otherwise the one error line below
            print(f"warning: checkpoint step {s} is damaged ({e}); falling back to the previous complete checkpoint",
                  file=sys.stderr)
        return path, model
    if damaged:
        raise ExportError(f"{run_dir} holds no usable checkpoint: all {len(damaged)} complete checkpoints are "
                          f"damaged (newest: {damaged[0][1]}); restore the files, or give a model_NNNNNNNN.bin file")
    raise ExportError(f"{run_dir} holds no complete checkpoint (no DONE_ marker with its model file); "
                      f"give a model_NNNNNNNN.bin file or a run directory with a finished checkpoint")


def steps_beside(ckpt):
    """For a missing RUN/model_NNNNNNNN.bin (a step --keep-checkpoints pruned, a typo): "RUN holds the complete
    checkpoints of steps 1, 2, ..., 6, 7, 8 (8; the newest: RUN/model_00000008.bin)", one as "RUN holds the
    complete checkpoint of step 2 (RUN/model_00000002.bin)", listed as the trainer lists them
    (llmc/app/run_record.h complete_steps_text); "" when the name is no step's model file or RUN holds no
    complete checkpoint."""
    run_dir = os.path.dirname(ckpt) or "."
    if not re.match(r"^model_\d{8}\.bin$", os.path.basename(ckpt)) or not os.path.isdir(run_dir):
        return ""
    steps = sorted({int(m.group(1)) for m in map(MARKER_RE.match, os.listdir(run_dir)) if m})
    if not steps:
        return ""
    if len(steps) == 1:
        return f"{run_dir} holds the complete checkpoint of step {steps[0]} " \
               f"({os.path.join(run_dir, f'model_{steps[0]:08d}.bin')})"
    shown = [str(s) for s in steps] if len(steps) <= 6 else [str(s) for s in steps[:2]] + ["..."] + [
        str(s) for s in steps[-3:]]
    return (f"{run_dir} holds the complete checkpoints of steps {', '.join(shown)} ({len(steps)}; the newest: "
            f"{os.path.join(run_dir, f'model_{steps[-1]:08d}.bin')})")


def retired_step_note(ckpt):
    """The note for a model file whose step a resume retired (DAMAGED_NNNNNNNN beside it: -y 1 found that
    step's checkpoint damaged and went on from an earlier one), as the trainer words it
    (llmc/app/checkpoint_run.h retired_checkpoint_note); "" otherwise."""
    m = re.match(r"^model_(\d{8})\.bin$", os.path.basename(ckpt))
    run_dir = os.path.dirname(ckpt) or "."
    marker = os.path.join(run_dir, f"DAMAGED_{m.group(1)}") if m else None
    if not marker or not os.path.isfile(marker):
        return ""
    steps = sorted(int(d.group(1)) for d in map(MARKER_RE.match, os.listdir(run_dir)) if d)
    newest = f" (its newest complete checkpoint: {os.path.join(run_dir, f'model_{steps[-1]:08d}.bin')})" if steps else ""
    return (f"note: {marker} says a resume (-y 1) found step {int(m.group(1))} damaged and went on from an earlier "
            f"step: {ckpt} is of the trajectory that run left{newest}")


def not_a_model(e, ckpt):
    """The error for a file that is not a model (checkpoint.NotAModel): what it is, and what to export instead."""
    if e.kind == "state":  # the message names the model file of its step
        return f"{e} (or the run directory {os.path.dirname(ckpt) or '.'})"
    # llm.c's gpt2_*.bin: the trainer reads it (-e); one step at learning rate 0 writes the same weights as a
    # model file of ours (checked bit for bit, fp32 and bf16 files: test/test_export_hf.py), which exports
    return (f"{e}; export_hf.py exports train_gpt2_ls checkpoints: have the trainer write its weights as one, "
            f"unchanged (one step at learning rate 0, on GPT-2 BPE data such as make data-tinyshakespeare's): "
            f"./train_gpt2_ls -e {ckpt} -i 'data/shards/tinyshakespeare_gpt2/train_*.bin' -o RUN -x 1 -l 0 -b 1 "
            f"-t 64, then python3 scripts/export_hf.py RUN OUT_DIR")


def run_record(run_dir):
    """The run's config.json (a dict), or None without one."""
    conf_path = os.path.join(run_dir, "config.json") if run_dir else None
    if not conf_path or not os.path.isfile(conf_path):
        return None
    with open(conf_path) as f:
        return json.load(f)


def check_record_is_the_models(ckpt, cfg, run_dir, record):
    """A config.json beside the checkpoint that records another model than the checkpoint's (a model file
    copied into another run's directory) would give the export that run's tokenizer and data vocabulary:
    refused, naming the fields, as the trainer and the generator refuse it
    (llmc/app/checkpoint_run.h check_run_records_checkpoint_model). Fields a record lacks are not compared;
    numbers compare as float32."""
    model = (record or {}).get("model")
    if not isinstance(model, dict):
        return
    diff = []
    for key, mine in vars(cfg).items():
        if key == "padded_vocab_size" or key not in model:
            continue
        there = model[key]
        if isinstance(mine, (int, float)) and not isinstance(mine, bool) and isinstance(there, (int, float)):
            same = np.float32(mine) == np.float32(there)
        else:
            same = mine == there
        if not same:
            diff.append(f"{key} {json.dumps(mine)} vs {json.dumps(there)}")
    if diff:
        raise ExportError(f"{ckpt} is another model than {os.path.join(run_dir, 'config.json')} beside it records "
                          f"({', '.join(diff)}): the two files are of different runs, and that record's data and "
                          f"tokenizer are not the model's; keep a checkpoint beside its own run's config.json, or "
                          f"copy it alone into a directory of its own")


def data_dir(run_dir, record):
    """The directory of the run's training data (config.json's train.train_data), or None when it is not found."""
    train_data = (record or {}).get("train", {}).get("train_data")
    if not train_data:
        return None
    for base in (os.getcwd(), os.path.dirname(os.path.abspath(run_dir)), REPO):
        shards = sorted(glob.glob(os.path.join(base, train_data)))
        if shards:
            return os.path.dirname(shards[0])
    return None


def data_meta(directory):
    """The meta.json of the data directory, or None."""
    meta = os.path.join(directory, "meta.json") if directory else None
    if meta and os.path.isfile(meta):
        with open(meta) as f:
            return json.load(f)
    return None


def data_vocab_size(directory, meta, record, bpe_tokens):
    """The vocabulary of the run's training data, as the trainer's --vocab takes it (meta.json, else the
    tokenizer.bin header), else what the run's config.json "data" recorded, else the GPT-2 tokenizer's size
    (--gpt2-bpe); None when unknown."""
    if (meta or {}).get("vocab_size"):
        return int(meta["vocab_size"])
    tok = os.path.join(directory, "tokenizer.bin") if directory else None
    if tok and os.path.isfile(tok):
        header = np.fromfile(tok, dtype=np.uint32, count=4)
        if len(header) == 4 and header[0] == 20240328:
            return int(header[2])
    recorded = ((record or {}).get("data") or {}).get("train") or {}
    if recorded.get("vocab_size"):
        return int(recorded["vocab_size"])
    return bpe_tokens


def generation_config(cfg, eot, data_vocab):
    """generation_config.json for a model whose vocabulary (a --vocab above the data's, e.g. nanoGPT's 50304
    for 50257) holds ids [data_vocab, V) that no token has: generate() suppresses them, as the trainer's samples
    and generate_gpt2_ls never draw them. None when every id is a token (or the data's vocabulary is unknown)."""
    if data_vocab is None or data_vocab >= cfg.vocab_size:
        return None
    ids = {"bos_token_id": eot, "eos_token_id": eot} if eot is not None else {}
    return {**ids, "suppress_tokens": list(range(data_vocab, cfg.vocab_size))}


def fnv1a64(path):
    """FNV-1a 64 of a file's bytes as 16 hex digits (config.json's "tokenizer_bin_fnv1a64")."""
    h = 0xcbf29ce484222325
    with open(path, "rb") as f:
        for b in f.read():
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def check_data_identity(run_dir, record, directory):
    """The tokenizer next to the run's training data must be the one the run recorded (config.json "data",
    docs/training.md "A run's data identity"): ExportError when it changed; a note when the run recorded none."""
    if record is None or directory is None:
        return
    conf = os.path.join(run_dir, "config.json")
    recorded = ((record.get("data") or {}).get("train") or {})
    if not recorded:
        print(f"note: {conf} records no data identity (a run from before config.json's \"data\"): cannot check that "
              f"its data and tokenizer are still those it trained on", file=sys.stderr)
        return
    tok = os.path.join(directory, "tokenizer.bin")
    want = recorded.get("tokenizer_bin_fnv1a64")
    if want and os.path.isfile(tok) and fnv1a64(tok) != want:
        raise ExportError(f"the tokenizer of the run's training data changed since the run: {conf} records "
                          f"tokenizer {recorded.get('tokenizer')}, vocabulary {recorded.get('vocab_size')}, "
                          f"tokenizer.bin fnv1a64 {want}, and {tok} has {fnv1a64(tok)} now (the data was prepared "
                          f"again); prepare it with the run's tokenizer (data/prepare.py) and export again")


def weights_stock_gpt2(cfg, p):
    """GPT2LMHeadModel tensors: Conv1D weights are (in, out), i.e. our (out, in) matrices transposed."""
    V = cfg.vocab_size
    t = {"transformer.wte.weight": p["wte"][:V], "transformer.wpe.weight": p["wpe"],
         "transformer.ln_f.weight": p["lnfw"], "transformer.ln_f.bias": p["lnfb"]}
    for l in range(cfg.num_layers):
        h = f"transformer.h.{l}."
        t.update({h + "ln_1.weight": p["ln1w"][l], h + "ln_1.bias": p["ln1b"][l],
                  h + "attn.c_attn.weight": p["qkvw"][l].T, h + "attn.c_attn.bias": p["qkvb"][l],
                  h + "attn.c_proj.weight": p["attprojw"][l].T, h + "attn.c_proj.bias": p["attprojb"][l],
                  h + "ln_2.weight": p["ln2w"][l], h + "ln_2.bias": p["ln2b"][l],
                  h + "mlp.c_fc.weight": p["fcw"][l].T, h + "mlp.c_fc.bias": p["fcb"][l],
                  h + "mlp.c_proj.weight": p["fcprojw"][l].T, h + "mlp.c_proj.bias": p["fcprojb"][l]})
    return t


def weights_gpt2_ls(cfg, p):
    """GPT2LSForCausalLM tensors (scripts/hf_modeling_gpt2_ls.py): nn.Linear layout (out, in), as ours.
    Without biases (cfg.bias False) no *.bias tensor exists (the modules are built with bias=False)."""
    V = cfg.vocab_size
    # per layer: (HF module, our weight, our bias); the bias only when the model has biases
    per_layer = [("ln_1", "ln1w", "ln1b"), ("attn.qkv", "qkvw", "qkvb"), ("attn.proj", "attprojw", "attprojb"),
                 ("ln_2", "ln2w", "ln2b"), ("mlp.fc", "fcw", "fcb"), ("mlp.proj", "fcprojw", "fcprojb")]
    if cfg.qk_norm:
        per_layer += [("attn.q_norm", "qnormw", "qnormb"), ("attn.k_norm", "knormw", "knormb")]
    t = {"transformer.wte.weight": p["wte"][:V], "transformer.wpe.weight": p["wpe"],
         "transformer.ln_f.weight": p["lnfw"]}
    if cfg.bias:
        t["transformer.ln_f.bias"] = p["lnfb"]
    for l in range(cfg.num_layers):
        for module, weight, bias in per_layer:
            t[f"transformer.h.{l}.{module}.weight"] = p[weight][l]
            if cfg.bias:
                t[f"transformer.h.{l}.{module}.bias"] = p[bias][l]
    if not cfg.tied_embeddings:
        t["lm_head.weight"] = p["lm_head"][:V]
    return t


# The MLP's GELU as transformers' activation names (ACT2FN): "gelu" is the exact erf GELU, "gelu_new" the
# tanh approximation of GPT-2.
HF_ACTIVATION = {"tanh": "gelu_new", "erf": "gelu"}


def is_stock_gpt2(cfg):
    """Every head causal over the whole context (G = NH, or a window covering maxT), no QK-norm,
    no soft-cap, tied embeddings, GPT-2's biases: exactly GPT2LMHeadModel (which always has biases; its
    activation_function holds either GELU)."""
    all_causal = cfg.global_heads == cfg.num_heads or cfg.window >= cfg.max_seq_len
    return all_causal and not cfg.qk_norm and cfg.attn_softcap == 0 and cfg.tied_embeddings and cfg.bias


def split_params(cfg, flat):
    """Named numpy views of the flat parameter vector (llmc/core/params.h order and shapes)."""
    out, off = {}, 0
    for name, shape in param_shapes(cfg):
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    return out


def source_record(cfg, path, step, data_vocab):
    return {"checkpoint": os.path.abspath(path), "step": step, "global_heads": cfg.global_heads,
            "window": cfg.window, "qk_norm": cfg.qk_norm, "attn_softcap": cfg.attn_softcap,
            "tied_embeddings": cfg.tied_embeddings, "bias": cfg.bias, "gelu": cfg.gelu,
            "padded_vocab_size": cfg.padded_vocab_size, "data_vocab_size": data_vocab}  # None: unknown


def hf_config(cfg, stock, eot, source):
    common = {"vocab_size": cfg.vocab_size, "n_positions": cfg.max_seq_len, "n_embd": cfg.channels,
              "n_layer": cfg.num_layers, "n_head": cfg.num_heads, "layer_norm_epsilon": 1e-5,
              "tie_word_embeddings": cfg.tied_embeddings, "activation_function": HF_ACTIVATION[cfg.gelu],
              "torch_dtype": "float32", "dtype": "float32",
              "bos_token_id": eot, "eos_token_id": eot, "train_gpt2_ls": source}  # eot None: unknown
    if stock:
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], **common,
                "n_ctx": cfg.max_seq_len, "n_inner": None,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.02,
                "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                "reorder_and_upcast_attn": False, "use_cache": True}
    return {"model_type": "gpt2_ls", "architectures": ["GPT2LSForCausalLM"],
            "auto_map": {"AutoConfig": f"{MODELING_NAME}.GPT2LSConfig",
                         "AutoModelForCausalLM": f"{MODELING_NAME}.GPT2LSForCausalLM"},
            **common, "global_heads": cfg.global_heads, "window": cfg.window, "qk_norm": cfg.qk_norm,
            "attn_softcap": cfg.attn_softcap, "bias": cfg.bias, "use_cache": False}


def gpt2_bpe_dir(arg, meta):
    """Where GPT-2's encoder.json/vocab.json and vocab.bpe/merges.txt are, or None."""
    if arg:
        if not bpe_files(arg):
            raise ExportError(f"--gpt2-bpe {arg}: no encoder.json/vocab.json and vocab.bpe/merges.txt there; "
                              f"give the folder holding GPT-2's BPE files")
        return arg
    candidates = []
    src = (meta or {}).get("args", {}).get("gpt2_bpe")
    if src:
        candidates.append(src if os.path.isabs(src) else os.path.join(REPO, src))
    candidates.append(os.path.join(os.environ.get("SHARED_DATA", os.path.join(REPO, "..", "shared", "data")), "gpt2"))
    return next((d for d in candidates if bpe_files(d)), None)


def bpe_files(d):
    """(vocab json, merges) paths in d under either naming (OpenAI's or Hugging Face's), or None."""
    if not d or not os.path.isdir(d):
        return None
    def first(*names):
        return next((os.path.join(d, n) for n in names if os.path.isfile(os.path.join(d, n))), None)
    vocab, merges = first("vocab.json", "encoder.json"), first("merges.txt", "vocab.bpe")
    return (vocab, merges) if vocab and merges else None


def write_gpt2_tokenizer(out_dir, bpe_dir, max_len):
    vocab, merges = bpe_files(bpe_dir)
    shutil.copyfile(vocab, os.path.join(out_dir, "vocab.json"))
    shutil.copyfile(merges, os.path.join(out_dir, "merges.txt"))
    tok_conf = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": max_len, "add_prefix_space": False,
                "bos_token": EOT_TEXT, "eos_token": EOT_TEXT, "unk_token": EOT_TEXT}
    write_json(os.path.join(out_dir, "tokenizer_config.json"), tok_conf)
    write_json(os.path.join(out_dir, "special_tokens_map.json"),
               {"bos_token": EOT_TEXT, "eos_token": EOT_TEXT, "unk_token": EOT_TEXT})


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def export(source, out_dir, gpt2_bpe=None):
    """Writes the folder; returns (kind, checkpoint path, tokenizer written) for the summary line."""
    from safetensors.numpy import save_file

    if not os.path.isdir(source) and not os.path.isfile(source):
        raise ExportError(f"{source} does not exist; " + (steps_beside(source) or "give a run directory (-o of "
                                                          "the trainer) or a model_NNNNNNNN.bin file"))
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ExportError(f"{out_dir} already exists and is not an empty directory; choose a new OUT_DIR "
                          f"(nothing was written)")
    if os.path.isdir(source):
        run_dir, (ckpt, (cfg, flat, step)) = source, newest_checkpoint(source)
    else:
        run_dir, ckpt = os.path.dirname(os.path.abspath(source)), source
        try:
            cfg, flat, step = read_model(ckpt)
        except NotAModel as e:
            raise ExportError(not_a_model(e, ckpt)) from None
        except ValueError as e:
            raise ExportError(f"{e}; export a complete checkpoint of train_gpt2_ls") from None
        except OSError as e:  # deleted since (a run's pruning), unreadable
            raise ExportError(f"{ckpt}: cannot read: {e.strerror}; give an existing model_NNNNNNNN.bin (ls "
                              f"{run_dir}) or the run directory") from None
        retired = retired_step_note(ckpt)
        if retired:
            print(retired, file=sys.stderr)
    p = split_params(cfg, flat)
    stock = is_stock_gpt2(cfg)
    record = run_record(run_dir)
    check_record_is_the_models(ckpt, cfg, run_dir, record)
    directory = data_dir(run_dir, record)
    train_data = (record or {}).get("train", {}).get("train_data")
    if directory is None and train_data:  # e.g. the data directory was renamed or moved since the run
        print(f"note: {os.path.join(run_dir, 'config.json')} names the training data '{train_data}', whose shards "
              f"are not found (renamed or moved?): exported without a tokenizer; restore the data and export "
              f"again for one", file=sys.stderr)
    check_data_identity(run_dir, record, directory)
    meta = data_meta(directory)
    tokenizer = (meta or {}).get("tokenizer")
    eot = (meta or {}).get("eot_token")
    bpe = gpt2_bpe_dir(gpt2_bpe, meta) if (tokenizer == "gpt2" or gpt2_bpe) else None
    sp_model = os.path.join(directory, "tokenizer.model") if (directory and tokenizer == "sp" and not bpe) else None
    sp_model = sp_model if sp_model and os.path.isfile(sp_model) else None
    n_tokens = None  # the GPT-2 tokenizer's ids
    if bpe:
        with open(bpe_files(bpe)[0]) as f:
            n_tokens = len(json.load(f))
        if cfg.vocab_size < n_tokens:
            raise ExportError(f"the model's vocabulary has {cfg.vocab_size} ids but the GPT-2 tokenizer in {bpe} has "
                              f"{n_tokens}; this model was not trained on GPT-2 BPE: drop --gpt2-bpe")
        eot = n_tokens - 1 if eot is None else eot  # <|endoftext|>, GPT-2's last id (50256)
    data_vocab = data_vocab_size(directory, meta, record, n_tokens)
    gen_conf = generation_config(cfg, eot, data_vocab)

    tensors = weights_stock_gpt2(cfg, p) if stock else weights_gpt2_ls(cfg, p)
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    # everything goes into a temporary sibling renamed to OUT_DIR at the end: a failed export leaves no OUT_DIR
    tmp = f"{os.path.abspath(out_dir).rstrip(os.sep)}.tmp.{os.getpid()}"
    try:
        os.makedirs(tmp)
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        write_json(os.path.join(tmp, "config.json"),
                   hf_config(cfg, stock, eot, source_record(cfg, ckpt, step, data_vocab)))
        if gen_conf:
            write_json(os.path.join(tmp, "generation_config.json"), gen_conf)
        if not stock:
            shutil.copyfile(MODELING_SOURCE, os.path.join(tmp, MODELING_NAME + ".py"))
        if bpe:
            write_gpt2_tokenizer(tmp, bpe, cfg.max_seq_len)
        elif sp_model:
            shutil.copyfile(sp_model, os.path.join(tmp, "tokenizer.model"))
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if bpe:
        written = "GPT-2 tokenizer"
    elif sp_model:
        written = "SentencePiece tokenizer.model"
        print(f"note: {out_dir}/tokenizer.model is the data's SentencePiece model, but the installed transformers "
              f"cannot load it as an AutoTokenizer offline (its SentencePiece converter needs protobuf): encode with "
              f"sentencepiece.SentencePieceProcessor(model_file='{out_dir}/tokenizer.model').encode(text)",
              file=sys.stderr)
    elif tokenizer == "gpt2":
        written = None
        print("note: the data used GPT-2 BPE but its vocab files were not found (give --gpt2-bpe DIR); "
              "exported without a tokenizer", file=sys.stderr)
    elif tokenizer == "sp":
        written = None
        print(f"note: the data's SentencePiece model was not found (no tokenizer.model in {directory}); "
              f"exported without a tokenizer", file=sys.stderr)
    else:
        written = None
        if tokenizer:
            print(f"note: the data's tokenizer '{tokenizer}' is not exported (only GPT-2 BPE and SentencePiece "
                  f"are); exported without a tokenizer", file=sys.stderr)
    suppressed = (f"generation_config.json suppresses ids {data_vocab}..{cfg.vocab_size - 1} (above the data's "
                  f"vocabulary of {data_vocab})") if gen_conf else None
    return ("GPT2LMHeadModel" if stock else "GPT2LSForCausalLM"), ckpt, step, written, stock, suppressed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="run directory or model_NNNNNNNN.bin")
    ap.add_argument("out_dir", metavar="OUT_DIR", help="new folder for the Hugging Face model")
    ap.add_argument("--gpt2-bpe", metavar="DIR", help="folder with GPT-2's encoder.json and vocab.bpe "
                    "(or vocab.json and merges.txt); also adds the tokenizer when the run's data is unknown")
    args = ap.parse_args()
    try:
        kind, ckpt, step, tok, stock, suppressed = export(args.source, args.out_dir, args.gpt2_bpe)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    line = f"exported {ckpt} (step {step}) to {args.out_dir}: {kind}" + (f", {tok}" if tok else ", no tokenizer")
    line += f", {suppressed}" if suppressed else ""
    if not stock:  # its config.json names modeling_gpt2_ls.py (auto_map): transformers asks before running it
        line += (f"; load with trust_remote_code=True: AutoModelForCausalLM.from_pretrained('{args.out_dir}', "
                 f"trust_remote_code=True)" + (f", AutoTokenizer.from_pretrained('{args.out_dir}', "
                                               f"trust_remote_code=True)" if tok == "GPT-2 tokenizer" else ""))
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
