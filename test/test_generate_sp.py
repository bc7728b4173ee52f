"""Text prompts on SentencePiece data sets (generate_gpt2_ls --prompt, llmc/text/sp_encoder.h).

A small byte-fallback BPE model is trained with data/text_tokenizers.py train_sentencepiece (the
settings data/prepare.py --tokenizer sp uses) on tiny Shakespeare, and its tokenizer.bin written
next to it as data/prepare.py does. --encode-only's ids must equal [EOT] + sp_encode() (the python
sentencepiece library, the encode path of data/prepare.py) exactly on the whole tiny Shakespeare,
PG-19 excerpts, WikiText-2 and a string of unicode edge cases; invalid UTF-8 must give what
sentencepiece gives for the same bytes. Set GENERATE_GPT2_LS to test another build.
"""
import pytest

from test_generate import UNICODE_EDGES, assert_same_ids, corpus_texts, encode_file, gen, ids, shared_text

pytest.importorskip("sentencepiece")
import text_tokenizers as tk  # noqa: E402  (data/ is on sys.path via test_generate)


@pytest.fixture(scope="module")
def sp_data(tmp_path_factory):
    """(SentencePieceProcessor, directory with tokenizer.model + tokenizer.bin)."""
    text = shared_text("tinyshakespeare/input.txt")
    out = tmp_path_factory.mktemp("sp_tok")
    lines = tk.sample_training_lines([text], 50_000, seed=0)
    model = tk.train_sentencepiece(lines, str(out / "tokenizer.model"), 2000, seed=0)
    sp = tk.load_sentencepiece(model)
    tk.write_tokenizer_bin(out / "tokenizer.bin", tk.sp_token_bytes(sp), sp.eos_id())
    return sp, out


SP_EDGES = UNICODE_EDGES + "\u2581lower block\u2581\u2581 \ufffd replacement \u00a0\u00a0 \t\t\r\r\n\n"


@pytest.mark.parametrize("source", ["tinyshakespeare", "pg19", "wikitext2", "unicode"])
def test_sp_prompt_encoding_equals_sentencepiece(sp_data, tmp_path, source):
    sp, d = sp_data
    edges = [SP_EDGES, SP_EDGES.strip(), " " + SP_EDGES, "", " ", "\n", "a", "  a  ", "\n\n", " \t\n "]
    for i, text in enumerate(corpus_texts(source, edges)):
        want = [sp.eos_id()] + tk.sp_encode(sp, text)
        got = encode_file(d / "tokenizer.bin", text.encode("utf-8"), tmp_path, f"p{i}.txt")
        assert_same_ids(got, want, f"{source} text {i}", "sentencepiece",
                        lambda k: sp.decode(want[max(1, k - 8):k + 8]))  # from 1: past the EOS put first


def test_sp_invalid_utf8_like_sentencepiece(sp_data, tmp_path):
    """Each invalid byte becomes U+FFFD, as sentencepiece's normalizer does for bytes input."""
    sp, d = sp_data
    data = b"The quick \xff\xfe bad \xc3 x\xe2\x82\xac\xe2\x82 ok \xed\xa0\x80 \xc0\xaf end\x80"
    want = [sp.eos_id()]
    for j, line in enumerate(data.split(b"\n")):
        want += ([sp.piece_to_id("\n")] if j else []) + sp.encode(line)
    assert encode_file(d / "tokenizer.bin", data, tmp_path) == want
    # one U+FFFD per bad byte (python's errors="replace" gives one per maximal bad run: not the same)
    assert sp.encode(b"\xe2\x82") == sp.encode("\ufffd\ufffd") != sp.encode("\ufffd")


def test_sp_prompt_flag_and_explicit_model(sp_data, tmp_path):
    """--prompt == --prompt-file; --sp-model names the model when it is not next to tokenizer.bin."""
    sp, d = sp_data
    text = "First Citizen:\nBefore we proceed any further, hear me speak. \u00e9\U0001F600"
    want = [sp.eos_id()] + tk.sp_encode(sp, text)
    assert ids(gen(["--encode-only", "--tokenizer", d / "tokenizer.bin", "--prompt", text])) == want
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "tok.bin").write_bytes((d / "tokenizer.bin").read_bytes())
    p = gen(["--encode-only", "--tokenizer", other / "tok.bin", "--prompt", text], check=False)
    assert p.returncode == 1 and "--prompt-ids" in p.stderr.decode()  # no model found: refused
    assert ids(gen(["--encode-only", "--tokenizer", other / "tok.bin", "--sp-model", d / "tokenizer.model",
                    "--prompt", text])) == want


def test_sp_model_not_matching_tokenizer_is_refused(sp_data, tmp_path):
    sp, d = sp_data
    token_bytes = tk.sp_token_bytes(sp)
    token_bytes[300] = b"xyz"
    tk.write_tokenizer_bin(tmp_path / "tokenizer.bin", token_bytes, sp.eos_id())
    (tmp_path / "tokenizer.model").write_bytes((d / "tokenizer.model").read_bytes())
    p = gen(["--encode-only", "--tokenizer", tmp_path / "tokenizer.bin", "--prompt", "x"], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and "piece 300 differs" in err, err


@pytest.mark.parametrize("content, expect", [
    (b"\x0a\x05abc", "not a SentencePiece model"),
    (b"", "no pieces"),
])
def test_sp_bad_model_file_fails_with_one_line(sp_data, tmp_path, content, expect):
    _, d = sp_data
    (tmp_path / "bad.model").write_bytes(content)
    p = gen(["--encode-only", "--tokenizer", d / "tokenizer.bin", "--sp-model", tmp_path / "bad.model",
             "--prompt", "x"], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and expect in err, err


def test_sp_unigram_model_is_refused(tmp_path):
    """A model with other settings (unigram, the library's default normalization) is refused."""
    import sentencepiece as spm
    lines = [ln for ln in shared_text("tinyshakespeare/input.txt").split("\n") if ln.strip()][:5000]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=str(tmp_path / "tokenizer"),
                                   vocab_size=300, minloglevel=2)
    sp = tk.load_sentencepiece(str(tmp_path / "tokenizer.model"))
    tk.write_tokenizer_bin(tmp_path / "tokenizer.bin", tk.sp_token_bytes(sp), sp.eos_id())
    p = gen(["--encode-only", "--tokenizer", tmp_path / "tokenizer.bin", "--prompt", "x"], check=False)
    err = p.stderr.decode()
    assert p.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert "is not BPE" in err and "--prompt-ids" in err, err
