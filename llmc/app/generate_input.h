// What generate_gpt2_ls feeds the model, from its flags (llmc/app/generate_cli.h): the tokenizer, the
// prompt's token ids and the context kept, each checked against the model (one-line InputErrors).
// A text prompt (--prompt / --prompt-file) is the tokenizer's EOT followed by the text's tokens:
// SentencePiece with --sp-model or the tokenizer.model next to --tokenizer (llmc/text/sp_encoder.h),
// else GPT-2 BPE or bytes (llmc/text/bpe_encoder.h); docs/generation.md.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "llmc/app/generate_cli.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/text/bpe_encoder.h"
#include "llmc/text/sp_encoder.h"
#include "llmc/text/tokenizer.h"

namespace llmc {

// The bytes of --prompt-file, unchanged (a trailing newline stays part of the prompt).
inline std::string read_prompt_file(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw InputError("--prompt-file '" + path + "' cannot be opened; pass an existing text file");
    std::string text;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) throw InputError("--prompt-file '" + path + "' could not be read; check the file");
    return text;
}

inline bool has_text_prompt(const GenerateConfig& g) { return g.has_prompt_text || !g.prompt_file.empty(); }

// --prompt / --prompt-file -> the tokenizer's EOT followed by the text's tokens.
inline std::vector<int> text_prompt(const GenerateConfig& g, const Tokenizer& tok) {
    const std::string text = g.has_prompt_text ? g.prompt_text : read_prompt_file(g.prompt_file);
    const std::string sp_model = sp_model_for(g.sp_model, g.tokenizer, tok);
    if (!sp_model.empty()) return encode_prompt_sp(tok, sp_model, text);
    return encode_prompt(tok, text);
}

struct GenerationInput {
    Tokenizer tokenizer;      // absent without --tokenizer (tokens then print as <id>)
    std::vector<int> prompt;  // token ids < the model's vocab_size
    int max_len = 0;          // context kept, <= the model's max_seq_len
};

// The tokenizer, prompt and context of a generation with model `mc`, in this order of checks.
inline GenerationInput generation_input(const GenerateConfig& g, const ModelConfig& mc) {
    GenerationInput in;
    Tokenizer& tok = in.tokenizer;
    if (!g.tokenizer.empty()) {
        tok = Tokenizer(g.tokenizer);
        if (tok.vocab_size() > mc.vocab_size)
            throw InputError("tokenizer '" + g.tokenizer + "' has " + std::to_string(tok.vocab_size()) +
                             " tokens but the model only " + std::to_string(mc.vocab_size) +
                             "; pass the tokenizer.bin of the model's training data");
    }
    if (has_text_prompt(g)) {
        in.prompt = text_prompt(g, tok);  // ids < the tokenizer's vocabulary <= the model's (checked above)
    } else if (!g.prompt_ids.empty()) {
        in.prompt = parse_token_ids(g.prompt_ids);
    } else if (tok.present()) {
        in.prompt = {tok.eot_token()};
    } else {
        throw InputError(
            "no prompt: pass --prompt-ids '1,2,3', or --tokenizer tokenizer.bin (then the prompt is its "
            "EOT token, or --prompt TEXT)");
    }
    for (int id : in.prompt) {
        if (id >= mc.vocab_size)
            throw InputError("--prompt-ids: token " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                             std::to_string(mc.vocab_size) + ")");
        // a padding row of a model trained with a --vocab above its tokenizer's: no text has it
        if (tok.present() && id >= tok.vocab_size())
            throw InputError("--prompt-ids: token " + std::to_string(id) + " is one of the model's padding rows (" +
                             std::to_string(tok.vocab_size()) + ".." + std::to_string(mc.vocab_size - 1) +
                             ": its vocabulary " + std::to_string(mc.vocab_size) + " is above the tokenizer's " +
                             std::to_string(tok.vocab_size()) + ", and no text has those ids); give ids below " +
                             std::to_string(tok.vocab_size()));
    }
    in.max_len = g.max_len > 0 ? g.max_len : mc.max_seq_len;
    if (in.max_len > mc.max_seq_len)
        throw InputError("--max-len " + std::to_string(in.max_len) + " exceeds the model's max_seq_len " +
                         std::to_string(mc.max_seq_len) + "; use --max-len <= " + std::to_string(mc.max_seq_len));
    return in;
}

// The note for a prompt longer than the context in.max_len: generate() reads its newest max_len tokens (as
// nanoGPT's sample.py crops idx to block_size), so the first ones are dropped; "" when the prompt fits.
inline std::string prompt_cut_note(const GenerationInput& in, const GenerateConfig& g, const ModelConfig& mc) {
    const size_t n = in.prompt.size(), keep = (size_t)in.max_len;
    if (n <= keep) return "";
    const bool by_flag = g.max_len > 0;
    const std::string limit = by_flag ? "--max-len " + std::to_string(in.max_len)
                                      : "the model's max_seq_len " + std::to_string(mc.max_seq_len);
    const std::string fix = by_flag && in.max_len < mc.max_seq_len
                                ? "pass a shorter prompt, or --max-len up to " + std::to_string(mc.max_seq_len)
                                : "pass a shorter prompt";
    return "note: the prompt has " + std::to_string(n) + " tokens, more than " + limit + ": its first " +
           std::to_string(n - keep) + " are dropped and the newest " + std::to_string(keep) + " kept (" + fix + ")";
}

// The prompt as generate_gpt2_ls echoes it on stdout before the continuation (as nanoGPT's sample.py
// prints the decoded start): its tokens' bytes, without a leading EOT (the document start a text prompt
// and the default prompt begin with: the text the user gave, not "<|endoftext|>"). Without a
// tokenizer, each id as <id>, as the continuation prints.
inline std::string prompt_echo(const GenerationInput& in) {
    const bool leading_eot =
        in.tokenizer.present() && !in.prompt.empty() && in.prompt.front() == in.tokenizer.eot_token();
    const size_t from = leading_eot ? 1 : 0;
    return in.tokenizer.decode(in.prompt.data() + from, in.prompt.size() - from);
}

}  // namespace llmc
