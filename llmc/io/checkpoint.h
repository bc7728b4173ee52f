// Model checkpoint files (docs/formats.md): a 256-int32 header carrying every ModelConfig field and
// a 64-bit FNV-1a checksum of the header itself, then all parameters in the order of
// llmc/core/params.h as fp32 or bf16, with a 64-bit FNV-1a checksum of the payload. Also reads
// llm.c's GPT-2 checkpoints (magic 20240326, version 3 = fp32, version 5 = bf16) as an all-global
// model. Host-only, no GPU needed.
// Files are little-endian; like llm.c we read and write them with the host's byte order.
#pragma once
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/core/params.h"
#include "llmc/io/shard.h"

namespace llmc {

constexpr int MODEL_MAGIC = 20250521;
// Version 4 (written): version 3 with the tokenizer it was trained with in words 24-25. Version 3: any
// model (words 20 and 21 say biases and GELU), with the header's checksum in words 22-23, so that a
// flip anywhere in the header is damage, never another model or build. Read too, without a header
// checksum: version 1, a model with GPT-2's biases and tanh GELU (words 20 and 21 are 0), and version 2,
// a model without biases or with the erf GELU; their version must match their words 20 and 21. A build
// that reads only up to version 3 refuses version 4 as another build's file (never as damage: its words
// 24-25 would be).
constexpr int MODEL_VERSION = 1;
constexpr int MODEL_VERSION_OPTIONS = 2;
constexpr int MODEL_VERSION_SUMMED = 3;
constexpr int MODEL_VERSION_TOKENIZER = 4;
inline int model_file_version_unsummed(const ModelConfig& c) {
    return c.bias && c.gelu == Gelu::Tanh ? MODEL_VERSION : MODEL_VERSION_OPTIONS;
}
constexpr int LLMC_MAGIC = 20240326;   // llm.c gpt2_*.bin
constexpr int STATE_MAGIC = 20250522;  // a training-state file (llmc/io/train_state.h), never a model
constexpr int LLMC_VERSION_FP32 = 3;
constexpr int LLMC_VERSION_BF16 = 5;
constexpr size_t CKPT_HEADER_INTS = 256;
constexpr size_t CKPT_HEADER_BYTES = CKPT_HEADER_INTS * sizeof(int32_t);

// A file that is damaged (truncated, wrong checksum, garbage header, missing). Still an
// InputError; the checkpoint directory code catches this kind to fall back to an older step. Its
// message is "FILE: what is wrong; what to do", the advice after the last "; " (damage_without_advice
// in llmc/io/checkpoint_dir.h drops it).
struct CheckpointDamaged : InputError {
    explicit CheckpointDamaged(const std::string& msg) : InputError(msg) {}
};

// ----------------------------------------------------------------------------------------------
// checksum and bf16

constexpr uint64_t FNV1A64_OFFSET = 0xcbf29ce484222325ull;
constexpr uint64_t FNV1A64_PRIME = 0x100000001b3ull;

// 64-bit FNV-1a over bytes; pass the previous result as h to continue over several buffers.
inline uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = FNV1A64_OFFSET) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= FNV1A64_PRIME;
    }
    return h;
}

// fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t float_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + rounding) >> 16);
}

// bf16 -> fp32 is exact: the bf16 bits are the top half of the float.
inline float bf16_to_float(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

// ----------------------------------------------------------------------------------------------
// header fields

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void put_u64(int32_t* h, int i, uint64_t v) {
    h[i] = (int32_t)(uint32_t)v;
    h[i + 1] = (int32_t)(uint32_t)(v >> 32);
}
inline uint64_t get_u64(const int32_t* h, int i) {
    return (uint64_t)(uint32_t)h[i] | ((uint64_t)(uint32_t)h[i + 1] << 32);
}

// The checksum of a 1024-byte header (h: CKPT_HEADER_INTS words) that stores it in words sum_at and
// sum_at + 1: FNV-1a 64 of the header's bytes with those two words taken as 0.
inline uint64_t header_checksum(const int32_t* h, int sum_at) {
    int32_t copy[CKPT_HEADER_INTS];
    std::memcpy(copy, h, CKPT_HEADER_BYTES);
    copy[sum_at] = copy[sum_at + 1] = 0;
    return fnv1a64(copy, CKPT_HEADER_BYTES);
}

// Whether a header whose version word (1) is not one this build reads is one of `summed_version`'s with
// only that word damaged: its stored checksum holds for the header with the version put back.
inline bool version_word_damaged(const int32_t* h, int sum_at, int summed_version) {
    int32_t copy[CKPT_HEADER_INTS];
    std::memcpy(copy, h, CKPT_HEADER_BYTES);
    copy[1] = summed_version;
    return get_u64(h, sum_at) == header_checksum(copy, sum_at);
}

// Header indices 2..13, 20 and 21 (see docs/formats.md); dtype (12) is set by the writer. Index 20
// holds "no biases" and 21 the GELU, so that the zeros of a file written before they existed read as
// GPT-2's biases and tanh GELU.
constexpr int CKPT_NO_BIAS = 20;
constexpr int CKPT_GELU = 21;
constexpr int CKPT_HEADER_SUM = 22;  // words 22-23 of a version-3 or 4 file: header_checksum(h, 22)
// Words 24-25 of a version-4 file: the FNV-1a 64 of the tokenizer.bin next to the training data the
// model was trained on, 0 when that data had none (unknown).
constexpr int CKPT_TOKENIZER = 24;
inline void put_config_fields(int32_t* h, const ModelConfig& c) {
    h[2] = c.max_seq_len;
    h[3] = c.vocab_size;
    h[4] = c.num_layers;
    h[5] = c.num_heads;
    h[6] = c.channels;
    h[7] = c.padded_vocab_size;
    h[8] = c.global_heads;
    h[9] = c.window;
    h[10] = c.qk_norm ? 1 : 0;
    h[11] = c.tied_embeddings ? 1 : 0;
    h[13] = (int32_t)float_bits(c.attn_softcap);
    h[CKPT_NO_BIAS] = c.bias ? 0 : 1;
    h[CKPT_GELU] = (int32_t)c.gelu;
}

// The ModelConfig of header indices 2..13, 20 and 21, put_config_fields' inverse (a flag is on when its field is
// exactly 1; whether the fields are valid is the caller's to check).
inline ModelConfig get_config_fields(const int32_t* h) {
    ModelConfig c;
    c.max_seq_len = h[2];
    c.vocab_size = h[3];
    c.num_layers = h[4];
    c.num_heads = h[5];
    c.channels = h[6];
    c.padded_vocab_size = h[7];
    c.global_heads = h[8];
    c.window = h[9];
    c.qk_norm = h[10] == 1;
    c.tied_embeddings = h[11] == 1;
    c.attn_softcap = bits_float((uint32_t)h[13]);
    c.bias = h[CKPT_NO_BIAS] != 1;
    c.gelu = (Gelu)h[CKPT_GELU];
    return c;
}

// Identifies a model architecture: FNV-1a of the config header fields (not the dtype). The
// training-state file stores it so optimizer state is never loaded into a different model. Indices 2..13
// always; 20 and 21 only when either is not 0 (a model without biases or with erf GELU), so that the
// hash of every model that existed before them, and the state files that store it, stay as they were.
inline uint64_t model_config_hash(const ModelConfig& c) {
    int32_t h[CKPT_GELU + 1] = {0};
    put_config_fields(h, c);
    h[12] = 0;
    const uint64_t base = fnv1a64(h + 2, 12 * sizeof(int32_t));
    if (h[CKPT_NO_BIAS] == 0 && h[CKPT_GELU] == 0) return base;
    return fnv1a64(h + CKPT_NO_BIAS, 2 * sizeof(int32_t), base);
}

// ----------------------------------------------------------------------------------------------
// small file-reading helpers shared by the checkpoint readers

struct FileCloser {
    void operator()(std::FILE* f) const {
        if (f) std::fclose(f);
    }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Opens path for reading; a missing or unreadable file is CheckpointDamaged (the caller may
// fall back to another checkpoint). Sets size to the file's length in bytes.
inline FilePtr open_for_read(const std::string& path, size_t& size) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
        throw CheckpointDamaged(path + ": cannot open: " + std::strerror(errno) + "; check the path");
    if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file; pass a checkpoint file");
    FilePtr f(std::fopen(path.c_str(), "rb"));
    if (!f) throw CheckpointDamaged(path + ": cannot open: " + std::strerror(errno) + "; check permissions");
    size = (size_t)st.st_size;
    return f;
}

inline void read_exact(std::FILE* f, void* dst, size_t bytes, const std::string& path) {
    if (bytes > 0 && std::fread(dst, 1, bytes, f) != bytes)
        throw CheckpointDamaged(path + ": read failed (file truncated while reading?); use another checkpoint");
}

// ----------------------------------------------------------------------------------------------
// save

// Writes params (param_layout(config).total fp32 values) atomically to path; bf16 = true stores
// the payload as bf16 (round to nearest even), halving the file. trained_seq_len: the sequence
// length T the model was trained at (header[19]; 0 = unknown, at most config.max_seq_len).
// tokenizer_id: the FNV-1a 64 of the training data's tokenizer.bin (header[24..25]; 0 = unknown).
inline void save_model_checkpoint(const std::string& path, const ModelConfig& config, const float* params, int step,
                                  bool bf16 = false, int trained_seq_len = 0, uint64_t tokenizer_id = 0) {
    std::string err = validate_model_config(config);
    if (!err.empty()) throw InputError(path + ": refusing to save an invalid model: " + err);
    if (step < 0) throw InputError(path + ": refusing to save with negative step " + std::to_string(step));
    if (trained_seq_len < 0 || trained_seq_len > config.max_seq_len)
        throw InputError(path + ": refusing to save trained sequence length " + std::to_string(trained_seq_len) +
                         " outside [0, max_seq_len " + std::to_string(config.max_seq_len) + "]");
    const size_t n = param_layout(config).total;

    std::vector<uint16_t> half;  // (n) bf16 payload when bf16
    const void* payload = params;
    size_t payload_bytes = n * sizeof(float);
    if (bf16) {
        half.resize(n);
        for (size_t i = 0; i < n; i++) half[i] = float_to_bf16(params[i]);
        payload = half.data();
        payload_bytes = n * sizeof(uint16_t);
    }

    std::vector<int32_t> h(CKPT_HEADER_INTS, 0);
    h[0] = MODEL_MAGIC;
    h[1] = MODEL_VERSION_TOKENIZER;
    put_config_fields(h.data(), config);
    h[12] = bf16 ? 1 : 0;
    put_u64(h.data(), 14, (uint64_t)n);
    put_u64(h.data(), 16, fnv1a64(payload, payload_bytes));
    h[18] = step;
    h[19] = trained_seq_len;
    put_u64(h.data(), CKPT_TOKENIZER, tokenizer_id);
    put_u64(h.data(), CKPT_HEADER_SUM, header_checksum(h.data(), CKPT_HEADER_SUM));

    AtomicFile f(path);
    f.write(h.data(), CKPT_HEADER_BYTES);
    f.write(payload, payload_bytes);
    f.commit();
}

// ----------------------------------------------------------------------------------------------
// load

struct ModelCheckpoint {
    ModelConfig config;
    std::vector<float> params;  // (param_layout(config).total) fp32
    int step = 0;               // training step it was written at (0 for llm.c files)
    int trained_seq_len = 0;    // the sequence length T it was trained at; 0 = unknown (llm.c files, older files)
    bool from_llmc = false;     // read from an llm.c GPT-2 checkpoint
    bool bf16 = false;          // the file stored bf16 (params were widened to fp32)
    uint64_t tokenizer_id = 0;  // the FNV-1a 64 of its training data's tokenizer.bin; 0 = unknown (versions 1-3,
                                // llm.c files, data without a tokenizer.bin)
};

namespace detail {

// Reads n parameters stored as fp32 or bf16 after the header; returns the payload checksum.
inline uint64_t read_payload(std::FILE* f, size_t n, bool bf16, std::vector<float>& params, const std::string& path) {
    params.resize(n);
    if (!bf16) {
        read_exact(f, params.data(), n * sizeof(float), path);
        return fnv1a64(params.data(), n * sizeof(float));
    }
    std::vector<uint16_t> half(n);
    read_exact(f, half.data(), n * sizeof(uint16_t), path);
    for (size_t i = 0; i < n; i++) params[i] = bf16_to_float(half[i]);
    return fnv1a64(half.data(), n * sizeof(uint16_t));
}

inline void check_size(const std::string& path, size_t actual, size_t n, size_t bytes_per_param) {
    size_t expected = CKPT_HEADER_BYTES + n * bytes_per_param;
    if (actual != expected)
        throw CheckpointDamaged(path + ": file is " + std::to_string(actual) + " bytes but its header describes " +
                                std::to_string(expected) + " (" + std::to_string(n) +
                                " parameters); the file is truncated or damaged, use another checkpoint");
}

// llm.c GPT-2 checkpoint -> an all-global model (G = NH, window = maxT, tied, no QK-norm/cap).
// The model an llm.c GPT-2 header describes: its indices 2..7 are ours (maxT, V, L, NH, C, Vp); the
// rest is GPT-2's (every head global, biases, tanh GELU, tied embeddings).
inline ModelConfig llmc_model_config(const int32_t* h) {
    ModelConfig c = get_config_fields(h);
    c.global_heads = c.num_heads;
    c.window = c.max_seq_len;
    c.qk_norm = false;
    c.attn_softcap = 0.0f;
    c.tied_embeddings = true;
    c.bias = true;
    c.gelu = Gelu::Tanh;
    return c;
}

inline ModelCheckpoint load_llmc_checkpoint(std::FILE* f, const int32_t* h, size_t size, const std::string& path) {
    if (h[1] != LLMC_VERSION_FP32 && h[1] != LLMC_VERSION_BF16)
        throw InputError(path + ": llm.c checkpoint version " + std::to_string(h[1]) +
                         " is not supported; use version 3 (fp32) or 5 (bf16) from llm.c's train_gpt2");
    ModelCheckpoint ck;
    ModelConfig& c = ck.config;
    c = llmc_model_config(h);
    std::string err = validate_model_config(c);
    if (!err.empty())
        throw CheckpointDamaged(path + ": llm.c header describes an invalid model (" + err +
                                "); the file is damaged or not a GPT-2 checkpoint");
    ck.bf16 = h[1] == LLMC_VERSION_BF16;
    ck.from_llmc = true;
    ck.step = 0;
    const size_t n = param_layout(c).total;
    check_size(path, size, n, ck.bf16 ? 2 : 4);
    read_payload(f, n, ck.bf16, ck.params, path);  // llm.c files carry no checksum
    return ck;
}

}  // namespace detail

// The identity of a model file that eval.json records ("model_header_fnv1a64"): FNV-1a 64 of its first
// 1024 bytes (the header), 16 hex digits. A train_gpt2_ls header holds the payload checksum (words 16-17)
// and every model field, so other weights or another shape give another identity; an llm.c header holds
// the shape only. "" when the file cannot be read or is shorter than a header.
inline std::string model_header_identity(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return "";
    unsigned char h[CKPT_HEADER_BYTES];
    const size_t got = std::fread(h, 1, sizeof h, f);
    std::fclose(f);
    if (got != sizeof h) return "";
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(h, sizeof h));
    return hex;
}

// The model a model file's header describes (a train_gpt2_ls or an llm.c file), read from the header
// alone and unchecked (load_model_checkpoint checks it); nullopt when the file cannot be read or is
// neither. For comparisons made before the file is loaded.
inline std::optional<ModelConfig> peek_model_config(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return std::nullopt;
    int32_t h[CKPT_HEADER_INTS];
    const size_t got = std::fread(h, 1, sizeof h, f);
    std::fclose(f);
    if (got != sizeof h) return std::nullopt;
    if (h[0] == LLMC_MAGIC) return detail::llmc_model_config(h);
    if (h[0] == MODEL_MAGIC) return get_config_fields(h);
    return std::nullopt;
}

// Reads a train_gpt2_ls model file (checked: magic, version, header fields, size, checksum) or
// an llm.c GPT-2 checkpoint. Throws CheckpointDamaged for damage, InputError otherwise.
inline ModelCheckpoint load_model_checkpoint(const std::string& path) {
    size_t size = 0;
    FilePtr f = open_for_read(path, size);
    if (size < CKPT_HEADER_BYTES)
        throw CheckpointDamaged(path + ": file is " + std::to_string(size) + " bytes, shorter than the " +
                                std::to_string(CKPT_HEADER_BYTES) +
                                "-byte header; it is truncated or not a checkpoint");
    std::vector<int32_t> h(CKPT_HEADER_INTS);
    read_exact(f.get(), h.data(), CKPT_HEADER_BYTES, path);

    if (h[0] == LLMC_MAGIC) return detail::load_llmc_checkpoint(f.get(), h.data(), size, path);
    if (h[0] == STATE_MAGIC) {  // header word 2: its step
        char model[32];
        std::snprintf(model, sizeof model, "model_%08d.bin", h[2] < 0 ? 0 : (int)h[2]);
        const size_t slash = path.find_last_of('/');
        throw CheckpointDamaged(path + ": a training-state file (optimizer state), not a model; pass the model file " +
                                (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + model);
    }
    if (h[0] != MODEL_MAGIC) {
        if (h[0] == kShardMagic)
            throw CheckpointDamaged(path + ": a token shard (data, data/prepare.py's), not a model; pass a run's " +
                                    "model_NNNNNNNN.bin or an llm.c gpt2_*.bin");
        // safetensors: a little-endian u64 header length, then its JSON header ('{')
        if (reinterpret_cast<const unsigned char*>(h.data())[8] == '{')
            throw CheckpointDamaged(path + ": a safetensors file (a Hugging Face export, scripts/export_hf.py), not " +
                                    "a model of ours; pass the model_NNNNNNNN.bin it was exported from");
        throw CheckpointDamaged(path + ": bad magic " + std::to_string(h[0]) + ": not a train_gpt2_ls model (" +
                                std::to_string(MODEL_MAGIC) + ") nor an llm.c GPT-2 checkpoint (" +
                                std::to_string(LLMC_MAGIC) + "); pass a model_NNNNNNNN.bin or an llm.c gpt2_*.bin");
    }
    auto bad_header = [&](const std::string& what) {
        return CheckpointDamaged(path + ": corrupt header: " + what + "; the file is damaged, use another checkpoint");
    };
    const bool with_tokenizer = h[1] == MODEL_VERSION_TOKENIZER;
    const bool summed = h[1] == MODEL_VERSION_SUMMED || with_tokenizer;
    if (h[1] != MODEL_VERSION && h[1] != MODEL_VERSION_OPTIONS && !summed) {
        for (const int v : {MODEL_VERSION_TOKENIZER, MODEL_VERSION_SUMMED})
            if (version_word_damaged(h.data(), CKPT_HEADER_SUM, v))
                throw bad_header("version word is " + std::to_string(h[1]) + ", its header checksum says " +
                                 std::to_string(v));
        throw InputError(path + ": model checkpoint version " + std::to_string(h[1]) +
                         " is not supported (this build reads versions 1 to " +
                         std::to_string(MODEL_VERSION_TOKENIZER) + "); use a train_gpt2_ls build that wrote it");
    }
    const size_t first_reserved = with_tokenizer ? CKPT_TOKENIZER + 2 : summed ? CKPT_HEADER_SUM + 2 : CKPT_GELU + 1;
    for (size_t i = first_reserved; i < CKPT_HEADER_INTS; i++)
        if (h[i] != 0)
            throw bad_header("reserved header field " + std::to_string(i) + " is " + std::to_string(h[i]) +
                             ", expected 0");
    if (h[10] != 0 && h[10] != 1) throw bad_header("qk_norm flag is " + std::to_string(h[10]) + ", expected 0 or 1");
    if (h[11] != 0 && h[11] != 1) throw bad_header("tied flag is " + std::to_string(h[11]) + ", expected 0 or 1");
    if (h[CKPT_NO_BIAS] != 0 && h[CKPT_NO_BIAS] != 1)
        throw bad_header("no-bias flag is " + std::to_string(h[CKPT_NO_BIAS]) + ", expected 0 or 1");
    if (h[CKPT_GELU] != 0 && h[CKPT_GELU] != 1)
        throw bad_header("GELU kind is " + std::to_string(h[CKPT_GELU]) + ", expected 0 (tanh) or 1 (erf)");
    if (h[12] != 0 && h[12] != 1)
        throw bad_header("payload dtype is " + std::to_string(h[12]) + ", expected 0 (fp32) or 1 (bf16)");
    if (h[18] < 0) throw bad_header("negative step " + std::to_string(h[18]));
    if (h[19] < 0 || h[19] > h[2])
        throw bad_header("trained sequence length " + std::to_string(h[19]) + " is outside [0, max_seq_len " +
                         std::to_string(h[2]) + "]");

    ModelCheckpoint ck;
    ck.config = get_config_fields(h.data());
    const ModelConfig& c = ck.config;
    std::string err = validate_model_config(c);
    if (!err.empty()) throw bad_header("it describes an invalid model (" + err + ")");
    ck.bf16 = h[12] == 1;
    ck.step = h[18];
    ck.trained_seq_len = h[19];
    ck.tokenizer_id = with_tokenizer ? get_u64(h.data(), CKPT_TOKENIZER) : 0;

    const size_t n = param_layout(c).total;
    const uint64_t stored_n = get_u64(h.data(), 14);
    if (stored_n != n)
        throw bad_header("parameter count " + std::to_string(stored_n) + " does not match the " + std::to_string(n) +
                         " its model fields imply");
    if (!summed && h[1] != model_file_version_unsummed(c))
        throw bad_header("version " + std::to_string(h[1]) + " does not match its model fields (biases " +
                         (c.bias ? "on" : "off") + ", " + gelu_name(c.gelu) + " GELU: version " +
                         std::to_string(model_file_version_unsummed(c)) + ")");
    if (summed && get_u64(h.data(), CKPT_HEADER_SUM) != header_checksum(h.data(), CKPT_HEADER_SUM))
        throw bad_header("header checksum mismatch");
    detail::check_size(path, size, n, ck.bf16 ? 2 : 4);
    uint64_t sum = detail::read_payload(f.get(), n, ck.bf16, ck.params, path);
    if (sum != get_u64(h.data(), 16))
        throw CheckpointDamaged(path + ": checksum mismatch (payload damaged); use another checkpoint");
    return ck;
}

// The note for using a checkpoint over T positions (`use`: "--eval-only -t", "generation") past the
// sequence length it was trained at: positions beyond it were never trained. "" when T is within it
// or the length is unknown (0).
inline std::string past_trained_length_note(const ModelCheckpoint& ck, const std::string& path, int T,
                                            const std::string& use) {
    if (ck.trained_seq_len <= 0 || T <= ck.trained_seq_len) return "";
    return "note: " + use + " uses " + std::to_string(T) + " positions, more than the " +
           std::to_string(ck.trained_seq_len) + " " + path + " was trained at (-t " +
           std::to_string(ck.trained_seq_len) + "); positions beyond them were never trained";
}

}  // namespace llmc
