// Training-state files (docs/formats.md): everything besides the model weights that a
// resumed run needs to continue bit-identically: AdamW moments, fp32 master weights, RNG states,
// the train data-loader position and an opaque section for the loop's own state (e.g. the spike
// detector's window). One file per rank, state_NNNNNNNN_RRRRR.bin, written atomically.
// Host-only, no GPU needed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llmc/io/atomic_file.h"
#include "llmc/io/checkpoint.h"
#include "llmc/core/error.h"
#include "llmc/core/model_config.h"
#include "llmc/core/params.h"

namespace llmc {

// The magic is STATE_MAGIC (llmc/io/checkpoint.h, whose model reader names such a file).
// Version 2 (written): header words 19-20 hold the header's checksum, so that a flip anywhere in the
// header is damage, never another run's file. Version 1 (read too): no header checksum.
constexpr int STATE_VERSION_UNSUMMED = 1;
constexpr int STATE_VERSION = 2;
constexpr int STATE_HEADER_SUM = 19;  // words 19-20 of a version-2 file: header_checksum(h, 19)

struct TrainState {
    int step = 0;                 // optimizer steps completed when it was written
    int rank = 0;                 // process that wrote it
    int world_size = 1;           // number of processes of the run that wrote it
    std::vector<float> m, v;      // (num_params) AdamW first and second moments
    std::vector<float> master;    // (num_params) fp32 master weights, or empty when not kept
    std::vector<uint64_t> rng;    // RNG states (Rng::state()), in an order the loop defines
    std::vector<int64_t> loader;  // train data-loader state (its own save/restore format)
    std::vector<double> extra;    // opaque loop state (spike-detector window, ...)
};

// Header (256 int32, like the model file); 64-bit values as low, high 32 bits.
//   0 magic, 1 version, 2 step, 3 rank, 4 world size, 5-6 num_params (length of m and v),
//   7-8 model_config_hash, 9-10 length of master (0 or num_params), 11-12 rng count,
//   13-14 loader count, 15-16 extra count, 17-18 FNV-1a of the payload bytes, 19-20 the header's
//   checksum (header_checksum(h, 19); version 2), 21..255 zero.
// Payload: m (fp32), v (fp32), master (fp32), rng (uint64), loader (int64), extra (float64).
inline void save_train_state(const std::string& path, const ModelConfig& config, const TrainState& s) {
    const size_t n = param_layout(config).total;
    auto refuse = [&](const std::string& what) {
        return InputError(path + ": refusing to save training state: " + what);
    };
    if (s.m.size() != n || s.v.size() != n)
        throw refuse("AdamW moments have " + std::to_string(s.m.size()) + " and " + std::to_string(s.v.size()) +
                     " values, the model has " + std::to_string(n) + " parameters");
    if (!s.master.empty() && s.master.size() != n)
        throw refuse("master weights have " + std::to_string(s.master.size()) + " values, expected 0 or " +
                     std::to_string(n));
    if (s.world_size < 1 || s.rank < 0 || s.rank >= s.world_size)
        throw refuse("rank " + std::to_string(s.rank) + " is not in 0..world size " + std::to_string(s.world_size) +
                     "-1");
    if (s.step < 0) throw refuse("negative step " + std::to_string(s.step));

    struct Section {
        const void* data;
        size_t bytes;
    };
    const Section sections[] = {
        {s.m.data(), n * sizeof(float)},
        {s.v.data(), n * sizeof(float)},
        {s.master.data(), s.master.size() * sizeof(float)},
        {s.rng.data(), s.rng.size() * sizeof(uint64_t)},
        {s.loader.data(), s.loader.size() * sizeof(int64_t)},
        {s.extra.data(), s.extra.size() * sizeof(double)},
    };
    uint64_t sum = FNV1A64_OFFSET;
    for (const Section& sec : sections) sum = fnv1a64(sec.data, sec.bytes, sum);

    std::vector<int32_t> h(CKPT_HEADER_INTS, 0);
    h[0] = STATE_MAGIC;
    h[1] = STATE_VERSION;
    h[2] = s.step;
    h[3] = s.rank;
    h[4] = s.world_size;
    put_u64(h.data(), 5, n);
    put_u64(h.data(), 7, model_config_hash(config));
    put_u64(h.data(), 9, s.master.size());
    put_u64(h.data(), 11, s.rng.size());
    put_u64(h.data(), 13, s.loader.size());
    put_u64(h.data(), 15, s.extra.size());
    put_u64(h.data(), 17, sum);
    put_u64(h.data(), STATE_HEADER_SUM, header_checksum(h.data(), STATE_HEADER_SUM));

    AtomicFile f(path);
    f.write(h.data(), CKPT_HEADER_BYTES);
    for (const Section& sec : sections) f.write(sec.data, sec.bytes);
    f.commit();
}

// The header of a training-state file of a version this build reads: its step, rank, world size and
// model config hash, unchecked (a damaged file may hold anything); nullopt when the file cannot be
// read or is not such a file. Lets a caller that knows what the file should hold tell damage from
// the user's mismatch (load_checkpoint_at).
struct TrainStateHeader {
    int step = 0, rank = 0, world_size = 0;
    uint64_t config_hash = 0;
};
inline std::optional<TrainStateHeader> peek_train_state_header(const std::string& path) {
    FilePtr f(std::fopen(path.c_str(), "rb"));
    std::vector<int32_t> h(CKPT_HEADER_INTS);
    if (!f || std::fread(h.data(), 1, CKPT_HEADER_BYTES, f.get()) != CKPT_HEADER_BYTES) return std::nullopt;
    if (h[0] != STATE_MAGIC || (h[1] != STATE_VERSION && h[1] != STATE_VERSION_UNSUMMED)) return std::nullopt;
    return TrainStateHeader{h[2], h[3], h[4], get_u64(h.data(), 7)};
}

// A state file written by another number of processes than this run has (load_train_state): the
// user's mismatch, said by the caller as a resume's or a fork's.
struct StateWorldSizeMismatch : InputError {
    int written;    // the process count of the run that wrote it
    int step = -1;  // the checkpoint's step (set by load_checkpoint_at, llmc/io/checkpoint_dir.h)
    StateWorldSizeMismatch(const std::string& msg, int w) : InputError(msg), written(w) {}
};

// Reads the state file of this rank for a run of world_size processes training `config`.
// Refuses (InputError) a different process count, rank or model; damage (size, checksum,
// garbage header) is CheckpointDamaged so the caller can fall back to an older checkpoint.
inline TrainState load_train_state(const std::string& path, const ModelConfig& config, int rank, int world_size) {
    size_t size = 0;
    FilePtr f = open_for_read(path, size);
    if (size < CKPT_HEADER_BYTES)
        throw CheckpointDamaged(path + ": file is " + std::to_string(size) + " bytes, shorter than the " +
                                std::to_string(CKPT_HEADER_BYTES) +
                                "-byte header; it is truncated, use another checkpoint");
    std::vector<int32_t> h(CKPT_HEADER_INTS);
    read_exact(f.get(), h.data(), CKPT_HEADER_BYTES, path);
    if (h[0] != STATE_MAGIC)
        throw CheckpointDamaged(path + ": bad magic " + std::to_string(h[0]) + ", expected " +
                                std::to_string(STATE_MAGIC) +
                                "; not a training-state file or damaged, use another checkpoint");
    const bool summed = h[1] == STATE_VERSION;
    if (!summed && h[1] != STATE_VERSION_UNSUMMED) {
        if (version_word_damaged(h.data(), STATE_HEADER_SUM, STATE_VERSION))
            throw CheckpointDamaged(path + ": version word is " + std::to_string(h[1]) + ", its header checksum says " +
                                    std::to_string(STATE_VERSION) + "; the file is damaged, use another checkpoint");
        throw InputError(path + ": training-state version " + std::to_string(h[1]) +
                         " is not supported (this build reads " + std::to_string(STATE_VERSION_UNSUMMED) + " and " +
                         std::to_string(STATE_VERSION) + "); resume with the train_gpt2_ls build that wrote it");
    }
    // before the checks below, which name the user's mismatch: a damaged header is no mismatch
    if (summed && get_u64(h.data(), STATE_HEADER_SUM) != header_checksum(h.data(), STATE_HEADER_SUM))
        throw CheckpointDamaged(path + ": header checksum mismatch (training state damaged); use another checkpoint");
    if (h[4] != world_size)
        throw StateWorldSizeMismatch(path + ": checkpoint written by " + std::to_string(h[4]) +
                                         " processes, this run has " + std::to_string(world_size) +
                                         "; resume with the same -np (" + std::to_string(h[4]) +
                                         ") or start fresh without -y",
                                     h[4]);
    if (h[3] != rank)
        throw InputError(path + ": training state of rank " + std::to_string(h[3]) + " opened by rank " +
                         std::to_string(rank) + "; each rank must load its own state_NNNNNNNN_RRRRR.bin");
    if (get_u64(h.data(), 7) != model_config_hash(config))
        throw InputError(path +
                         ": written for a different model configuration (config hash mismatch); "
                         "resume with the model flags the checkpoint was trained with");

    const size_t n = param_layout(config).total;
    for (size_t i = summed ? STATE_HEADER_SUM + 2 : STATE_HEADER_SUM; i < CKPT_HEADER_INTS; i++)
        if (h[i] != 0)
            throw CheckpointDamaged(path + ": reserved header field " + std::to_string(i) + " is " +
                                    std::to_string(h[i]) + ", expected 0; the file is damaged, use another checkpoint");
    const uint64_t hn = get_u64(h.data(), 5), nmaster = get_u64(h.data(), 9), nrng = get_u64(h.data(), 11),
                   nloader = get_u64(h.data(), 13), nextra = get_u64(h.data(), 15);
    auto damaged = [&](const std::string& what) {
        return CheckpointDamaged(path + ": " + what + "; the file is damaged, use another checkpoint");
    };
    if (hn != n) throw damaged("header says " + std::to_string(hn) + " parameters, the model has " + std::to_string(n));
    if (nmaster != 0 && nmaster != n)
        throw damaged("master-weight count " + std::to_string(nmaster) + " is neither 0 nor " + std::to_string(n));
    if (h[2] < 0) throw damaged("negative step " + std::to_string(h[2]));
    // Counts come from an unchecked header: bound each by the file size before multiplying.
    for (uint64_t c : {nrng, nloader, nextra})
        if (c > size) throw damaged("section length " + std::to_string(c) + " exceeds the file size");
    const uint64_t expected =
        CKPT_HEADER_BYTES + (2 * n + nmaster) * sizeof(float) + (nrng + nloader + nextra) * sizeof(uint64_t);
    if (size != expected)
        throw damaged("file is " + std::to_string(size) + " bytes but its header describes " +
                      std::to_string(expected) + " (truncated?)");

    TrainState s;
    s.step = h[2];
    s.rank = h[3];
    s.world_size = h[4];
    s.m.resize(n);
    s.v.resize(n);
    s.master.resize(nmaster);
    s.rng.resize(nrng);
    s.loader.resize(nloader);
    s.extra.resize(nextra);
    uint64_t sum = FNV1A64_OFFSET;
    auto read_section = [&](void* dst, size_t bytes) {
        read_exact(f.get(), dst, bytes, path);
        sum = fnv1a64(dst, bytes, sum);
    };
    read_section(s.m.data(), n * sizeof(float));
    read_section(s.v.data(), n * sizeof(float));
    read_section(s.master.data(), nmaster * sizeof(float));
    read_section(s.rng.data(), nrng * sizeof(uint64_t));
    read_section(s.loader.data(), nloader * sizeof(int64_t));
    read_section(s.extra.data(), nextra * sizeof(double));
    if (sum != get_u64(h.data(), 17))
        throw CheckpointDamaged(path + ": checksum mismatch (training state damaged); use another checkpoint");
    return s;
}

}  // namespace llmc
