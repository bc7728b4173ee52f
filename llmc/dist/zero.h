// ZeRO stage 1 (-z 1): the AdamW state is sharded across ranks. The flat parameter vector
// (llmc/core/params.h layout, n elements) is cut into `world` contiguous shards of
// chunk = ceil(n / world) elements (the last one shorter, possibly empty); rank r owns
// [r * chunk, min(n, (r + 1) * chunk)). Per step (llmc/train/train_step.h):
//   grads (world * chunk, zero padded) --reduce-scatter Avg--> this rank's shard of the mean gradient
//   global norm^2 = all-reduce Sum of each shard's sum of squares
//   AdamW on the shard: fp32 master weights + m + v of the shard only (exactly llmc/core/adamw.h's
//     math; a tensor's weight decay applies to the part of it that lies in the shard)
//   master shards --all-gather--> full fp32 parameters --> backend set_params
// Host fp32; no GPU needed. The checkpoint stores the gathered full vectors (every rank's state
// file then holds all of m, v, master), so a resume slices them again.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "llmc/core/backend.h"
#include "llmc/dist/collective.h"
#include "llmc/core/adamw.h"
#include "llmc/core/global_norm.h"
#include "llmc/core/params.h"

namespace llmc {

struct ShardRange {
    size_t begin = 0, end = 0;  // [begin, end) of the flat vector owned by this rank
    size_t chunk = 0;           // ceil(n / world): the padded length of every rank's block
    size_t size() const { return end - begin; }
};

inline ShardRange shard_range(size_t n, int rank, int world) {
    ShardRange s;
    s.chunk = (n + (size_t)world - 1) / (size_t)world;
    s.begin = std::min(n, (size_t)rank * s.chunk);
    s.end = std::min(n, s.begin + s.chunk);
    return s;
}

class Zero1Optimizer {
public:
    Zero1Optimizer(const ParamLayout& layout, int rank, int world)
        : layout_(layout),
          range_(shard_range(layout.total, rank, world)),
          world_(world),
          master_(range_.chunk, 0.0f),
          m_(range_.chunk, 0.0f),
          v_(range_.chunk, 0.0f),
          grad_(range_.chunk, 0.0f) {}

    const ShardRange& range() const { return range_; }
    // This rank's master weights, elements [range().begin, range().end) of the flat vector, for edits
    // between steps (QK-Clip, llmc/train/qk_clip.h); the next step_and_gather publishes them.
    float* master() { return master_.data(); }
    // Length of a padded full vector (world * chunk >= n) for reduce-scatter / all-gather.
    size_t padded_total() const { return range_.chunk * (size_t)world_; }

    // Takes this rank's slice of full (n) vectors: params always; m, v and master when non-null.
    void load(const float* params, const float* m, const float* v, const float* master) {
        const float* src = master ? master : params;
        std::copy(src + range_.begin, src + range_.end, master_.begin());
        if (m) std::copy(m + range_.begin, m + range_.end, m_.begin());
        if (v) std::copy(v + range_.begin, v + range_.end, v_.begin());
    }

    // grads_padded (world * chunk) this rank's mean gradient into the shard. Returns the squared
    // L2 norm of the shard (double; sum over ranks = the global norm squared).
    double reduce_scatter_grads(Collective& comm, const float* grads_padded) {
        comm.reduce_scatter(grads_padded, grad_.data(), range_.chunk, ReduceOp::Avg);
        return llmc::global_norm_squared(grad_.data(), range_.size());
    }

    // AdamW on the shard (t 1-based), gradients times grad_multiplier, then all-gathers the master
    // weights into params_padded (world * chunk); its first n elements are the new parameters.
    void step_and_gather(Collective& comm, const AdamWHyper& h, int t, float grad_multiplier, float* params_padded) {
        for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
            const size_t b = std::max(layout_.offset[id], range_.begin);
            const size_t e = std::min(layout_.offset[id] + layout_.size[id], range_.end);
            if (b >= e) continue;
            const float wd = param_gets_weight_decay(id) ? h.weight_decay : 0.0f;
            const size_t o = b - range_.begin;
            llmc::adamw_update(master_.data() + o, grad_.data() + o, m_.data() + o, v_.data() + o, e - b, h.lr, h.beta1,
                               h.beta2, h.eps, wd, t, grad_multiplier);
        }
        comm.all_gather(master_.data(), params_padded, range_.chunk);
    }

    // Full (padded, world * chunk) m, v and master for the checkpoint (collective).
    void gather_state(Collective& comm, float* m_padded, float* v_padded, float* master_padded) {
        comm.all_gather(m_.data(), m_padded, range_.chunk);
        comm.all_gather(v_.data(), v_padded, range_.chunk);
        comm.all_gather(master_.data(), master_padded, range_.chunk);
    }

private:
    ParamLayout layout_;
    ShardRange range_;
    int world_;
    std::vector<float> master_, m_, v_, grad_;  // (chunk) each; entries past range_.size() stay 0
};

}  // namespace llmc
