// Named views of a flat buffer in the canonical parameter layout (llmc/core/params.h): the
// parameters or their gradients, on the host or the device, as the model's tensors and as one
// layer's slices of them. The offsets of the parameter table are computed here and nowhere else.
#pragma once
#include <cstddef>

#include "llmc/core/params.h"

namespace llmc {

// One layer's slices of the per-layer tensors. T is the element type (const for a read-only view).
template <typename T>
struct LayerParams {
    T* ln1w;      // (C)
    T* ln1b;      // (C) every bias is nullptr when the model has none (ModelConfig::bias false)
    T* qkvw;      // (3C, C)
    T* qkvb;      // (3C)
    T* attprojw;  // (C, C)
    T* attprojb;  // (C)
    T* ln2w;      // (C)
    T* ln2b;      // (C)
    T* fcw;       // (4C, C)
    T* fcb;       // (4C)
    T* fcprojw;   // (C, 4C)
    T* fcprojb;   // (C)
    T* qnormw;    // (hd) QK-norm gain for q; nullptr unless qk_norm
    T* qnormb;    // (hd)
    T* knormw;    // (hd)
    T* knormb;    // (hd)
};

// flat: the whole buffer (layout.total elements); layout and flat must outlive the view.
template <typename T>
class ParamView {
public:
    ParamView(T* flat, const ParamLayout& layout, int num_layers)
        : flat_(flat), layout_(&layout), num_layers_((size_t)num_layers) {}

    T* operator[](ParamId id) const { return flat_ + layout_->offset[id]; }            // the whole tensor
    T* wte() const { return (*this)[P_WTE]; }                                          // (Vp, C)
    T* wpe() const { return (*this)[P_WPE]; }                                          // (maxT, C)
    T* lnfw() const { return (*this)[P_LNFW]; }                                        // (C)
    T* lnfb() const { return layout_->size[P_LNFB] > 0 ? (*this)[P_LNFB] : nullptr; }  // (C); nullptr without biases
    // (Vp, C) the LM head: wte when the embeddings are tied (the untied tensor is then empty)
    T* lm_head() const { return (*this)[layout_->size[P_LMHEAD] > 0 ? P_LMHEAD : P_WTE]; }

    // Layer l's slice of every per-layer tensor: its (L, ...) tensor at offset l * size / L.
    LayerParams<T> layer(int l) const {
        return {slice(P_LN1W, l),     slice(P_LN1B, l),     slice(P_QKVW, l),    slice(P_QKVB, l),
                slice(P_ATTPROJW, l), slice(P_ATTPROJB, l), slice(P_LN2W, l),    slice(P_LN2B, l),
                slice(P_FCW, l),      slice(P_FCB, l),      slice(P_FCPROJW, l), slice(P_FCPROJB, l),
                slice(P_QNORMW, l),   slice(P_QNORMB, l),   slice(P_KNORMW, l),  slice(P_KNORMB, l)};
    }

private:
    T* slice(ParamId id, int l) const {
        const size_t size = layout_->size[id];
        if (size == 0) return nullptr;  // a tensor the model does not have (QK-norm off, no biases)
        return flat_ + layout_->offset[id] + (size_t)l * (size / num_layers_);
    }

    T* flat_;
    const ParamLayout* layout_;
    size_t num_layers_;
};

}  // namespace llmc
