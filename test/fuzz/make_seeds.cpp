// Writes the fuzzing seeds that come from our C++ writers (test/fuzz/make_seeds.py builds and runs
// it; the python script adds the files data/prepare.py makes). Usage: make_seeds CORPUS_DIR
// Every file is small (a few KB) and deterministic.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/app/cli.h"
#include "llmc/io/dataloader.h"
#include "llmc/train/logit_alarm.h"
#include "llmc/core/rng.h"
#include "llmc/io/shard.h"
#include "llmc/train/spikes.h"
#include "llmc/io/train_state.h"
#include "test/fuzz/fuzz_common.h"

using namespace llmc;

namespace {

std::string g_root;

std::string dir(const std::string& name) {
    const std::string d = g_root + "/" + name;
    ::mkdir(d.c_str(), 0755);
    return d;
}

void write_bytes(const std::string& path, const void* data, size_t n) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(data, 1, n, f) != n || std::fclose(f) != 0) {
        std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
        std::exit(1);
    }
}

std::vector<float> random_params(const ModelConfig& c, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> p(param_layout(c).total);
    for (float& x : p) x = 0.02f * rng.normal();
    return p;
}

// llm.c's gpt2_*.bin: magic 20240326, version 3 (fp32) or 5 (bf16), the first 16 tensors.
void write_llmc_checkpoint(const std::string& path, const ModelConfig& c, int version) {
    std::vector<int32_t> h(CKPT_HEADER_INTS, 0);
    h[0] = LLMC_MAGIC;
    h[1] = version;
    h[2] = c.max_seq_len;
    h[3] = c.vocab_size;
    h[4] = c.num_layers;
    h[5] = c.num_heads;
    h[6] = c.channels;
    h[7] = c.padded_vocab_size;
    const std::vector<float> p = random_params(c, 5);
    std::vector<unsigned char> out((unsigned char*)h.data(), (unsigned char*)h.data() + CKPT_HEADER_BYTES);
    if (version == LLMC_VERSION_FP32) {
        out.insert(out.end(), (const unsigned char*)p.data(), (const unsigned char*)(p.data() + p.size()));
    } else {
        for (float x : p) {
            const uint16_t b = float_to_bf16(x);
            out.push_back((unsigned char)(b & 0xFF));
            out.push_back((unsigned char)(b >> 8));
        }
    }
    write_bytes(path, out.data(), out.size());
}

// A training state as the loop writes it: loader position, spike windows (+ alarm), one RNG state.
TrainState loop_state(const ModelConfig& c, bool master, bool alarm_section) {
    const size_t n = param_layout(c).total;
    TrainState s;
    s.step = 7;
    Rng rng(3);
    s.m.resize(n);
    s.v.resize(n);
    for (size_t i = 0; i < n; i++) {
        s.m[i] = 0.01f * rng.normal();
        s.v[i] = 1e-4f * rng.uniform();
    }
    if (master) s.master = random_params(c, 9);
    s.rng = {0x1234567887654321ull};
    LoaderState ls;
    ls.epoch = 1;
    ls.batch = 2;
    ls.B = 2;
    ls.T = 3;
    ls.world_size = 1;
    ls.shuffle = 1;
    ls.seed = 7;
    ls.total_tokens = 100;
    ls.num_shards = 1;
    s.loader = ls.to_vector();
    SpikeDetector loss(fuzz::kSpikeWindow), norm(fuzz::kSpikeWindow);
    for (double x : {3.0, 2.9, 2.7, 2.6}) loss.push(x);
    norm.push(1.5);
    s.extra = loss.to_vector();
    const std::vector<double> nv = norm.to_vector();
    s.extra.insert(s.extra.end(), nv.begin(), nv.end());
    if (alarm_section) {
        LogitAlarmConfig ac;
        ac.window = fuzz::kSpikeWindow;
        ac.above = 2.0f;
        LogitAlarm alarm(ac);
        LogitStats st;
        st.num_layers = 1;
        st.num_heads = 2;
        for (int step = 1; step <= 4; step++) {
            st.max_logit = {1.0f, 1.5f * step};
            alarm.observe(step, st);
        }
        const std::vector<double> av = alarm.to_vector();
        s.extra.insert(s.extra.end(), av.begin(), av.end());
    }
    return s;
}

std::string config_text(std::vector<const char*> args) {
    args.insert(args.begin(), "train_gpt2_ls");
    TrainCli cli;
    if (cli.parse((int)args.size(), args.data()) != -1) std::exit(1);
    return cli.config_file_text();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    g_root = argv[1];
    const ModelConfig tiny = fuzz::tiny_model();

    // shards: version 1 and 2 (the python script adds data/prepare.py's)
    {
        const std::string d = dir("shard");
        std::vector<uint32_t> toks;
        for (uint32_t i = 0; i < 40; i++) toks.push_back((i * 7919u) % 50257u);
        write_shard(d + "/writer_v1_40.bin", toks, 1);
        toks.resize(12);
        write_shard(d + "/writer_v2_12.bin", toks, 2);
    }
    // model files: fp32, bf16, QK-norm + soft-cap + untied
    {
        const std::string d = dir("checkpoint");
        save_model_checkpoint(d + "/tiny_fp32.bin", tiny, random_params(tiny, 1).data(), 12);
        save_model_checkpoint(d + "/tiny_bf16.bin", tiny, random_params(tiny, 2).data(), 0, true);
        save_model_checkpoint(d + "/tiny_tokenizer.bin", tiny, random_params(tiny, 4).data(), 5, false, 0,
                              0x0123456789abcdefull);  // words 24-25: a tokenizer id
        ModelConfig c = tiny;
        c.qk_norm = true;
        c.attn_softcap = 30.0f;
        c.tied_embeddings = false;
        c.global_heads = 2;
        save_model_checkpoint(d + "/tiny_qknorm_softcap_untied_bf16.bin", c, random_params(c, 3).data(), 3, true);
    }
    // llm.c GPT-2 checkpoints, versions 3 and 5
    {
        const std::string d = dir("llmc_checkpoint");
        ModelConfig c = tiny;
        c.global_heads = c.num_heads;
        c.window = c.max_seq_len;
        write_llmc_checkpoint(d + "/tiny_v3.bin", c, LLMC_VERSION_FP32);
        write_llmc_checkpoint(d + "/tiny_v5.bin", c, LLMC_VERSION_BF16);
    }
    // training state: -z 0 (no master), -z 1 (master) with the logit alarm's section
    {
        const std::string d = dir("train_state");
        save_train_state(d + "/tiny_z0.bin", tiny, loop_state(tiny, false, false));
        save_train_state(d + "/tiny_z1_alarm.bin", tiny, loop_state(tiny, true, true));
    }
    // tokenizer.bin: the byte vocabulary (the python script adds SentencePiece's and the synthetic one)
    {
        const std::string d = dir("tokenizer");
        std::vector<unsigned char> out(1024, 0);
        const uint32_t h[4] = {20240328u, 2u, 256u, 10u};
        std::memcpy(out.data(), h, sizeof h);
        for (int b = 0; b < 256; b++) {
            out.push_back(1);
            out.push_back((unsigned char)b);
        }
        write_bytes(d + "/bytes_256.bin", out.data(), out.size());
    }
    // config files as the trainer writes them (<out>/config.toml)
    {
        const std::string d = dir("config");
        const std::string def = config_text({});
        write_bytes(d + "/default.toml", def.data(), def.size());
        const std::string flags = config_text({"-i",
                                               "data/x/train_*.bin",
                                               "-j",
                                               "data/x/val_*.bin",
                                               "-o",
                                               "out/x",
                                               "-e",
                                               "d6",
                                               "--layers",
                                               "2",
                                               "--channels",
                                               "64",
                                               "--heads",
                                               "4",
                                               "--global-heads",
                                               "1",
                                               "--window",
                                               "8",
                                               "--vocab",
                                               "300",
                                               "--max-seq-len",
                                               "64",
                                               "--qk-norm",
                                               "--attn-softcap",
                                               "30",
                                               "--untie-embeddings",
                                               "-k",
                                               "wsd",
                                               "--near",
                                               "4",
                                               "--logit-alarm",
                                               "6",
                                               "--qk-clip",
                                               "0",
                                               "-b",
                                               "2",
                                               "-t",
                                               "32",
                                               "-d",
                                               "128"});
        write_bytes(d + "/flags.toml", flags.data(), flags.size());
        const std::string ini =
            "; an INI-style file\n[default]\nbatch-size=8\nseq-len = 64\nmodel=\"ls-small\"\nshuffle=0\n";
        write_bytes(d + "/ini_style.ini", ini.data(), ini.size());
    }
    return 0;
}
