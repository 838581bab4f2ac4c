#!/usr/bin/env python3
"""Generate tiny random Hugging Face checkpoints + transformers reference outputs.

For every case in CASES this writes tests/data/conformance/<case>/:
  config.json            as transformers 5 writes it (or rewritten to the 4.x layout for "v4" cases)
  model.safetensors      all weights in BF16 (tied embeddings: only model.embed_tokens.weight)
  reference.safetensors  input_ids I32 [T], positions I32 [P], logits F32 [P, vocab], nll F32 [T-1]
                         (+ informational rope_* tensors, see README.md; none for Nemotron-H: no RoPE)
  reference.json         case, description, family, T, ppl, versions, features, ...

Weights are re-initialised with fixed seeds and rounded to BF16-representable values, so the
float32 reference computed here is exactly what the BF16 checkpoint describes. The script
fails (non-zero exit) if reloading a saved folder does not reproduce the logits bit-exactly.
Mixture-of-experts cases are written with the tensor names save_pretrained writes (per-expert hub
names; gpt-oss fused) or, with disk_layout="fused", transformers' in-memory fused tensors; their
reference.json records the routing (expert token counts per layer), and a case fails if any expert
of any MoE layer receives no token.
Nemotron-H cases (hybrid Mamba-2 / attention / MLP / MoE, hub names backbone.*) use T = 250 so the
chunked scan ends in a partial chunk, clamp dt to (0, inf) as vLLM's kernels do (config time_step_min 0.0),
add the legacy hybrid_override_pattern to config.json, and fail unless a token-by-token decode with
transformers' cache (the recurrent Mamba path) matches the full-sequence logits within 1e-4
(reference.json decode_vs_prefill_max_abs).

Run it through scripts/conformance/generate.sh (pinned venv), or directly:
  python generate.py [--out DIR] [--only CASE ...]
"""

import argparse
import json
import math
import os
import re
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
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GraniteConfig,
    GraniteForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    NemotronHConfig,
    NemotronHForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
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
    # ------------------------------------------------------------------------------------ mixture of experts
    # Expert / router init (see init_weights and README "MoE"): 3-D expert tensors N(0, scale/sqrt(fan_in)),
    # routers N(0, 1/sqrt(hidden)) so router logits are O(1) and routing differs per token. Every case is run
    # with experts_implementation="eager" (the per-expert loop) and must route >= 1 token to every expert.
    dict(
        name="mixtral",
        family="mixtral",
        model=MixtralForCausalLM,
        config=MixtralConfig,
        kwargs=dict(SMALL, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        description="Mixtral: every layer is a sparse MoE block, 8 experts (num_local_experts), top-2 "
        "(num_experts_per_tok), expert intermediate_size 48, sliding_window null, theta 1e6, rms_norm_eps 1e-5. "
        "Router: p = softmax(x @ gate.weight^T) over all 8 experts (float32), take the top-2 p, renormalise them "
        "to sum 1; out = sum_k w_k * w2_e(silu(w1_e x) * w3_e x). model.safetensors uses the hub names that "
        "save_pretrained writes: model.layers.N.block_sparse_moe.gate.weight [8,64] and "
        "model.layers.N.block_sparse_moe.experts.E.{w1,w3}.weight [48,64] (w1 = gate, w3 = up), "
        "experts.E.w2.weight [64,48] (down).",
        features=["moe:all_layers", "moe:experts=8", "moe:top_k=2", "moe:router=softmax_topk_renorm",
                  "moe:names=per_expert(block_sparse_moe.experts.E.w1/w2/w3)", "sliding_window=null",
                  "rope:default", "rope_theta=1e6", "untied_embeddings", "gqa:4q/2kv", "config_layout:v5"],
    ),
    dict(
        name="qwen2_moe",
        family="qwen2_moe",
        model=Qwen2MoeForCausalLM,
        config=Qwen2MoeConfig,
        kwargs=dict(SMALL, num_hidden_layers=3, intermediate_size=128, moe_intermediate_size=32,
                    shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
                    decoder_sparse_step=1, mlp_only_layers=[1],
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        description="Qwen2-MoE (Qwen1.5-MoE style): 3 layers, mlp_only_layers [1] -> layers 0 and 2 are sparse MoE, "
        "layer 1 is a dense MLP with intermediate_size 128 (mlp.gate_proj/up_proj/down_proj). MoE layers: 8 experts, "
        "top-2, moe_intermediate_size 32, norm_topk_prob false (the top-2 softmax probabilities over all 8 experts "
        "are used as they are, NOT renormalised), plus a shared expert (intermediate 48) scaled by "
        "sigmoid(shared_expert_gate(x)) (a [1,64] linear). q/k/v biases. Per-expert hub names "
        "mlp.experts.E.{gate,up,down}_proj.weight, mlp.gate.weight [8,64], mlp.shared_expert.*, "
        "mlp.shared_expert_gate.weight.",
        features=["moe:layers=[0,2]", "moe:dense_layers=[1](mlp_only_layers)", "moe:experts=8", "moe:top_k=2",
                  "moe:router=softmax_topk", "moe:norm_topk_prob=false", "moe:shared_expert(sigmoid_gate)",
                  "moe:names=per_expert", "attention_bias:q,k,v", "rope:default", "rope_theta=1e6",
                  "untied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="qwen3_moe",
        family="qwen3_moe",
        model=Qwen3MoeForCausalLM,
        config=Qwen3MoeConfig,
        kwargs=dict(SMALL, num_hidden_layers=3, head_dim=32, intermediate_size=128, moe_intermediate_size=48,
                    num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        description="Qwen3-MoE: 3 layers, decoder_sparse_step 2 -> layer i is MoE iff (i+1) % 2 == 0 (and i not in "
        "mlp_only_layers): layers 0 and 2 dense (intermediate_size 128), layer 1 MoE. 8 experts, top-2, "
        "moe_intermediate_size 48, norm_topk_prob true (top-2 softmax probabilities renormalised to sum 1), no "
        "shared expert. Per-head q_norm/k_norm, head_dim 32. config.json stores the expert count as "
        "num_local_experts (Qwen3MoeConfig maps num_experts -> num_local_experts; hub configs say num_experts). "
        "Per-expert hub names mlp.experts.E.{gate,up,down}_proj.weight, as save_pretrained writes them.",
        features=["moe:layers=[1]", "moe:dense_layers=[0,2](decoder_sparse_step=2)", "moe:experts=8", "moe:top_k=2",
                  "moe:router=softmax_topk_renorm", "moe:norm_topk_prob=true", "moe:names=per_expert",
                  "config:num_local_experts(not num_experts)", "qk_norm:per_head", "head_dim=32!=hidden/heads",
                  "rope:default", "rope_theta=1e6", "untied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="qwen3_moe_fused",
        family="qwen3_moe",
        model=Qwen3MoeForCausalLM,
        config=Qwen3MoeConfig,
        kwargs=dict(SMALL, num_hidden_layers=3, head_dim=32, intermediate_size=128, moe_intermediate_size=48,
                    num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=2,
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        disk_layout="fused",
        description="Same config as qwen3_moe (different random weights), but model.safetensors holds the fused 3-D "
        "expert tensors of transformers' in-memory layout instead of the per-expert hub names: "
        "model.layers.1.mlp.experts.gate_up_proj [8, 96, 64] = [E, 2*moe_intermediate, hidden] with rows "
        "[0,48) = gate_proj and [48,96) = up_proj of each expert, and mlp.experts.down_proj [8, 64, 48] = "
        "[E, hidden, moe_intermediate]; both used as F.linear weights (y = x @ W[e]^T). from_pretrained loads "
        "them as they are (the conversion mapping only rewrites per-expert names).",
        features=["moe:layers=[1]", "moe:dense_layers=[0,2](decoder_sparse_step=2)", "moe:experts=8", "moe:top_k=2",
                  "moe:router=softmax_topk_renorm", "moe:norm_topk_prob=true",
                  "moe:names=fused(experts.gate_up_proj[E,2I,H],experts.down_proj[E,H,I])",
                  "qk_norm:per_head", "head_dim=32!=hidden/heads", "rope:default", "rope_theta=1e6",
                  "untied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="deepseek_v3",
        family="deepseek_v3",
        model=DeepseekV3ForCausalLM,
        config=DeepseekV3Config,
        kwargs=dict(SMALL, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                    intermediate_size=128, moe_intermediate_size=32, max_position_embeddings=256,
                    q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
                    n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, routed_scaling_factor=2.5,
                    norm_topk_prob=True, n_shared_experts=1, first_k_dense_replace=1,
                    scoring_func="sigmoid", topk_method="noaux_tc",
                    rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                     "rope_theta": 10000.0}),
        boundaries=[64],
        moe=dict(e_bias_std=0.1),
        description="DeepSeek-V3: MLA attention with q_lora_rank 48 (q = q_b_proj(q_a_layernorm(q_a_proj(x))), "
        "q_a_proj [48,64], q_b_proj [96,48] -> per head [q_nope 16 | q_rope 8]), kv_lora_rank 32, qk_nope_head_dim 16, "
        "qk_rope_head_dim 8, v_head_dim 12 (deliberately != qk_nope_head_dim), 4 heads; kv_a_proj_with_mqa [40,64] "
        "-> latent [32] (kv_a_layernorm) + one rope key [8] shared by all heads; kv_b_proj [112,32] -> per head "
        "[k_nope 16 | v 12]; o_proj [64,48]. "
        "RoPE only on the last 8 dims of q/k heads, INTERLEAVED pairs (rope_interleave true, the default): pair i = "
        "dims (2i, 2i+1) rotated by inv_freq[i], and the rotated rope part is written de-interleaved "
        "[evens' | odds'] (same for q and k, so q.k is unaffected). YaRN factor 4, original 64, "
        "mscale = mscale_all_dim = 1 -> cos/sin attention_factor 1.0 but softmax scale = qk_head_dim**-0.5 * "
        "(0.1*ln(4)+1)**2 (yarn_apply_mscale). 3 layers, first_k_dense_replace 1 -> layer 0 dense MLP "
        "(intermediate 128), layers 1-2 MoE: 8 routed experts (moe_intermediate 32), sigmoid scores, "
        "non-zero e_score_correction_bias added for the choice only, n_group 2 / topk_group 1 (group score = sum "
        "of the top-2 biased scores in the group), top-2 within the chosen group, weights = unbiased sigmoid "
        "scores normalised (norm_topk_prob) then * routed_scaling_factor 2.5; plus 1 shared expert "
        "(mlp.shared_experts, intermediate 32*n_shared_experts). scoring_func/topk_method are stored but "
        "ignored by transformers.",
        features=["mla:q_lora_rank=48", "mla:kv_lora_rank=32", "mla:qk_nope=16,qk_rope=8,v=12",
                  "mla:q_a_layernorm,kv_a_layernorm(eps=1e-6 fixed)", "rope:yarn", "rope_factor=4",
                  "original_max_position_embeddings=64", "yarn:mscale=1,mscale_all_dim=1",
                  "softmax_scale=qk_head_dim**-0.5*mscale(4,1)**2", "rope_interleave=true",
                  "moe:layers=[1,2]", "moe:dense_layers=[0](first_k_dense_replace=1)", "moe:experts=8",
                  "moe:top_k=2", "moe:router=sigmoid+e_score_correction_bias(group_limited)", "moe:n_group=2",
                  "moe:topk_group=1", "moe:norm_topk_prob=true", "moe:routed_scaling_factor=2.5",
                  "moe:n_shared_experts=1", "moe:e_score_correction_bias!=0", "moe:names=per_expert",
                  "untied_embeddings", "config_layout:v5"],
    ),
    dict(
        name="deepseek_v3_q_direct",
        family="deepseek_v3",
        model=DeepseekV3ForCausalLM,
        config=DeepseekV3Config,
        kwargs=dict(SMALL, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                    intermediate_size=128, moe_intermediate_size=24,
                    q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                    n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1,
                    routed_scaling_factor=2.446, norm_topk_prob=True, n_shared_experts=2, first_k_dense_replace=1,
                    scoring_func="sigmoid", topk_method="noaux_tc",
                    rope_parameters={"rope_type": "default", "rope_theta": 50000.0}),
        moe=dict(e_bias_std=0.1),
        description="DeepSeek-V3 architecture as Moonlight/Kimi ship it: q_lora_rank null -> direct q_proj [96,64] "
        "(no q_a_proj/q_a_layernorm/q_b_proj), default RoPE theta 50000 (interleaved, softmax scale "
        "qk_head_dim**-0.5 = 24**-0.5), n_group 1 / topk_group 1 (no group limit), routed_scaling_factor 2.446, "
        "n_shared_experts 2 (shared_experts intermediate 2*24 = 48), moe_intermediate_size 24, v_head_dim 16 "
        "(= qk_nope_head_dim, as in real checkpoints), non-zero e_score_correction_bias; otherwise as deepseek_v3.",
        features=["mla:q_lora_rank=null(q_proj)", "mla:kv_lora_rank=32", "mla:qk_nope=16,qk_rope=8,v=16",
                  "rope:default", "rope_theta=50000", "rope_interleave=true", "softmax_scale=qk_head_dim**-0.5",
                  "moe:layers=[1,2]", "moe:dense_layers=[0](first_k_dense_replace=1)", "moe:experts=8",
                  "moe:top_k=2", "moe:router=sigmoid+e_score_correction_bias", "moe:n_group=1", "moe:topk_group=1",
                  "moe:norm_topk_prob=true", "moe:routed_scaling_factor=2.446", "moe:n_shared_experts=2",
                  "moe:e_score_correction_bias!=0", "moe:names=per_expert", "untied_embeddings",
                  "config_layout:v5"],
    ),
    dict(
        name="gpt_oss",
        family="gpt_oss",
        model=GptOssForCausalLM,
        config=GptOssConfig,
        kwargs=dict(SMALL, head_dim=16, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2,
                    experts_per_token=2, sliding_window=32, swiglu_limit=7.0,
                    rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                     "truncate": False, "original_max_position_embeddings": 4096,
                                     "rope_theta": 150000.0}),
        boundaries=[32],
        moe=dict(gate_up_scale=3.0, down_scale=0.3, expert_bias_std=0.1, sink_std=1.0),
        description="gpt-oss: 2 layers, layer_types [sliding_attention, full_attention] (the default alternation), "
        "sliding_window 32; q/k/v/o biases; per-head attention sinks self_attn.sinks [4] (non-zero): softmax over "
        "[scores..., sink_h] and the sink column is dropped. Every layer MoE: 8 experts, top-2 "
        "(num_experts_per_tok; experts_per_token is stored too but not read), router = linear WITH bias "
        "(mlp.router.weight/bias), top-2 of the raw logits, softmax over those 2. Experts fused as on the hub: "
        "mlp.experts.gate_up_proj [E, hidden, 2I] = [8, 64, 96] used as x @ W (not W^T) + gate_up_proj_bias [E, 2I], "
        "intermediate_size 48; gate = "
        "columns 0::2, up = columns 1::2 (interleaved); gate = min(gate, 7), up = clamp(up, -7, 7), "
        "out = ((up + 1) * gate * sigmoid(1.702 * gate)) @ down_proj [E, I, hidden] = [8, 48, 64] + down_proj_bias "
        "[E, hidden]. "
        "gate_up weights have std 3/sqrt(64) so both clamps are hit (counts in swiglu_clamp_hits). RoPE: yarn "
        "factor 32, original 4096, theta 150000, truncate false (the gpt-oss defaults), NeoX halves.",
        features=["attention_sinks", "attention_bias:q,k,v,o", "layer_types:[sliding,full]", "sliding_window=32",
                  "moe:all_layers", "moe:experts=8", "moe:top_k=2", "moe:router=linear+bias,topk_then_softmax",
                  "moe:names=fused(gate_up_proj[E,H,2I] interleaved,down_proj[E,I,H])", "moe:expert_biases",
                  "swiglu_limit=7(clamp_hit)", "swiglu_alpha=1.702", "rope:yarn", "rope_factor=32",
                  "original_max_position_embeddings=4096", "yarn:truncate=false", "rope_theta=150000",
                  "untied_embeddings", "gqa:4q/2kv", "config_layout:v5"],
    ),
    # ------------------------------------------------------------------------------ hybrid Mamba-2 (Nemotron-H)
    # One mixer per block (Mamba-2 "M", attention "*", relu2 MLP "-", MoE "E"), each behind its own RMSNorm.
    # The SSM parameters are initialised as Mamba does (nemotron init in init_weights), every mixer's
    # time_step_limit is (0, inf) as in vLLM's kernels (config time_step_min 0.0), and T = 250 so the last
    # chunk of transformers' chunked scan is partial. generate_case also runs a token-by-token decode with
    # transformers' cache (the recurrent path) and records its distance to the full-sequence logits.
    dict(
        name="nemotron_h",
        family="nemotron_h",
        model=NemotronHForCausalLM,
        config=NemotronHConfig,
        kwargs=dict(vocab_size=256, hidden_size=64, hybrid_override_pattern="M*M-ME", max_position_embeddings=512,
                    bos_token_id=1, eos_token_id=2, pad_token_id=None, tie_word_embeddings=False,
                    mamba_num_heads=8, mamba_head_dim=8, ssm_state_size=16, n_groups=2, conv_kernel=4,
                    use_conv_bias=True, chunk_size=32, mamba_hidden_act="silu", use_bias=False, mamba_proj_bias=False,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=False,
                    intermediate_size=96, mlp_hidden_act="relu2", mlp_bias=False,
                    n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=32,
                    moe_shared_expert_intermediate_size=48, routed_scaling_factor=2.5, norm_topk_prob=True,
                    n_shared_experts=1, moe_latent_size=None, layer_norm_epsilon=1e-5),
        T=250,
        boundaries=[32, 224],
        moe=dict(e_bias_std=0.1),
        description="Nemotron-H (NemotronHForCausalLM), hybrid_override_pattern 'M*M-ME' -> layers_block_type "
        "[mamba, attention, mamba, mlp, mamba, moe]; every block is x = x + mixer(norm(x)) (RMSNorm eps 1e-5, "
        "weight multiplied in fp32), final norm_f, untied lm_head. Mamba-2 mixer: 8 heads x head_dim 8 "
        "(I = 64), ssm_state_size 16, n_groups 2, conv_kernel 4 with conv bias, no in/out_proj bias; in_proj "
        "[200,64] -> [z (64) | xBC (conv_dim = 64 + 2*2*16 = 128) | dt (8)]; causal depthwise conv1d "
        "[128,1,4] + SiLU over xBC -> [x (64) | B (2x16) | C (2x16)], head h uses group h // 4; "
        "dt = softplus(dt + dt_bias) (time_step_limit (0, inf): config time_step_min 0.0, see notes); "
        "A = -exp(A_log); S = exp(dt*A) S + dt B x^T, y = C.S + D x; gated RMSNorm over groups of I/n_groups = 32: "
        "norm(y * silu(z)) * mixer.norm.weight; out_proj [64,64]. Chunked scan chunk_size 32 over T = 250 "
        "tokens: 7 full chunks + a partial one of 26. Attention: 4 heads / 2 KV heads, head_dim 16, NO RoPE "
        "(no position information besides the Mamba layers), no biases, scale head_dim**-0.5, causal. MLP: "
        "down(relu(up(x))**2), intermediate 96. MoE: DeepSeek-V3 routing (sigmoid, non-zero "
        "e_score_correction_bias for the choice, n_group 2 / topk_group 1, top-2, norm_topk_prob, x 2.5) over 8 "
        "non-gated relu2 experts (up [32,64], down [64,32]) plus a relu2 shared expert (intermediate 48). "
        "Hub tensor names (backbone.*, per-expert mixer.experts.E.*) as save_pretrained writes them; "
        "config.json as transformers 5.24 writes it (layers_block_type) plus the legacy "
        "hybrid_override_pattern string that hub configs carry.",
        features=["hybrid:mamba2+attention+mlp+moe", "layers_block_type:[M,*,M,-,M,E]",
                  "hybrid_override_pattern=M*M-ME", "mamba:heads=8,head_dim=8,state=16,n_groups=2",
                  "mamba:conv_kernel=4,conv_bias", "mamba:in_out_proj_bias=false", "mamba:chunk_size=32",
                  "mamba:partial_last_chunk(T=250)", "mamba:gated_group_rmsnorm(group=32)",
                  "mamba:time_step_limit=(0,inf)", "attention:no_rope", "gqa:4q/2kv", "mlp:relu2",
                  "moe:layers=[5]", "moe:experts=8", "moe:top_k=2",
                  "moe:router=sigmoid+e_score_correction_bias(group_limited)", "moe:n_group=2", "moe:topk_group=1",
                  "moe:norm_topk_prob=true", "moe:routed_scaling_factor=2.5", "moe:experts=relu2(up,down)",
                  "moe:shared_expert=relu2(48)", "moe:e_score_correction_bias!=0", "moe:names=per_expert",
                  "names:backbone.*", "untied_embeddings"],
    ),
    dict(
        name="nemotron_h_latent",
        family="nemotron_h",
        model=NemotronHForCausalLM,
        config=NemotronHConfig,
        kwargs=dict(vocab_size=256, hidden_size=64, hybrid_override_pattern="ME*EM", max_position_embeddings=512,
                    bos_token_id=1, eos_token_id=2, pad_token_id=None, tie_word_embeddings=False,
                    mamba_num_heads=6, mamba_head_dim=16, ssm_state_size=16, n_groups=1, conv_kernel=4,
                    use_conv_bias=True, chunk_size=64, mamba_hidden_act="silu", use_bias=True, mamba_proj_bias=False,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=False,
                    intermediate_size=96, mlp_hidden_act="relu2", mlp_bias=False,
                    n_routed_experts=8, num_experts_per_tok=3, n_group=1, topk_group=1, moe_intermediate_size=48,
                    moe_shared_expert_intermediate_size=80, routed_scaling_factor=1.5, norm_topk_prob=False,
                    n_shared_experts=1, moe_latent_size=32, layer_norm_epsilon=1e-5),
        T=250,
        boundaries=[64, 192],
        moe=dict(e_bias_std=0.1),
        description="Nemotron-H with a latent MoE (Nemotron 3 Super style): hybrid_override_pattern 'ME*EM' -> "
        "[mamba, moe, attention, moe, mamba]. Mamba-2: 6 heads x head_dim 16 (I = 96, so out_proj [64,96] is "
        "not square), ssm_state_size 16, n_groups 1 (all heads share B and C; gated RMSNorm over the whole 96), "
        "conv_kernel 4 with conv bias, use_bias true -> in_proj bias [230] and out_proj bias [64]; in_proj "
        "[230,64] -> [z 96 | xBC 128 | dt 6]; chunk_size 64 over T = 250 (3 full chunks + 58). MoE layers 1 and 3: "
        "router on the block input (hidden 64): sigmoid + non-zero e_score_correction_bias, n_group 1 (no group "
        "limit), top-3, norm_topk_prob FALSE (weights = the unbiased sigmoid scores, not renormalised) x 1.5; the "
        "routed experts run in the latent space: h = fc1_latent_proj(x) [32,64], out = fc2_latent_proj(sum_k w_k "
        "down_e(relu(up_e h)**2)) [64,32] with up_e [48,32], down_e [32,48] (no biases: mlp_bias false), plus "
        "the shared expert on x at full width (up [80,64], down [64,80]). Attention as nemotron_h "
        "(attention_bias false; transformers ignores it anyway). tie_word_embeddings false: NemotronHForCausalLM "
        "declares no tied weights (_tied_weights_keys = {}), so a true flag would leave lm_head untied in "
        "transformers.",
        features=["hybrid:mamba2+attention+moe", "layers_block_type:[M,E,*,E,M]", "hybrid_override_pattern=ME*EM",
                  "mamba:heads=6,head_dim=16,state=16,n_groups=1", "mamba:conv_kernel=4,conv_bias",
                  "mamba:in_out_proj_bias=true(use_bias)", "mamba:chunk_size=64", "mamba:partial_last_chunk(T=250)",
                  "mamba:gated_group_rmsnorm(group=96)", "mamba:time_step_limit=(0,inf)", "attention:no_rope",
                  "gqa:4q/2kv", "moe:layers=[1,3]", "moe:experts=8", "moe:top_k=3",
                  "moe:router=sigmoid+e_score_correction_bias", "moe:n_group=1", "moe:topk_group=1",
                  "moe:norm_topk_prob=false", "moe:routed_scaling_factor=1.5", "moe:latent=32(fc1/fc2_latent_proj)",
                  "moe:experts=relu2(up,down)", "moe:shared_expert=relu2(80)", "moe:e_score_correction_bias!=0",
                  "moe:names=per_expert", "names:backbone.*", "untied_embeddings"],
    ),
]


def case_seed(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def pick_positions(boundaries, T=T):
    pos = {0, 1, T - 1}
    for b in boundaries:
        pos.update(p for p in (b - 1, b, b + 1) if 0 <= p < T)
    for p in (2, T // 2, 200, 100, 230, 16, 50, 170, T - 2, 80, 150, 220):
        if len(pos) >= N_POSITIONS:
            break
        pos.add(p)
    return sorted(pos)


MOE_INIT = dict(
    router_scale=1.0,  # router weight std = router_scale / sqrt(hidden)
    gate_up_scale=1.0,  # 3-D expert gate_up_proj std = gate_up_scale / sqrt(hidden)
    down_scale=1.0,  # 3-D expert down_proj std = down_scale / sqrt(intermediate)
    expert_bias_std=0.1,  # gpt-oss gate_up_proj_bias / down_proj_bias
    sink_std=1.0,  # gpt-oss attention sinks
    e_bias_std=0.1,  # DeepSeek-V3 e_score_correction_bias (a buffer, zero in transformers)
)


def init_weights(model, config, embed_std, lm_head_std, moe=None):
    """Re-initialise every parameter, then round to BF16-representable values."""
    moe = dict(MOE_INIT, **(moe or {}))
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
                elif "Router" in type(mod).__name__ and pname == "weight":  # [E, hidden], not an nn.Linear
                    p.normal_(0.0, moe["router_scale"] / math.sqrt(p.shape[1]))
                elif pname in ("gate_up_proj", "up_proj", "down_proj") and p.dim() == 3:  # fused experts
                    # (Nemotron-H's experts are not gated: up_proj [E, I, in] takes gate_up_proj's scale)
                    # [E, out, in] used as F.linear weights, or [E, in, out] (x @ W) when is_transposed (gpt-oss)
                    fan_in = p.shape[1] if getattr(mod, "is_transposed", False) else p.shape[2]
                    scale = moe["gate_up_scale"] if pname == "gate_up_proj" else moe["down_scale"]
                    p.normal_(0.0, scale / math.sqrt(fan_in))
                elif pname in ("gate_up_proj_bias", "down_proj_bias"):
                    p.normal_(0.0, moe["expert_bias_std"])
                elif pname == "sinks":
                    p.normal_(0.0, moe["sink_std"])
                elif isinstance(mod, nn.Conv1d) and pname == "weight":  # Mamba depthwise conv [C, 1, K]
                    p.normal_(0.0, 1.0 / math.sqrt(p.shape[2]))
                elif "Mamba2Mixer" in type(mod).__name__ and pname == "dt_bias":
                    # Mamba's init: dt log-uniform in [1e-3, 1e-1], dt_bias = softplus^-1(dt) = dt + log(-expm1(-dt))
                    dt = torch.exp(torch.rand(p.shape) * (math.log(1e-1) - math.log(1e-3)) + math.log(1e-3))
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))
                elif "Mamba2Mixer" in type(mod).__name__ and pname == "A_log":  # A = -exp(A_log), |A| in [1, 16]
                    p.copy_(torch.log(torch.empty(p.shape).uniform_(1.0, 16.0)))
                elif "Mamba2Mixer" in type(mod).__name__ and pname == "D":  # skip connection, around 1
                    p.normal_(0.0, 0.2).add_(1.0)
                else:
                    raise RuntimeError(f"unhandled parameter {full} in {type(mod).__name__}")
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # persistent buffer, saved with the weights
                assert torch.all(b == 0), name
                b.normal_(0.0, moe["e_bias_std"])
                b.copy_(b.bfloat16().float())
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
    rot = getattr(model.model, "rotary_emb", None)
    out = {}
    if rot is None:  # Nemotron-H: no RoPE
        return out
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


# --------------------------------------------------------------------------------------- mixture of experts

MOE_FAMILIES = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss", "nemotron_h"}


def hub_expert_names(family, state):
    """transformers' in-memory MoE names -> the names save_pretrained writes (the hub layout).

    transformers 5 keeps the experts of a layer fused ([E, 2I, H] gate_up_proj with gate rows first, [E, H, I]
    down_proj) and its conversion mapping (conversion_mapping.py, "mixtral" / "qwen2_moe") splits them back on
    save. gpt-oss is stored fused on the hub, so it is left as it is. Nemotron-H ("nemotron_h": the model is
    `backbone` on the hub, `model` in memory) keeps non-gated experts, up_proj [E, I, in] and down_proj
    [E, in, I], split into experts.<e>.up_proj.weight / down_proj.weight."""
    if family == "gpt_oss":
        return dict(state)
    gate, up, down = ("w1", "w3", "w2") if family == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    out = {}
    for k, v in state.items():
        if family == "mixtral":  # WeightRenaming(".block_sparse_moe.", ".mlp."), reversed
            k = k.replace(".mlp.", ".block_sparse_moe.")
        if family == "nemotron_h" and k.startswith("model."):  # WeightRenaming("backbone.", "model."), reversed
            k = "backbone." + k[len("model."):]
        m = re.fullmatch(r"(.*\.experts\.)(gate_up_proj|up_proj|down_proj)", k)
        if m is None:
            out[k] = v
            continue
        for e in range(v.shape[0]):
            if m.group(2) == "up_proj":
                out[f"{m.group(1)}{e}.up_proj.weight"] = v[e].clone()
            elif m.group(2) == "gate_up_proj":
                g, u = v[e].chunk(2, dim=0)
                out[f"{m.group(1)}{e}.{gate}.weight"] = g.clone()
                out[f"{m.group(1)}{e}.{up}.weight"] = u.clone()
            else:
                out[f"{m.group(1)}{e}.{down}.weight"] = v[e].clone()
    return out


def install_moe_probes(model, family):
    """Forward hooks recording every router's output, and (gpt-oss) a counter of SwiGLU clamp hits."""
    routes, clamps, undo = {}, {}, []
    for name, mod in model.named_modules():
        m = re.search(r"layers\.(\d+)\.", name)
        if "Router" in type(mod).__name__:
            layer = int(m.group(1))

            def hook(_mod, _inp, out, layer=layer):
                logits, weights, indices = out
                routes[layer] = dict(logits=logits.detach().double().clone(), weights=weights.detach().double().clone(),
                                     indices=indices.detach().clone())

            undo.append(mod.register_forward_hook(hook).remove)
        if family == "gpt_oss" and type(mod).__name__ == "GptOssExperts":
            layer, orig, limit = int(m.group(1)), mod._apply_gate, mod.limit

            def counting(gate_up, orig=orig, layer=layer, limit=limit):
                gate, up = gate_up[..., ::2], gate_up[..., 1::2]
                ga, uo = gate > limit, up.abs() > limit
                c = clamps.setdefault(layer, dict(gate_above_limit=0, up_outside_limit=0, token_expert_pairs=0,
                                                  pairs_clamped=0))
                c["gate_above_limit"] += int(ga.sum())
                c["up_outside_limit"] += int(uo.sum())
                c["token_expert_pairs"] += int(gate_up.shape[0])
                c["pairs_clamped"] += int((ga | uo).any(-1).sum())
                return orig(gate_up)

            mod._apply_gate = counting
            undo.append(lambda mod=mod: delattr(mod, "_apply_gate"))
    return routes, clamps, undo


def deepseek_route(logits, bias, n_group, topk_group, k):
    """DeepseekV3TopkRouter.forward in float64: (expert indices [T, k], selection margin [T])."""
    s = logits.sigmoid()
    sc = s + bias
    T, E = sc.shape
    g = sc.view(T, n_group, E // n_group).topk(2, dim=-1).values.sum(-1)  # group score: sum of its top-2
    inf = torch.full((T,), math.inf, dtype=torch.float64)
    gs = g.sort(-1, descending=True).values
    gmargin = gs[:, topk_group - 1] - gs[:, topk_group] if n_group > topk_group else inf
    gmask = torch.zeros_like(g).scatter_(1, g.topk(topk_group, dim=-1).indices, 1.0).bool()
    allowed = gmask.repeat_interleave(E // n_group, dim=1)
    masked = sc.masked_fill(~allowed, -math.inf)
    srt = masked.sort(-1, descending=True).values
    emargin = srt[:, k - 1] - srt[:, k] if topk_group * (E // n_group) > k else inf
    return masked.topk(k, dim=-1).indices, torch.minimum(gmargin, emargin)


def moe_stats(case, config, model, routes, clamps):
    """reference.json entries: expert token counts per MoE layer (all > 0 or the case fails), routing margins."""
    family, name = case["family"], case["name"]
    T = case.get("T", globals()["T"])
    E = config.num_local_experts if family in ("mixtral", "gpt_oss") else (
        config.n_routed_experts if family in ("deepseek_v3", "nemotron_h") else config.num_experts)
    k = config.num_experts_per_tok
    out = dict(moe_layers=sorted(routes), num_experts=E, top_k=k, expert_tokens={}, router_min_margin={},
               router_near_ties={})
    bias_changed = {}
    for layer in sorted(routes):
        r = routes[layer]
        idx = r["indices"]
        assert idx.shape == (T, k), idx.shape
        counts = torch.bincount(idx.flatten(), minlength=E).tolist()
        if min(counts) == 0:
            raise RuntimeError(f"{name}: layer {layer}: an expert got no token: {counts}")
        out["expert_tokens"][str(layer)] = counts
        if family in ("deepseek_v3", "nemotron_h"):  # the same router (NemotronHTopkRouter = DeepseekV3TopkRouter)
            block = model.model.layers[layer]
            gate = block.mixer.gate if family == "nemotron_h" else block.mlp.gate
            bias = gate.e_score_correction_bias.detach().double()
            mine, margin = deepseek_route(r["logits"], bias, config.n_group, config.topk_group, k)
            plain, _ = deepseek_route(r["logits"], torch.zeros_like(bias), config.n_group, config.topk_group, k)
            bias_changed[str(layer)] = int((mine.sort(-1).values != plain.sort(-1).values).any(-1).sum())
        else:  # softmax routers: the choice is the top-k of the logits (gpt-oss: logits include the router bias)
            srt = r["logits"].sort(-1, descending=True)
            mine, margin = srt.indices[:, :k], srt.values[:, k - 1] - srt.values[:, k]
        if not torch.equal(mine.sort(-1).values, idx.sort(-1).values):
            raise RuntimeError(f"{name}: layer {layer}: recomputed routing differs from transformers'")
        out["router_min_margin"][str(layer)] = margin.min().item()
        out["router_near_ties"][str(layer)] = {f"margin<{t:g}": int((margin < t).sum()) for t in (1e-3, 1e-2)}
    if bias_changed:
        out["e_score_correction_bias_changed_tokens"] = bias_changed
    if family == "gpt_oss":
        out["swiglu_clamp_hits"] = {str(layer): clamps[layer] for layer in sorted(clamps)}
        if not all(c["gate_above_limit"] > 0 and c["up_outside_limit"] > 0 for c in clamps.values()):
            raise RuntimeError(f"{name}: the SwiGLU clamp is not hit in every layer: {clamps}")
    return out


def forward_logits(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids[None].long(), use_cache=False)
    logits = out.logits[0]
    assert logits.dtype == torch.float32
    return logits.detach().clone()


# ----------------------------------------------------------------------------------------- Nemotron-H


def nemotron_set_dt_limit(model):
    """Every Mamba mixer's dt clamp -> (0, inf), and config.time_step_min -> 0.0 (what the mixers read on load).

    transformers' mixer clamps dt to (config.time_step_min, inf) in its chunked prefill only (its single-token
    decode does not clamp); vLLM's kernels and qforge clamp to config.time_step_limit, default (0, inf), which
    after the softplus is no clamp at all. The model is built with the default 0.001 first because weight init
    takes log(time_step_min)."""
    mixers = [m for m in model.modules() if hasattr(m, "time_step_limit")]
    assert mixers
    for m in mixers:
        m.time_step_limit = (0.0, float("inf"))
    model.config.time_step_min = 0.0
    return mixers


def nemotron_dt_probe(model):
    """Forward hooks on every Mamba in_proj: the dt = softplus(dt_raw + dt_bias) values of the forward."""
    seen, undo = [], []
    for mod in model.modules():
        if not hasattr(mod, "time_step_limit"):
            continue

        def hook(_m, _inp, out, mixer=mod):
            dt = out[..., -mixer.num_heads:] + mixer.dt_bias
            seen.append(torch.nn.functional.softplus(dt.double()).flatten())

        undo.append(mod.in_proj.register_forward_hook(hook).remove)
    return seen, undo


def decode_logits(model, ids, n):
    """Logits [n, V] of a token-by-token decode of ids[:n] with transformers' cache (use_cache=True), and how
    often the single-token paths ran (causal_conv1d_update, mamba2_selective_state_update)."""
    mod = sys.modules[type(model).__module__]
    calls = {"causal_conv1d_update": 0, "mamba2_selective_state_update": 0}
    originals = {name: getattr(mod, name) for name in calls}

    def counting(name):
        def f(*a, **k):
            calls[name] += 1
            return originals[name](*a, **k)
        return f

    for name in calls:
        setattr(mod, name, counting(name))
    rows, cache = [], None
    try:
        with torch.no_grad():
            for t in range(n):
                out = model(input_ids=ids[None, t:t + 1].long(), cache=cache, use_cache=True)
                cache = out.cache
                rows.append(out.logits[0, -1].detach().clone())
    finally:
        for name, f in originals.items():
            setattr(mod, name, f)
    return torch.stack(rows), calls


def generate_case(case, out_root):
    name = case["name"]
    seed = case_seed(name)
    cfg_kwargs = json.loads(json.dumps(case["kwargs"]))  # deep copy
    config = case["config"](**cfg_kwargs)
    config._attn_implementation = "eager"
    is_moe = case["family"] in MOE_FAMILIES
    nemotron = case["family"] == "nemotron_h"
    T = case.get("T", globals()["T"])  # Nemotron-H: 250, so the Mamba chunked scan ends in a partial chunk
    load_kwargs = {}
    if is_moe:  # the plain per-expert loop, not grouped_mm
        config._experts_implementation = "eager"
        load_kwargs["experts_implementation"] = "eager"
    model = case["model"](config).float().eval()
    assert model.config._attn_implementation == "eager"
    tied = bool(config.tie_word_embeddings)

    embed_std = case.get("embed_std", 0.25 if tied else 1.0)
    torch.manual_seed(seed)
    init_weights(model, config, embed_std, case.get("lm_head_std"), case.get("moe"))
    if tied:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    if nemotron:
        mixers = nemotron_set_dt_limit(model)
        dt_seen, dt_undo = nemotron_dt_probe(model)

    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, config.vocab_size, (T,), generator=gen, dtype=torch.int64)
    if is_moe:
        assert model.config._experts_implementation == "eager"
        routes, clamps, undo = install_moe_probes(model, case["family"])
    logits = forward_logits(model, ids)  # [T, V]
    rope = rope_tensors(model)
    moe_meta = {}
    if is_moe:
        for fn in undo:
            fn()
        moe_meta = moe_stats(case, config, model, routes, clamps)
    extra_meta = {}
    if nemotron:
        for fn in dt_undo:
            fn()
        dt = torch.cat(dt_seen)
        # The full-sequence reference above is the chunked scan; a token-by-token decode with transformers'
        # cache runs the recurrence (conv state update + selective state update) and must agree.
        dec, calls = decode_logits(model, ids, T)
        n_mamba = len(mixers)
        if calls["mamba2_selective_state_update"] != n_mamba * (T - 1) or calls["causal_conv1d_update"] != n_mamba * (T - 1):
            raise RuntimeError(f"{name}: the decode did not take the recurrent path: {calls}")
        decode_diff = (dec - logits).abs().max().item()
        if decode_diff > 1e-4:
            raise RuntimeError(f"{name}: token-by-token decode differs from the prefill by {decode_diff:g}")
        extra_meta = {
            "decode_vs_prefill_max_abs": decode_diff,
            "decode_vs_prefill": f"token-by-token decode of all {T} tokens with transformers' cache (use_cache=True; "
            f"causal_conv1d_update and mamba2_selective_state_update ran {calls['mamba2_selective_state_update']} "
            "times each) against the full-sequence chunked-scan logits, float32",
            "mamba_layers": [i for i, t in enumerate(config.layers_block_type) if t == "linear_attention"],
            "mamba_dt": {"min": dt.min().item(), "max": dt.max().item(),
                         "below_0.001": int((dt < 1e-3).sum()), "count": dt.numel(),
                         "note": "dt = softplus(in_proj dt + dt_bias) over all tokens, heads and Mamba layers of the "
                         "reference forward; entries below 0.001 would be clamped by transformers' default "
                         "time_step_min (this fixture uses time_step_limit (0, inf), i.e. no clamp)"},
        }

    lp = torch.log_softmax(logits.double(), dim=-1)
    nll64 = -lp[:-1].gather(1, ids[1:, None]).squeeze(1)  # [T-1]
    ppl = math.exp(nll64.mean().item())
    positions = pick_positions(case.get("boundaries", []), T)

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
            hf_tensors = {k: f.get_tensor(k) for k in f.keys()} if is_moe else None
    cfg_json["dtype"] = "bfloat16"  # what model.safetensors holds
    if nemotron:
        # transformers 5 writes layers_block_type only; hub configs carry the legacy pattern string
        # (M = mamba, * = attention, - = mlp, E = moe). On load the list wins, the string is dropped.
        assert "hybrid_override_pattern" not in cfg_json and cfg_json["time_step_min"] == 0.0
        cfg_json["hybrid_override_pattern"] = config.hybrid_override_pattern
        extra_meta["config_keys_added"] = {"hybrid_override_pattern": config.hybrid_override_pattern}
    if case.get("layout", "v5") == "v4":
        cfg_json = to_v4_layout(cfg_json, case.get("v4_type_key", "rope_type"), case.get("v4_extra"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")

    sd = model.state_dict()
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}
    if tied:
        state.pop("lm_head.weight")
    f32 = sd
    if is_moe:
        # What save_pretrained writes (per-expert hub names, except gpt-oss), split here independently and
        # compared name by name and value by value with its output.
        hub = hub_expert_names(case["family"], {k: v.detach() for k, v in sd.items()})
        if set(hub) != hf_keys:
            raise RuntimeError(f"{name}: hub names differ from save_pretrained: {sorted(set(hub) ^ hf_keys)}")
        for k, v in hub.items():
            if not torch.equal(v, hf_tensors[k]):
                raise RuntimeError(f"{name}: {k} differs from what save_pretrained wrote")
        if case.get("disk_layout") == "fused":  # transformers' in-memory names and layout, written directly
            assert set(state) != hf_keys
        else:
            state = {k: v.to(torch.bfloat16).contiguous() for k, v in hub.items()}
            f32 = hub
    elif set(state) != hf_keys:
        raise RuntimeError(f"{name}: tensor names differ from save_pretrained: {sorted(set(state) ^ hf_keys)}")
    for k, v in state.items():  # BF16 must be exact
        assert torch.equal(v.float(), f32[k]), k
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
        out_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True, **load_kwargs
    )
    reloaded.eval()
    if type(reloaded) is not case["model"]:
        raise RuntimeError(f"{name}: reloaded as {type(reloaded).__name__}")
    bad = {k: v for k, v in info.items() if v}
    if bad:
        raise RuntimeError(f"{name}: loading info not clean: {bad}")
    rp1, rp2 = getattr(model.config, "rope_parameters", None), getattr(reloaded.config, "rope_parameters", None)
    if _rope_norm(rp2) != _rope_norm(rp1):
        raise RuntimeError(f"{name}: rope_parameters differ after reload: {rp2} vs {rp1}")
    if nemotron:
        lim = {m.time_step_limit for m in reloaded.modules() if hasattr(m, "time_step_limit")}
        if lim != {(0.0, float("inf"))}:
            raise RuntimeError(f"{name}: reloaded mixers clamp dt to {lim}")
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
    meta.update(moe_meta)
    meta.update(extra_meta)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        f.write(json.dumps(meta, indent=2) + "\n")

    rope_desc = ", ".join(
        f"{k}={v.tolist() if v.numel() == 1 else '[' + str(v.numel()) + ']'}" for k, v in rope.items() if "scaling" in k
    )
    print(f"{name:22s} ppl={ppl:10.4f} logit_std={logits.std().item():.3f} positions={positions} {rope_desc}")
    if moe_meta:
        for layer, counts in moe_meta["expert_tokens"].items():
            print(f"{'':22s} layer {layer}: expert tokens {counts} min margin "
                  f"{moe_meta['router_min_margin'][layer]:.2e}")
        for key in ("e_score_correction_bias_changed_tokens", "swiglu_clamp_hits"):
            if key in moe_meta:
                print(f"{'':22s} {key}: {moe_meta[key]}")
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
