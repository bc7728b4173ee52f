"""
The model configuration and the parameter table of llmc/core/model_config.h and llmc/core/params.h, in
Python (no torch needed): names, order and shapes of every trainable tensor in the flat buffer.
"""
import math
from dataclasses import dataclass


@dataclass
class Config:
    max_seq_len: int = 1024      # maxT
    vocab_size: int = 50257      # V
    padded_vocab_size: int = 50304  # Vp (multiple of 128)
    num_layers: int = 6          # L
    num_heads: int = 6           # NH
    channels: int = 192          # C
    global_heads: int = 1        # G
    window: int = 50             # P
    qk_norm: bool = False
    attn_softcap: float = 0.0    # 0 = off
    tied_embeddings: bool = True
    bias: bool = True            # False: no bias in any linear layer, LayerNorm or QK-norm
    gelu: str = "tanh"           # the MLP's GELU: "tanh" (GPT-2's approximation) or "erf" (exact)

    @property
    def head_size(self):
        return self.channels // self.num_heads


def pad_vocab(V):
    return ((V + 127) // 128) * 128


GELU_KINDS = ("tanh", "erf")  # index = the checkpoint header's word 21

# The parameter table of llmc/core/params.h, in order. Absent tensors have a zero-sized shape (0,).
PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
               "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "qnormw", "qnormb", "knormw", "knormb",
               "lm_head"]
# AdamW's decoupled weight decay applies only to these (matrices and embeddings).
WEIGHT_DECAY_PARAMS = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw", "lm_head"}
# Empty (0,) when the model has no biases (Config.bias False); the others keep their order.
BIAS_PARAMS = {"ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb", "qnormb", "knormb"}


def param_shapes(cfg):
    """[(name, shape)] for all 21 table entries in order; absent ones are (0,)."""
    Vp, C, L, maxT, hd = cfg.padded_vocab_size, cfg.channels, cfg.num_layers, cfg.max_seq_len, cfg.head_size
    qk = (L, hd) if cfg.qk_norm else (0,)
    shapes = {
        "wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
        "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,),
        "qnormw": qk, "qnormb": qk, "knormw": qk, "knormb": qk,
        "lm_head": (Vp, C) if not cfg.tied_embeddings else (0,),
    }
    return [(n, (0,) if n in BIAS_PARAMS and not cfg.bias else shapes[n]) for n in PARAM_NAMES]


def num_params(cfg):
    return sum(math.prod(s) for _, s in param_shapes(cfg))
