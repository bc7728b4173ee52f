"""
Hugging Face `transformers` model code for train_gpt2_ls checkpoints that a stock GPT2LMHeadModel
cannot express (local heads, QK-norm, attention soft-capping, untied LM head, no biases, erf GELU).
scripts/export_hf.py copies this file into the exported folder as `modeling_gpt2_ls.py`; load it with

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

The forward pass is the trainer's (llmc/cpu/, dev/reference/gpt2_ls.py), in the layout of GPT-2:
  x = wte[idx] + wpe[pos]                                      (B, T, C)
  per layer: x = x + proj(attn(ln_1(x))); x = x + mlp(ln_2(x)) (pre-LN, LayerNorm eps 1e-5)
  logits = ln_f(x) @ head^T, head = wte (tied) or lm_head      (B, T, V)
  attention: qkv = Linear(C, 3C), q, k, v split in that order, NH heads of hd = C / NH;
    QK-norm (when on): LayerNorm over hd on q and on k, one (hd) gain/bias pair each per layer,
    shared by the layer's heads; s = q.k / sqrt(hd); soft-cap c > 0: the softmax sees c*tanh(s/c);
    heads 0 .. NH-G-1 are local (query i sees keys i-P < j <= i), heads NH-G .. NH-1 global (causal).
  MLP: Linear(C, 4C), GELU, Linear(4C, C); activation_function "gelu_new" = the tanh approximation
    (GPT-2), "gelu" = the exact 0.5 x (1 + erf(x / sqrt 2)) (transformers' ACT2FN names).
  bias False: no bias in any Linear, LayerNorm or QK-norm (weights/gains only).
The padded vocabulary rows of the checkpoint are not exported: logits cover the real vocabulary V.
No KV cache: every forward recomputes the whole sequence. Padding (an attention_mask with zeros)
is refused: the trainer has no padding either.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput


# The MLP's activation by transformers' ACT2FN name: "gelu" exact (erf), "gelu_new" tanh approximation.
GELU = {"gelu": lambda x: F.gelu(x), "gelu_new": lambda x: F.gelu(x, approximate="tanh")}


class GPT2LSConfig(PretrainedConfig):
    model_type = "gpt2_ls"

    def __init__(self, vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, global_heads=1,
                 window=50, qk_norm=False, attn_softcap=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                 bias=True, activation_function="gelu_new", **kwargs):
        if activation_function not in GELU:
            raise ValueError(f"activation_function '{activation_function}' is not supported; "
                             f"use one of {sorted(GELU)}")
        self.vocab_size = vocab_size            # V, the real vocabulary (the checkpoint's padding dropped)
        self.n_positions = n_positions          # maxT, rows of the position embedding
        self.n_embd = n_embd                    # C
        self.n_layer = n_layer                  # L
        self.n_head = n_head                    # NH
        self.global_heads = global_heads        # G: the last G heads are global
        self.window = window                    # P: a local head's query i sees keys i-P < j <= i
        self.qk_norm = qk_norm
        self.attn_softcap = attn_softcap        # c; 0 = off
        self.layer_norm_epsilon = layer_norm_epsilon
        self.bias = bias                        # False: no bias in any Linear, LayerNorm or QK-norm
        self.activation_function = activation_function  # the MLP's GELU, a key of GELU
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    @property
    def hidden_size(self):
        return self.n_embd

    @property
    def num_hidden_layers(self):
        return self.n_layer

    @property
    def num_attention_heads(self):
        return self.n_head

    @property
    def max_position_embeddings(self):
        return self.n_positions


def attention_mask(config, T, device):
    """(NH, T, T) bool, True where query i may attend to key j."""
    i = torch.arange(T, device=device).view(T, 1)
    j = torch.arange(T, device=device).view(1, T)
    causal = j <= i
    local = causal & (j > i - config.window)
    n_local = config.n_head - config.global_heads
    return torch.stack([local if h < n_local else causal for h in range(config.n_head)])


def layer_norm(n, config):
    return nn.LayerNorm(n, eps=config.layer_norm_epsilon, bias=config.bias)


class LSAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        C, NH = config.n_embd, config.n_head
        self.config = config
        self.head_size = C // NH
        self.qkv = nn.Linear(C, 3 * C, bias=config.bias)
        self.proj = nn.Linear(C, C, bias=config.bias)
        if config.qk_norm:
            self.q_norm = layer_norm(self.head_size, config)
            self.k_norm = layer_norm(self.head_size, config)

    def forward(self, x, mask):
        """x (B, T, C), mask (NH, T, T) -> (B, T, C)"""
        B, T, C = x.shape
        NH, hd, cap = self.config.n_head, self.head_size, self.config.attn_softcap
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, NH, hd).transpose(1, 2)               # (B, NH, T, hd)
        k = k.view(B, T, NH, hd).transpose(1, 2)
        v = v.view(B, T, NH, hd).transpose(1, 2)
        if self.config.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)           # (B, NH, T, T)
        if cap > 0:
            s = cap * torch.tanh(s / cap)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        y = (a @ v).transpose(1, 2).reshape(B, T, C)            # heads concatenated in head order
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.act = GELU[config.activation_function]

    def forward(self, x):
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = layer_norm(config.n_embd, config)
        self.attn = LSAttention(config)
        self.ln_2 = layer_norm(config.n_embd, config)
        self.mlp = MLP(config)

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class GPT2LSModel(nn.Module):
    """The transformer trunk: embeddings, blocks, final LayerNorm."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = layer_norm(config.n_embd, config)

    def forward(self, input_ids):
        """input_ids (B, T) -> hidden states (B, T, C)"""
        T = input_ids.shape[1]
        if T > self.config.n_positions:
            raise ValueError(f"sequence of {T} tokens is longer than the model's n_positions "
                             f"{self.config.n_positions}; pass at most {self.config.n_positions} tokens")
        mask = attention_mask(self.config, T, input_ids.device)
        x = self.wte(input_ids) + self.wpe(torch.arange(T, device=input_ids.device))
        for block in self.h:
            x = block(x, mask)
        return self.ln_f(x)


class GPT2LSForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = GPT2LSConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["Block"]

    def __init__(self, config):
        super().__init__(config)
        self.transformer = GPT2LSModel(config)
        # tied: the head is wte itself (no separate tensor, so nothing to tie at load time)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        # Weights come from the checkpoint; GPT-2's initialization for a model built from a config alone.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def get_input_embeddings(self):
        return self.transformer.wte

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, labels=None, return_dict=None, **kwargs):
        """input_ids (B, T); labels (B, T) as in GPT2LMHeadModel (shifted inside, -100 ignored).
        Returns CausalLMOutput(loss, logits (B, T, V))."""
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("GPT2LSForCausalLM has no padding support: attention_mask must be all ones; "
                             "pass unpadded sequences one at a time")
        x = self.transformer(input_ids)
        head = self.transformer.wte.weight if self.lm_head is None else self.lm_head.weight
        logits = x @ head.t()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No KV cache: the whole sequence every step.
        return {"input_ids": input_ids, "attention_mask": attention_mask}
