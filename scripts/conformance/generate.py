#!/usr/bin/env python3
"""Generate tiny random Hugging Face checkpoints + transformers reference outputs.

For every case in CASES this writes tests/data/conformance/<case>/:
  config.json            as transformers 5 writes it (or rewritten to the 4.x layout for "v4" cases)
  model.safetensors      all weights in BF16 (tied embeddings: only model.embed_tokens.weight)
  reference.safetensors  input_ids I32 [T], positions I32 [P], logits F32 [P, vocab], nll F32 [T-1]
                         (+ informational rope_* tensors, see README.md)
  reference.json         case, description, family, T, ppl, versions, features, ...

Weights are re-initialised with fixed seeds and rounded to BF16-representable values, so the
float32 reference computed here is exactly what the BF16 checkpoint describes. The script
fails (non-zero exit) if reloading a saved folder does not reproduce the logits bit-exactly.

Run it through scripts/conformance/generate.sh (pinned venv), or directly:
  python generate.py [--out DIR] [--only CASE ...]
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import zlib

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GraniteConfig,
    GraniteForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

T = 256
N_POSITIONS = 12

# Shared small dimensions (cases override what they need).
SMALL = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
)

LONG_FACTOR = [1.0, 1.5, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0]
SHORT_FACTOR = [1.0, 1.1, 1.2, 1.3, 1.45, 1.6, 1.8, 2.0]

# Each case:
#   name, family, model (class), config (class), kwargs (config kwargs), layout ("v5" | "v4"),
#   v4_type_key ("rope_type" | "type": key naming the rope type inside the v4 rope_scaling dict),
#   boundaries (positions where behaviour changes; b-1, b, b+1 are stored),
#   embed_std / lm_head_std (None -> defaults, see init_weights), description, features.
CASES = [
    dict(
        name="llama_v4",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(SMALL, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        layout="v4",
        description="Llama, default RoPE theta 500000, untied embeddings, GQA 4q/2kv; config.json in the "
        "transformers-4.x layout (top-level rope_theta, rope_scaling null, torch_dtype).",
        features=["rope:default", "rope_theta=500000", "config_layout:v4", "untied_embeddings", "gqa:4q/2kv"],
    ),
    dict(
        name="llama_v5",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(SMALL, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, tie_word_embeddings=True),
        description="Llama, default RoPE theta 500000, tied embeddings (no lm_head.weight on disk), "
        "config.json in the transformers-5 layout (rope_parameters).",
        features=["rope:default", "rope_theta=500000", "config_layout:v5", "tied_embeddings", "gqa:4q/2kv"],
    ),
    dict(
        name="llama_linear",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(SMALL, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
        description="Llama, RoPE linear scaling factor 2 (inv_freq / factor), theta 10000.",
        features=["rope:linear", "rope_factor=2", "rope_theta=10000", "config_layout:v5", "untied_embeddings"],
    ),
    dict(
        name="llama_dynamic",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(
            SMALL, max_position_embeddings=64, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
        ),
        boundaries=[64],
        description="Llama, dynamic NTK RoPE factor 2. transformers uses config.max_position_embeddings (=64) as the "
        "original length (original_max_position_embeddings is not read for 'dynamic'). The reference is one "
        "forward over T=256 tokens, so seq_len = max(position_ids)+1 = 256 and ALL positions (also 0..63) use "
        "base' = theta * (factor*256/64 - (factor-1)) ** (dim/(dim-2)).",
        features=["rope:dynamic", "rope_factor=2", "max_position_embeddings=64<T", "config_layout:v5", "untied_embeddings"],
    ),
    dict(
        name="llama3_v4",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(
            SMALL,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
                "rope_theta": 500000.0,
            },
        ),
        layout="v4",
        boundaries=[64],
        description="Llama 3.1-style RoPE (rope_type llama3: factor 8, low_freq_factor 1, high_freq_factor 4, "
        "original_max_position_embeddings 64), theta 500000; head_dim 16 gives one unscaled, one smoothed and six "
        "factor-scaled frequencies. config.json in the 4.x layout (rope_theta + rope_scaling with rope_type).",
        features=["rope:llama3", "rope_factor=8", "low_freq_factor=1", "high_freq_factor=4",
                  "original_max_position_embeddings=64", "rope_theta=500000", "config_layout:v4"],
    ),
    dict(
        name="llama3_v5",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(
            SMALL,
            rope_parameters={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
                "rope_theta": 500000.0,
            },
        ),
        boundaries=[64],
        description="Same as llama3_v4 (different random weights) with config.json in the transformers-5 layout.",
        features=["rope:llama3", "rope_factor=8", "low_freq_factor=1", "high_freq_factor=4",
                  "original_max_position_embeddings=64", "rope_theta=500000", "config_layout:v5"],
    ),
    dict(
        name="llama_bias_headdim",
        family="llama",
        model=LlamaForCausalLM,
        config=LlamaConfig,
        kwargs=dict(SMALL, head_dim=32, attention_bias=True, mlp_bias=True),
        description="Llama with attention_bias (q,k,v AND o_proj biases), mlp_bias (gate/up/down biases) and explicit "
        "head_dim 32 with hidden 64 and 4 heads: q_proj [128,64], k/v_proj [64,64], o_proj [64,128].",
        features=["attention_bias:q,k,v,o", "mlp_bias:gate,up,down", "head_dim=32!=hidden/heads", "rope:default",
                  "config_layout:v5"],
    ),
    dict(
        name="mistral_sliding",
        family="mistral",
        model=MistralForCausalLM,
        config=MistralConfig,
        kwargs=dict(SMALL, sliding_window=32, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        boundaries=[32],
        description="Mistral with sliding_window 32 on every layer: query q attends keys k with q-32 < k <= q "
        "(the window includes the query itself: 32 keys).",
        features=["sliding_window=32:all_layers", "rope:default", "config_layout:v5"],
    ),
    dict(
        name="qwen2",
        family="qwen2",
        model=Qwen2ForCausalLM,
        config=Qwen2Config,
        kwargs=dict(SMALL, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        description="Qwen2: q/k/v biases (no o_proj bias), tied embeddings, theta 1e6.",
        features=["attention_bias:q,k,v", "tied_embeddings", "rope:default", "rope_theta=1e6", "config_layout:v5"],
    ),
    dict(
        name="qwen2_yarn",
        family="qwen2",
        model=Qwen2ForCausalLM,
        config=Qwen2Config,
        kwargs=dict(
            SMALL,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                             "rope_theta": 10000.0},
        ),
        layout="v4",
        v4_type_key="type",
        v4_extra={"sliding_window": 4096},
        boundaries=[64],
        description="Qwen2 with YaRN factor 4, original_max_position_embeddings 64, default options "
        "(beta_fast 32, beta_slow 1, truncate true, attention_factor = 0.1*ln(4)+1 multiplied into cos and sin). "
        "config.json in the 4.x layout as Qwen2.5 ships it: rope_scaling {\"type\": \"yarn\", ...}, no layer_types, "
        "and a non-null sliding_window (4096) that is ignored because use_sliding_window is false.",
        features=["rope:yarn", "rope_factor=4", "original_max_position_embeddings=64", "yarn:beta_fast=32(default)",
                  "yarn:beta_slow=1(default)", "yarn:truncate=true(default)", "yarn:attention_factor=inferred",
                  "attention_bias:q,k,v", "tied_embeddings", "config_layout:v4", "rope_scaling_key:type",
                  "use_sliding_window=false(sliding_window=4096 ignored)"],
    ),
    dict(
        name="qwen2_yarn_betas",
        family="qwen2",
        model=Qwen2ForCausalLM,
        config=Qwen2Config,
        kwargs=dict(
            SMALL,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                             "beta_fast": 4.0, "beta_slow": 0.25, "truncate": False, "mscale": 1.0,
                             "mscale_all_dim": 0.5, "rope_theta": 10000.0},
        ),
        boundaries=[64],
        description="Qwen2 with YaRN factor 4 and every non-default option: beta_fast 4, beta_slow 0.25, "
        "truncate false (fractional ramp bounds), mscale 1 / mscale_all_dim 0.5 "
        "(attention_factor = (0.1*1*ln4+1)/(0.1*0.5*ln4+1)). config.json in the transformers-5 layout.",
        features=["rope:yarn", "rope_factor=4", "original_max_position_embeddings=64", "yarn:beta_fast=4",
                  "yarn:beta_slow=0.25", "yarn:truncate=false", "yarn:mscale=1", "yarn:mscale_all_dim=0.5",
                  "attention_bias:q,k,v", "tied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="qwen2_sliding",
        family="qwen2",
        model=Qwen2ForCausalLM,
        config=Qwen2Config,
        kwargs=dict(SMALL, tie_word_embeddings=True, use_sliding_window=True, sliding_window=32, max_window_layers=1,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        boundaries=[32],
        description="Qwen2 with use_sliding_window true, sliding_window 32, max_window_layers 1, 2 layers. "
        "Qwen2Config derives layer_types[i] = 'sliding_attention' if sliding_window is not None and "
        "i >= max_window_layers else 'full_attention' -> [full_attention, sliding_attention] (layer 0 full, "
        "layer 1 slides), and saves layer_types in config.json. sliding_window is nulled when "
        "use_sliding_window is false.",
        features=["sliding_window=32:layer1_only", "max_window_layers=1", "layer_types:[full,sliding]",
                  "attention_bias:q,k,v", "tied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="qwen3",
        family="qwen3",
        model=Qwen3ForCausalLM,
        config=Qwen3Config,
        kwargs=dict(SMALL, head_dim=32, tie_word_embeddings=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        description="Qwen3: per-head q_norm/k_norm (RMSNorm over head_dim=32, applied before RoPE), explicit "
        "head_dim 32 with hidden 64 (q_proj out 128), no biases, tied embeddings, theta 1e6.",
        features=["qk_norm:per_head", "head_dim=32!=hidden/heads", "tied_embeddings", "rope:default",
                  "rope_theta=1e6", "config_layout:v5"],
    ),
    dict(
        name="qwen3_v4",
        family="qwen3",
        model=Qwen3ForCausalLM,
        config=Qwen3Config,
        kwargs=dict(SMALL, head_dim=32, tie_word_embeddings=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        layout="v4",
        description="Same as qwen3 (different random weights) with config.json in the 4.x layout "
        "(top-level rope_theta, rope_scaling null, no layer_types).",
        features=["qk_norm:per_head", "head_dim=32!=hidden/heads", "tied_embeddings", "rope:default",
                  "rope_theta=1e6", "config_layout:v4"],
    ),
    dict(
        name="phi3_longrope",
        family="phi3",
        model=Phi3ForCausalLM,
        config=Phi3Config,
        kwargs=dict(SMALL, max_position_embeddings=512, original_max_position_embeddings=64,
                    rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                     "short_factor": SHORT_FACTOR, "long_factor": LONG_FACTOR}),
        boundaries=[64],
        description="Phi-3 (fused qkv_proj [q;k;v] and gate_up_proj [gate;up] on disk) with LongRoPE: "
        "original_max_position_embeddings 64 (top-level field, copied into rope_parameters), "
        "max_position_embeddings 512. seq_len = max(position_ids)+1 = 256 > 64 selects long_factor for ALL "
        "positions of the forward; inv_freq = 1/(ext_factor * theta**(2i/d)); no 'factor' key, so "
        "factor = 512/64 = 8 and attention_factor = sqrt(1 + ln(8)/ln(64)) = sqrt(1.5), multiplied into cos and sin.",
        features=["rope:longrope", "longrope:long_factor_selected", "original_max_position_embeddings=64",
                  "max_position_embeddings=512", "longrope:attention_factor=sqrt(1.5)", "fused:qkv_proj",
                  "fused:gate_up_proj", "config_layout:v5"],
    ),
    dict(
        name="phi3_longrope_short",
        family="phi3",
        model=Phi3ForCausalLM,
        config=Phi3Config,
        kwargs=dict(SMALL, max_position_embeddings=2048, original_max_position_embeddings=512,
                    rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                     "short_factor": SHORT_FACTOR, "long_factor": LONG_FACTOR}),
        description="Phi-3 LongRoPE with original_max_position_embeddings 512 and max_position_embeddings 2048: "
        "T=256 <= 512 selects short_factor; attention_factor = sqrt(1 + ln(2048/512)/ln(512)) still applies.",
        features=["rope:longrope", "longrope:short_factor_selected", "original_max_position_embeddings=512",
                  "max_position_embeddings=2048", "longrope:attention_factor=sqrt(1+ln4/ln512)", "fused:qkv_proj",
                  "fused:gate_up_proj", "config_layout:v5"],
    ),
    dict(
        name="phi3_partial",
        family="phi3",
        model=Phi3ForCausalLM,
        config=Phi3Config,
        kwargs=dict(SMALL, hidden_size=128, partial_rotary_factor=0.5,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        description="Phi-3 with partial_rotary_factor 0.5. Phi3Config has no head_dim field (head_dim = "
        "hidden/heads), so hidden is 128 with 4 heads -> head_dim 32, 16 rotary dims: rotate_half NeoX-style "
        "over dims [0,16) of each head (pairs i, i+8), dims [16,32) pass through unrotated.",
        features=["rope:default", "partial_rotary_factor=0.5", "rotary_dim=16", "head_dim=32", "hidden=128",
                  "fused:qkv_proj", "fused:gate_up_proj", "config_layout:v5"],
    ),
    dict(
        name="gemma3",
        family="gemma3",
        model=Gemma3ForCausalLM,
        config=Gemma3TextConfig,
        kwargs=dict(SMALL, num_hidden_layers=4, head_dim=16, sliding_window=32, sliding_window_pattern=2,
                    query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                    pad_token_id=0,
                    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        boundaries=[32],
        embed_std=1.0 / 8.0,
        description="Gemma 3 text (model_type gemma3_text): 4 layers, sliding_window_pattern 2 -> layer_types "
        "[sliding, full, sliding, full]; sliding_window 32; RoPE theta 1e6 on full layers, 10000 on sliding "
        "layers (v4 name rope_local_base_freq); query_pre_attn_scalar 24 (scale 24**-0.5, not head_dim**-0.5); "
        "zero-centred RMSNorm x*(1+w) incl. per-head q_norm/k_norm; pre+post norms around attention and MLP; "
        "embeddings scaled by sqrt(hidden)=8; gelu_pytorch_tanh; tied embeddings. "
        "attn_logit_softcapping and final_logit_softcapping are null (Gemma3TextConfig defaults).",
        features=["gemma_norm:(1+w)", "qk_norm:per_head", "pre_post_norms", "embed_scale=sqrt(hidden)",
                  "query_pre_attn_scalar=24", "sliding_window=32", "layer_types:[sliding,full,sliding,full]",
                  "rope:default(full:theta=1e6,sliding:theta=1e4)", "gelu_pytorch_tanh", "tied_embeddings",
                  "attn_logit_softcapping=null", "final_logit_softcapping=null", "config_layout:v5"],
    ),
    dict(
        name="gemma3_linear",
        family="gemma3",
        model=Gemma3ForCausalLM,
        config=Gemma3TextConfig,
        kwargs=dict(SMALL, num_hidden_layers=4, head_dim=16, sliding_window=32, sliding_window_pattern=2,
                    query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                    pad_token_id=0,
                    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        boundaries=[32],
        embed_std=1.0 / 8.0,
        description="As gemma3, plus RoPE linear scaling factor 8 on the full-attention (global) layers only, "
        "as Gemma 3 4B+ ship; sliding layers keep unscaled theta 10000. transformers-5 layout (nested "
        "rope_parameters per layer type).",
        features=["gemma_norm:(1+w)", "qk_norm:per_head", "pre_post_norms", "embed_scale=sqrt(hidden)",
                  "query_pre_attn_scalar=24", "sliding_window=32", "layer_types:[sliding,full,sliding,full]",
                  "rope:linear(full only,factor=8,theta=1e6)", "rope:default(sliding,theta=1e4)",
                  "gelu_pytorch_tanh", "tied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="gemma3_linear_v4",
        family="gemma3",
        model=Gemma3ForCausalLM,
        config=Gemma3TextConfig,
        kwargs=dict(SMALL, num_hidden_layers=4, head_dim=16, sliding_window=32, sliding_window_pattern=2,
                    query_pre_attn_scalar=24, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                    pad_token_id=0,
                    rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
        layout="v4",
        boundaries=[32],
        embed_std=1.0 / 8.0,
        description="(extra) gemma3_linear with config.json in the layout Gemma 3 checkpoints ship with "
        "(transformers 4.50): rope_theta 1e6, rope_local_base_freq 10000, rope_scaling {rope_type linear, "
        "factor 8} (applies to full-attention layers only), sliding_window_pattern 2 and NO layer_types "
        "(derived: layer i slides iff (i+1) % pattern != 0).",
        features=["gemma_norm:(1+w)", "qk_norm:per_head", "pre_post_norms", "embed_scale=sqrt(hidden)",
                  "query_pre_attn_scalar=24", "sliding_window=32", "sliding_window_pattern=2(no layer_types)",
                  "rope:linear(full only,factor=8,theta=1e6)", "rope_local_base_freq=1e4",
                  "gelu_pytorch_tanh", "tied_embeddings", "config_layout:v4"],
    ),
    dict(
        name="granite",
        family="granite",
        model=GraniteForCausalLM,
        config=GraniteConfig,
        kwargs=dict(SMALL, embedding_multiplier=12.0, attention_multiplier=0.0078125, residual_multiplier=0.22,
                    logits_scaling=8.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        embed_std=1.0 / 12.0,
        lm_head_std=1.0,
        description="Granite: inputs_embeds *= embedding_multiplier (12); attention scores = q.k * "
        "attention_multiplier (0.0078125, replaces head_dim**-0.5); residual = residual + sublayer_out * "
        "residual_multiplier (0.22) for attention and MLP; logits = lm_head(h) / logits_scaling (8). "
        "Untied; embeddings N(0,1/12) and lm_head N(0,1) so residual stream and logits are O(1).",
        features=["embedding_multiplier=12", "attention_multiplier=0.0078125", "residual_multiplier=0.22",
                  "logits_scaling=8", "untied_embeddings", "rope:default", "config_layout:v5"],
    ),
    dict(
        name="olmo2",
        family="olmo2",
        model=Olmo2ForCausalLM,
        config=Olmo2Config,
        kwargs=dict(SMALL, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        description="OLMo 2: NO pre-norms; post-norms only (h = h + post_attention_layernorm(attn(h)); "
        "h = h + post_feedforward_layernorm(mlp(h))); q_norm/k_norm are RMSNorms over the WHOLE projection "
        "(q_norm weight [heads*head_dim]=[64], k_norm [kv_heads*head_dim]=[32]) applied before the head "
        "reshape and RoPE; rms_norm_eps 1e-5; theta 500000.",
        features=["post_norms_only", "qk_norm:full_projection", "rms_norm_eps=1e-5", "rope:default",
                  "rope_theta=500000", "untied_embeddings", "config_layout:v5"],
    ),
]


def case_seed(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def pick_positions(boundaries):
    pos = {0, 1, T - 1}
    for b in boundaries:
        pos.update(p for p in (b - 1, b, b + 1) if 0 <= p < T)
    for p in (2, T // 2, 200, 100, 230, 16, 50, 170, T - 2, 80, 150, 220):
        if len(pos) >= N_POSITIONS:
            break
        pos.add(p)
    return sorted(pos)


def init_weights(model, config, embed_std, lm_head_std):
    """Re-initialise every parameter, then round to BF16-representable values."""
    seen = set()
    for mod_name, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            full = f"{mod_name}.{pname}"
            with torch.no_grad():
                if isinstance(mod, nn.Embedding):
                    p.normal_(0.0, embed_std)
                elif isinstance(mod, nn.Linear) and pname == "weight":
                    std = lm_head_std if (full == "lm_head.weight" and lm_head_std is not None) else 1.0 / math.sqrt(p.shape[1])
                    p.normal_(0.0, std)
                elif pname == "bias":
                    p.normal_(0.0, 0.1)
                elif "Norm" in type(mod).__name__ and pname == "weight":
                    zero_centred = "Gemma" in type(mod).__name__
                    if zero_centred:
                        assert torch.all(p == 0), f"{full}: expected zero-init Gemma norm"
                        p.normal_(0.0, 0.2)
                    else:
                        assert torch.all(p == 1), f"{full}: expected one-init norm"
                        p.normal_(0.0, 0.2).add_(1.0)
                else:
                    raise RuntimeError(f"unhandled parameter {full} in {type(mod).__name__}")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.bfloat16().float())


def to_v4_layout(cfg, type_key, extra=None):
    """Rewrite a transformers-5 config dict into the transformers-4.x layout."""
    cfg = dict(cfg)
    cfg.update(extra or {})
    rp = cfg.pop("rope_parameters")
    if "full_attention" in rp:  # Gemma 3: nested per layer type
        full, local = dict(rp["full_attention"]), dict(rp["sliding_attention"])
        assert local.pop("rope_type") == "default" and set(local) == {"rope_theta"}, local
        cfg["rope_theta"] = full.pop("rope_theta")
        cfg["rope_local_base_freq"] = local["rope_theta"]
        rtype = full.pop("rope_type")
        cfg["rope_scaling"] = None if rtype == "default" else {type_key: rtype, **full}
        # 4.50-era Gemma 3 configs carry sliding_window_pattern only; layer_types is derived on load.
        cfg.pop("layer_types")
        cfg.pop("_sliding_window_pattern", None)
        assert "sliding_window_pattern" in cfg
    else:
        # 4.x Qwen2/Qwen3 configs carry no layer_types (derived from use_sliding_window/max_window_layers).
        if cfg.get("model_type") in ("qwen2", "qwen3"):
            cfg.pop("layer_types", None)
        rp = dict(rp)
        cfg["rope_theta"] = rp.pop("rope_theta")
        prf = rp.pop("partial_rotary_factor", None)
        if prf is not None and prf != 1.0:
            cfg["partial_rotary_factor"] = prf
        rtype = rp.pop("rope_type")
        if rtype == "default":
            assert not rp, rp
            cfg["rope_scaling"] = None
        else:
            cfg["rope_scaling"] = {type_key: rtype, **rp}
    cfg["torch_dtype"] = cfg.pop("dtype")
    return dict(sorted(cfg.items()))


def rope_tensors(model):
    """Informational: the inv_freq / attention scaling the rotary module used in the last forward."""
    rot = model.model.rotary_emb
    out = {}
    if isinstance(rot.rope_type, dict):  # per layer type (Gemma 3)
        for lt in rot.rope_type:
            out[f"rope_inv_freq_{lt}"] = getattr(rot, f"{lt}_inv_freq").detach().float().clone()
            out[f"rope_attention_scaling_{lt}"] = torch.tensor([getattr(rot, f"{lt}_attention_scaling")], dtype=torch.float32)
    else:
        out["rope_inv_freq"] = rot.inv_freq.detach().float().clone()
        out["rope_attention_scaling"] = torch.tensor([rot.attention_scaling], dtype=torch.float32)
    return out


def _rope_norm(rp):
    """rope_parameters without the legacy 'type' alias (kept beside rope_type when a v4 config used it)."""
    if isinstance(rp, dict):
        return {k: _rope_norm(v) for k, v in rp.items() if k != "type"}
    return rp


def forward_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids[None].long(), use_cache=False)
    logits = out.logits[0]
    assert logits.dtype == torch.float32
    return logits.detach().clone()


def generate_case(case, out_root):
    name = case["name"]
    seed = case_seed(name)
    cfg_kwargs = json.loads(json.dumps(case["kwargs"]))  # deep copy
    config = case["config"](**cfg_kwargs)
    config._attn_implementation = "eager"
    model = case["model"](config).float().eval()
    assert model.config._attn_implementation == "eager"
    tied = bool(config.tie_word_embeddings)

    embed_std = case.get("embed_std", 0.25 if tied else 1.0)
    torch.manual_seed(seed)
    init_weights(model, config, embed_std, case.get("lm_head_std"))
    if tied:
        assert model.lm_head.weight is model.model.embed_tokens.weight

    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, config.vocab_size, (T,), generator=gen, dtype=torch.int64)
    logits = forward_logits(model, ids)  # [T, V]
    rope = rope_tensors(model)

    lp = torch.log_softmax(logits.double(), dim=-1)
    nll64 = -lp[:-1].gather(1, ids[1:, None]).squeeze(1)  # [T-1]
    ppl = math.exp(nll64.mean().item())
    positions = pick_positions(case.get("boundaries", []))

    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    # config.json as transformers 5 writes it; weights written by us in BF16.
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        with open(os.path.join(tmp, "config.json")) as f:
            cfg_json = json.load(f)
        with safe_open(os.path.join(tmp, "model.safetensors"), "pt") as f:
            hf_keys = set(f.keys())
    cfg_json["dtype"] = "bfloat16"  # what model.safetensors holds
    if case.get("layout", "v5") == "v4":
        cfg_json = to_v4_layout(cfg_json, case.get("v4_type_key", "rope_type"), case.get("v4_extra"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")

    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight")
    if set(state) != hf_keys:
        raise RuntimeError(f"{name}: tensor names differ from save_pretrained: {sorted(set(state) ^ hf_keys)}")
    for k, v in state.items():  # BF16 must be exact
        assert torch.equal(v.float(), model.state_dict()[k]), k
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    ref = {
        "input_ids": ids.to(torch.int32),
        "positions": torch.tensor(positions, dtype=torch.int32),
        "logits": logits[positions].float().contiguous(),
        "nll": nll64.float(),
    }
    ref.update(rope)
    save_file(ref, os.path.join(out_dir, "reference.safetensors"), metadata={"format": "pt"})
    for fn in ("model.safetensors", "reference.safetensors"):
        os.chmod(os.path.join(out_dir, fn), 0o644)

    # Reload the folder as a user would and demand bit-identical logits.
    reloaded, info = AutoModelForCausalLM.from_pretrained(
        out_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    reloaded.eval()
    if type(reloaded) is not case["model"]:
        raise RuntimeError(f"{name}: reloaded as {type(reloaded).__name__}")
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise RuntimeError(f"{name}: loading info not clean: {bad}")
    if _rope_norm(reloaded.config.rope_parameters) != _rope_norm(model.config.rope_parameters):
        raise RuntimeError(f"{name}: rope_parameters differ after reload: "
                           f"{reloaded.config.rope_parameters} vs {model.config.rope_parameters}")
    if list(getattr(reloaded.config, "layer_types", []) or []) != list(getattr(model.config, "layer_types", []) or []):
        raise RuntimeError(f"{name}: layer_types differ after reload")
    for (k1, p1), (k2, p2) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        if k1 != k2 or not torch.equal(p1, p2):
            raise RuntimeError(f"{name}: parameter {k1}/{k2} differs after reload")
    logits2 = forward_logits(reloaded, ids)
    if not torch.equal(logits, logits2):
        diff = (logits - logits2).abs().max().item()
        raise RuntimeError(f"{name}: reloaded logits differ (max abs diff {diff:g})")
    rope2 = rope_tensors(reloaded)
    for k in rope:
        if not torch.equal(rope[k], rope2[k]):
            raise RuntimeError(f"{name}: {k} differs after reload")

    meta = {
        "case": name,
        "description": case["description"],
        "family": case["family"],
        "architecture": case["model"].__name__,
        "layout": case.get("layout", "v5"),
        "T": T,
        "ppl": ppl,
        "seed": seed,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "features": case["features"],
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        f.write(json.dumps(meta, indent=2) + "\n")

    rope_desc = ", ".join(
        f"{k}={v.tolist() if v.numel() == 1 else '[' + str(v.numel()) + ']'}" for k, v in rope.items() if "scaling" in k
    )
    print(f"{name:22s} ppl={ppl:10.4f} logit_std={logits.std().item():.3f} positions={positions} {rope_desc}")
    return meta


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "..", "tests", "data", "conformance"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=default_out)
    ap.add_argument("--only", nargs="*", help="case names to (re)generate")
    args = ap.parse_args()

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names)
    if args.only:
        unknown = set(args.only) - set(names)
        if unknown:
            sys.exit(f"unknown case(s): {sorted(unknown)}")
    os.makedirs(args.out, exist_ok=True)
    for case in CASES:
        if args.only and case["name"] not in args.only:
            continue
        generate_case(case, args.out)
    print(f"wrote {len(args.only or names)} case(s) to {args.out}")


if __name__ == "__main__":
    main()
