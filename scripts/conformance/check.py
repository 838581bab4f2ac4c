#!/usr/bin/env python3
"""Independent re-implementation of the conformance cases (torch float64, NO transformers import).

Reads only config.json + model.safetensors of each case in tests/data/conformance/, runs the forward
pass as documented in README.md, and checks it against reference.safetensors / reference.json: file
format (names, dtypes, shapes), logits, nll, ppl and the informational rope_* tensors. It doubles as a
compact, readable spec of the semantics the C++ engine must reproduce; generate.sh runs it after
generating.

  python check.py [DIR] [--tol 1e-4]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file


# ----------------------------------------------------------------------------------------------- config


def rope_params_by_layer_type(cfg):
    """{layer_type or "all": rope params}, from either the transformers-5 or the 4.x config layout."""
    if "rope_parameters" in cfg:  # v5
        rp = cfg["rope_parameters"]
        return dict(rp) if "full_attention" in rp else {"all": dict(rp)}
    scaling = dict(cfg.get("rope_scaling") or {})  # v4
    rtype = scaling.pop("rope_type", None) or scaling.pop("type", None) or "default"
    if "rope_local_base_freq" in cfg:  # Gemma 3: rope_scaling applies to full-attention layers only
        return {
            "full_attention": {"rope_type": rtype, "rope_theta": cfg["rope_theta"], **scaling},
            "sliding_attention": {"rope_type": "default", "rope_theta": cfg["rope_local_base_freq"]},
        }
    p = {"rope_type": rtype, "rope_theta": cfg["rope_theta"], **scaling}
    if "partial_rotary_factor" in cfg:
        p["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    return {"all": p}


def layer_types(cfg):
    n, mt = cfg["num_hidden_layers"], cfg["model_type"]
    if "layer_types" in cfg:
        return cfg["layer_types"]
    if mt == "gemma3_text":  # layer i slides iff (i+1) % pattern != 0
        return ["sliding_attention" if (i + 1) % cfg["sliding_window_pattern"] else "full_attention" for i in range(n)]
    if mt in ("qwen2", "qwen3"):  # slides iff use_sliding_window and i >= max_window_layers
        slide = cfg.get("use_sliding_window") and cfg.get("sliding_window") is not None
        return ["sliding_attention" if slide and i >= cfg["max_window_layers"] else "full_attention" for i in range(n)]
    if mt in ("mistral", "mixtral") and cfg.get("sliding_window"):
        return ["sliding_attention"] * n
    return ["full_attention"] * n


# ------------------------------------------------------------------------------------------------- rope


def rope_inv_freq(cfg, p, seq_len):
    """(inv_freq [rot_dim/2], attention_factor, rot_dim) for one rope parameter dict.

    seq_len = max(position_ids)+1 of the forward (T here); only 'dynamic' and 'longrope' use it."""
    head_dim = cfg.get("qk_rope_head_dim") or cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dim = int(head_dim * p.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    base, rtype = p["rope_theta"], p["rope_type"]
    expo = torch.arange(0, dim, 2, dtype=torch.float64) / dim  # 2i/dim
    attn_factor = 1.0
    if rtype == "default":
        inv = base**-expo
    elif rtype == "linear":
        inv = base**-expo / p["factor"]
    elif rtype == "dynamic":  # NTK: original length is max_position_embeddings
        mpe = cfg["max_position_embeddings"]
        s = max(seq_len, mpe)
        inv = (base * ((p["factor"] * s / mpe) - (p["factor"] - 1)) ** (dim / (dim - 2))) ** -expo
    elif rtype == "llama3":
        inv = base**-expo
        old = p["original_max_position_embeddings"]
        low_wl, high_wl = old / p["low_freq_factor"], old / p["high_freq_factor"]
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / p["factor"], inv)
        smooth = (old / wl - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
        medium = (wl >= high_wl) & (wl <= low_wl)
        inv = torch.where(medium, (1 - smooth) * scaled / p["factor"] + smooth * scaled, scaled)
    elif rtype == "yarn":
        factor, old = p["factor"], p["original_max_position_embeddings"]

        def mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

        attn_factor = p.get("attention_factor")
        if attn_factor is None:
            if p.get("mscale") and p.get("mscale_all_dim"):
                attn_factor = mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
            else:
                attn_factor = mscale(factor)
        beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1

        def corr_dim(rot):
            return dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(base))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if p.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrap = 1 - ramp  # 1 -> keep original frequency, 0 -> divide by factor
        pos_freq = base**expo
        inv = (1 / (factor * pos_freq)) * (1 - extrap) + (1 / pos_freq) * extrap
    elif rtype == "longrope":  # Phi-3: top-level original_max_position_embeddings wins
        old = cfg.get("original_max_position_embeddings", p.get("original_max_position_embeddings"))
        factor = p.get("factor") or cfg["max_position_embeddings"] / old
        attn_factor = p.get("attention_factor")
        if attn_factor is None:
            attn_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(old))
        ext = torch.tensor(p["long_factor"] if seq_len > old else p["short_factor"], dtype=torch.float64)
        inv = 1 / (ext * base**expo)
    else:
        raise ValueError(rtype)
    return inv, attn_factor, dim


def apply_rope(x, inv, attn_factor, dim, pos):
    """NeoX rotate_half over the first `dim` features of each head; the rest passes through."""
    ang = pos[:, None].double() * inv[None]
    cos = torch.cat([ang.cos(), ang.cos()], -1) * attn_factor
    sin = torch.cat([ang.sin(), ang.sin()], -1) * attn_factor
    xr, xpass = x[..., :dim], x[..., dim:]
    half = dim // 2
    rotated = torch.cat([-xr[..., half:], xr[..., :half]], -1)
    return torch.cat([xr * cos + rotated * sin, xpass], -1)


def rms_norm(x, w, eps, zero_centred=False):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * ((1 + w) if zero_centred else w)


def apply_rope_interleaved(x, inv, attn_factor, pos):
    """DeepSeek (rope_interleave): pair i = features (2i, 2i+1), rotated by inv[i]; the result is written
    de-interleaved, [x_even' | x_odd'] (apply_rotary_pos_emb_interleave). q and k get the same permutation."""
    ang = pos[:, None].double() * inv[None]
    cos, sin = ang.cos() * attn_factor, ang.sin() * attn_factor
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


# ------------------------------------------------------------------------------------ mixture of experts


def num_experts(cfg):
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):  # Mixtral/gpt-oss/Qwen3 | Qwen2 | DeepSeek
        if cfg.get(key):
            return cfg[key]
    return 0


def is_moe_layer(cfg, i):
    mt = cfg["model_type"]
    if mt in ("mixtral", "gpt_oss"):
        return True
    if mt in ("qwen2_moe", "qwen3_moe"):  # Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer
        return (i not in cfg.get("mlp_only_layers", []) and num_experts(cfg) > 0
                and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)
    if mt == "deepseek_v3":
        return i >= cfg["first_k_dense_replace"]
    return False


def swiglu_mlp(h, W, prefix):
    """down(silu(gate(h)) * up(h)) with [out, in] weights prefix{gate,up,down}_proj.weight."""
    g, u = h @ W[prefix + "gate_proj.weight"].T, h @ W[prefix + "up_proj.weight"].T
    return (F.silu(g) * u) @ W[prefix + "down_proj.weight"].T


def expert_weights(cfg, W, P):
    """Per-expert weights from the per-expert hub names or the fused 3-D tensors.

    Returns (gate [E,I,H], up [E,I,H], down [E,H,I]) as F.linear weights, or for gpt-oss the raw fused tensors
    (gate_up [E,H,2I], gate_up_bias [E,2I], down [E,I,H], down_bias [E,H])."""
    mt, E = cfg["model_type"], num_experts(cfg)
    base = P + ("block_sparse_moe." if mt == "mixtral" else "mlp.") + "experts."
    if mt == "gpt_oss":
        return (W[base + "gate_up_proj"], W[base + "gate_up_proj_bias"], W[base + "down_proj"],
                W[base + "down_proj_bias"])
    if base + "gate_up_proj" in W:  # fused [E, 2I, H]: rows [0, I) gate, [I, 2I) up; down [E, H, I]
        gate, up = W[base + "gate_up_proj"].chunk(2, dim=1)
        return gate, up, W[base + "down_proj"]
    g, u, d = ("w1", "w3", "w2") if mt == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    stack = lambda n: torch.stack([W[f"{base}{e}.{n}.weight"] for e in range(E)])  # noqa: E731
    return stack(g), stack(u), stack(d)


def deepseek_router(cfg, h, G_, W):
    """DeepseekV3TopkRouter (also Nemotron-H's): (expert indices [T, k], weights [T, k]); G_ = "<...>.gate.".

    s = sigmoid(gate.weight . h); the choice uses s + e_score_correction_bias: each of the n_group groups of
    E/n_group consecutive experts scores the sum of its top-2, the topk_group best groups stay, top-k experts among
    them. Weights are the UNBIASED s of the chosen experts, / (their sum + 1e-20) if norm_topk_prob, x
    routed_scaling_factor."""
    T, E, k = h.shape[0], num_experts(cfg), cfg["num_experts_per_tok"]
    s = (h @ W[G_ + "weight"].T).sigmoid()
    choice = s + W[G_ + "e_score_correction_bias"]  # the bias steers the choice only
    G, TG = cfg["n_group"], cfg["topk_group"]
    group_score = choice.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)  # sum of each group's top-2
    keep = torch.zeros(T, G, dtype=torch.bool).scatter_(1, group_score.topk(TG, dim=-1).indices, True)
    top_i = choice.masked_fill(~keep.repeat_interleave(E // G, 1), -math.inf).topk(k, dim=-1).indices
    weights = s.gather(1, top_i)  # unbiased scores
    if cfg["norm_topk_prob"]:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return top_i, weights * cfg["routed_scaling_factor"]


def moe_block(cfg, W, P, h, stats, layer):
    """Sparse MoE block of one layer: route, run the chosen experts, add the shared expert(s)."""
    mt, E, k = cfg["model_type"], num_experts(cfg), cfg["num_experts_per_tok"]
    T = h.shape[0]
    if mt == "gpt_oss":  # GptOssTopKRouter: linear with bias, top-k of the logits, softmax over those k
        logits = h @ W[P + "mlp.router.weight"].T + W[P + "mlp.router.bias"]
        top_v, top_i = logits.topk(k, dim=-1)
        weights = top_v.softmax(-1)
    elif mt == "deepseek_v3":  # DeepseekV3TopkRouter
        top_i, weights = deepseek_router(cfg, h, P + "mlp.gate.", W)
    else:  # Mixtral (always renormalised), Qwen2-MoE / Qwen3-MoE (renormalised iff norm_topk_prob)
        gate = P + ("block_sparse_moe." if mt == "mixtral" else "mlp.") + "gate.weight"
        probs = (h @ W[gate].T).softmax(-1)  # over all E experts
        weights, top_i = probs.topk(k, dim=-1)
        if mt == "mixtral" or cfg.get("norm_topk_prob"):
            weights = weights / weights.sum(-1, keepdim=True)

    ew = expert_weights(cfg, W, P)
    out = torch.zeros_like(h)
    clamp = dict(gate_above_limit=0, up_outside_limit=0)
    for e in range(E):
        rows, slot = (top_i == e).nonzero(as_tuple=True)
        x = h[rows]
        if mt == "gpt_oss":
            gate_up, gate_up_b, down, down_b = ew
            gu = x @ gate_up[e] + gate_up_b[e]  # [n, 2I], x @ W (not W^T)
            g, u = gu[:, 0::2], gu[:, 1::2]  # interleaved columns
            limit = cfg["swiglu_limit"]
            clamp["gate_above_limit"] += int((g > limit).sum())
            clamp["up_outside_limit"] += int((u.abs() > limit).sum())
            g, u = g.clamp(max=limit), u.clamp(-limit, limit)
            y = ((u + 1) * g * torch.sigmoid(g * cfg.get("swiglu_alpha", 1.702))) @ down[e] + down_b[e]
        else:
            gate, up, down = ew
            y = (F.silu(x @ gate[e].T) * (x @ up[e].T)) @ down[e].T
        out.index_add_(0, rows, y * weights[rows, slot, None])
    stats.setdefault("expert_tokens", {})[str(layer)] = torch.bincount(top_i.flatten(), minlength=E).tolist()
    if mt == "gpt_oss":
        stats.setdefault("swiglu_clamp_hits", {})[str(layer)] = clamp
    if mt == "qwen2_moe":  # shared expert gated per token by sigmoid(shared_expert_gate(h))
        shared_gate = torch.sigmoid(h @ W[P + "mlp.shared_expert_gate.weight"].T)  # [T, 1]
        out = out + shared_gate * swiglu_mlp(h, W, P + "mlp.shared_expert.")
    if mt == "deepseek_v3":  # n_shared_experts folded into one MLP of intermediate moe_intermediate * n_shared
        out = out + swiglu_mlp(h, W, P + "mlp.shared_experts.")
    return out


# ------------------------------------------------------------------------------------------- Nemotron-H


NEMOTRON_PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def nemotron_block_types(cfg):
    """layers_block_type (transformers 5), else the legacy hybrid_override_pattern string (M * - E)."""
    if cfg.get("layers_block_type"):
        return cfg["layers_block_type"]
    return [NEMOTRON_PATTERN[c] for c in cfg["hybrid_override_pattern"]]


def json_float(v):
    """transformers 5 writes inf in config.json as {"__float__": "Infinity"} (hub configs: bare Infinity)."""
    return float(v["__float__"]) if isinstance(v, dict) else float(v)


def linear(W, name, x):
    """One Linear by full name (weight [out, in], optional bias)."""
    out = x @ W[name + ".weight"].T
    return out + W[name + ".bias"] if name + ".bias" in W else out


def mamba2_mixer(cfg, W, P, h):
    """Mamba-2 mixer (NemotronHMamba2Mixer) as the plain recurrence, token by token."""
    T = h.shape[0]
    nh, hd, N = cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"]
    G, K = cfg["n_groups"], cfg["conv_kernel"]
    I = nh * hd
    conv_dim = I + 2 * G * N
    z, xbc, dt = linear(W, P + "mixer.in_proj", h).split([I, conv_dim, nh], -1)  # in_proj bias iff use_bias
    # causal depthwise conv1d over time, per channel c: sum_j w[c, j] * xbc[t - (K-1) + j, c] (+ bias), then SiLU
    w = W[P + "mixer.conv1d.weight"][:, 0, :]  # [conv_dim, K]
    padded = torch.cat([torch.zeros(K - 1, conv_dim, dtype=h.dtype), xbc])
    conv = sum(padded[j:j + T] * w[:, j] for j in range(K))
    if P + "mixer.conv1d.bias" in W:
        conv = conv + W[P + "mixer.conv1d.bias"]
    x, B, C = F.silu(conv).split([I, G * N, G * N], -1)
    x, B, C = x.view(T, nh, hd), B.view(T, G, N), C.view(T, G, N)
    group = torch.arange(nh) // (nh // G)  # head -> its B/C group
    B, C = B[:, group], C[:, group]  # [T, nh, N]
    # dt clamped to time_step_limit (vLLM / mamba_ssm kernels; default (0, inf)). transformers' torch prefill clamps
    # to (time_step_min, inf) instead: these fixtures set time_step_min 0.0 so both agree.
    lo, hi = (json_float(v) for v in cfg.get("time_step_limit", [0.0, math.inf]))
    dt = F.softplus(dt + W[P + "mixer.dt_bias"]).clamp(lo, hi)  # [T, nh]
    A = -torch.exp(W[P + "mixer.A_log"])  # [nh]
    D = W[P + "mixer.D"]
    S = torch.zeros(nh, hd, N, dtype=h.dtype)
    y = torch.empty(T, nh, hd, dtype=h.dtype)
    for t in range(T):
        S = S * torch.exp(dt[t] * A)[:, None, None] + (dt[t][:, None] * x[t])[:, :, None] * B[t][:, None, :]
        y[t] = (S * C[t][:, None, :]).sum(-1) + D[:, None] * x[t]
    # gated RMSNorm (NemotronHRMSNormGated, norm_before_gate false): (y * silu(z)) normalised per group of I/G
    g = (y.reshape(T, I) * F.silu(z)).view(T, G, I // G)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + cfg["layer_norm_epsilon"])
    return linear(W, P + "mixer.out_proj", g.reshape(T, I) * W[P + "mixer.norm.weight"])


def nemotron_forward(cfg, W, ids, stats):
    """NemotronHForCausalLM: x = x + mixer(norm(x)) per block; hub names (backbone.*)."""
    T = len(ids)
    eps = cfg["layer_norm_epsilon"]
    H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    E = num_experts(cfg)

    def relu2_mlp(x, prefix):  # down(relu(up(x))^2), optional biases (mlp_bias)
        return linear(W, prefix + "down_proj", F.relu(linear(W, prefix + "up_proj", x)) ** 2)

    x = W["backbone.embeddings.weight"][ids]
    for layer, kind in enumerate(nemotron_block_types(cfg)):
        P = f"backbone.layers.{layer}."
        h = rms_norm(x, W[P + "norm.weight"], eps)
        if kind == "linear_attention":
            m = mamba2_mixer(cfg, W, P, h)
        elif kind == "full_attention":  # no RoPE, no biases, GQA, scale head_dim**-0.5, causal
            q = (h @ W[P + "mixer.q_proj.weight"].T).view(T, H, hd).transpose(0, 1)
            k = (h @ W[P + "mixer.k_proj.weight"].T).view(T, KV, hd).transpose(0, 1).repeat_interleave(H // KV, 0)
            v = (h @ W[P + "mixer.v_proj.weight"].T).view(T, KV, hd).transpose(0, 1).repeat_interleave(H // KV, 0)
            scores = (q @ k.transpose(1, 2)) * hd**-0.5
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            m = (scores.softmax(-1) @ v).transpose(0, 1).reshape(T, H * hd) @ W[P + "mixer.o_proj.weight"].T
        elif kind == "mlp":
            m = relu2_mlp(h, P + "mixer.")
        elif kind == "moe":  # DeepSeek-V3 routing on h; non-gated relu2 experts, optionally in a latent space
            top_i, weights = deepseek_router(cfg, h, P + "mixer.gate.", W)
            latent = cfg.get("moe_latent_size") is not None
            hl = linear(W, P + "mixer.fc1_latent_proj", h) if latent else h
            routed = torch.zeros_like(hl)
            for e in range(E):
                rows, slot = (top_i == e).nonzero(as_tuple=True)
                routed.index_add_(0, rows, relu2_mlp(hl[rows], f"{P}mixer.experts.{e}.") * weights[rows, slot, None])
            if latent:
                routed = linear(W, P + "mixer.fc2_latent_proj", routed)
            m = routed + relu2_mlp(h, P + "mixer.shared_experts.")
            stats.setdefault("expert_tokens", {})[str(layer)] = torch.bincount(top_i.flatten(), minlength=E).tolist()
        else:
            raise ValueError(kind)
        x = x + m
    x = rms_norm(x, W["backbone.norm_f.weight"], eps)
    return x @ W.get("lm_head.weight", W["backbone.embeddings.weight"]).T


# ---------------------------------------------------------------------------------------------- forward


def forward(cfg, W, ids, stats=None):
    """Logits [T, vocab]; MoE routing statistics go to `stats` (expert_tokens, swiglu_clamp_hits)."""
    stats = {} if stats is None else stats
    if cfg["model_type"] == "nemotron_h":
        return nemotron_forward(cfg, W, ids, stats)
    T = len(ids)
    pos = torch.arange(T)
    mt = cfg["model_type"]
    gemma, olmo2, granite = mt == "gemma3_text", mt == "olmo2", mt == "granite"
    mla = mt == "deepseek_v3"
    stats = {} if stats is None else stats
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    rope = rope_params_by_layer_type(cfg)
    types = layer_types(cfg)

    def norm(x, name):
        return rms_norm(x, W[name], eps, zero_centred=gemma)

    x = W["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * math.sqrt(cfg["hidden_size"])
    if granite:
        x = x * cfg["embedding_multiplier"]
    if gemma:
        scale = cfg["query_pre_attn_scalar"] ** -0.5
    elif granite:
        scale = cfg["attention_multiplier"]
    elif mla:  # qk_head_dim**-0.5, times yarn mscale(factor, mscale_all_dim)**2 (DeepseekV3Attention.scaling)
        scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
        rp = rope["all"]
        if rp["rope_type"] != "default" and rp.get("mscale_all_dim"):
            m = 1.0 if rp["factor"] <= 1 else 0.1 * rp["mscale_all_dim"] * math.log(rp["factor"]) + 1.0
            scale *= m * m
    else:
        scale = hd**-0.5
    resid_mult = cfg.get("residual_multiplier", 1.0) if granite else 1.0

    def act(z):
        return F.gelu(z, approximate="tanh") if gemma else F.silu(z)

    for layer in range(cfg["num_hidden_layers"]):
        P = f"model.layers.{layer}."

        def lin(h, name):
            out = h @ W[P + name + ".weight"].T
            return out + W[P + name + ".bias"] if P + name + ".bias" in W else out

        lt = types[layer]
        inv, af, rot_dim = rope_inv_freq(cfg, rope.get(lt, rope.get("all")), T)

        # --- attention
        h = x if olmo2 else norm(x, P + "input_layernorm.weight")  # OLMo 2 has no pre-norm
        if mla:  # DeepSeek multi-head latent attention
            dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
            if cfg.get("q_lora_rank"):  # q_a_layernorm / kv_a_layernorm: eps 1e-6 always (not rms_norm_eps)
                q = lin(rms_norm(lin(h, "self_attn.q_a_proj"), W[P + "self_attn.q_a_layernorm.weight"], 1e-6),
                        "self_attn.q_b_proj")
            else:
                q = lin(h, "self_attn.q_proj")
            q_nope, q_rot = q.view(T, H, dn + dr).transpose(0, 1).split([dn, dr], -1)
            latent, k_rot = lin(h, "self_attn.kv_a_proj_with_mqa").split([cfg["kv_lora_rank"], dr], -1)
            latent = rms_norm(latent, W[P + "self_attn.kv_a_layernorm.weight"], 1e-6)
            k_nope, v = lin(latent, "self_attn.kv_b_proj").view(T, H, dn + dv).transpose(0, 1).split([dn, dv], -1)
            if cfg.get("rope_interleave", True):
                q_rot, k_rot = apply_rope_interleaved(q_rot, inv, af, pos), apply_rope_interleaved(k_rot, inv, af, pos)
            else:
                q_rot, k_rot = apply_rope(q_rot, inv, af, rot_dim, pos), apply_rope(k_rot, inv, af, rot_dim, pos)
            q = torch.cat([q_nope, q_rot], -1)
            k = torch.cat([k_nope, k_rot[None].expand(H, T, dr)], -1)  # one rope key shared by all heads
        elif P + "self_attn.qkv_proj.weight" in W:  # Phi-3 fused [q; k; v]
            q, k, v = lin(h, "self_attn.qkv_proj").split([H * hd, KV * hd, KV * hd], -1)
        else:
            q, k, v = lin(h, "self_attn.q_proj"), lin(h, "self_attn.k_proj"), lin(h, "self_attn.v_proj")
        if not mla:
            if olmo2:  # q_norm/k_norm over the whole projection, before the head split
                q = rms_norm(q, W[P + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, W[P + "self_attn.k_norm.weight"], eps)
            q = q.view(T, H, hd).transpose(0, 1)
            k = k.view(T, KV, hd).transpose(0, 1)
            v = v.view(T, KV, hd).transpose(0, 1)
            if not olmo2 and P + "self_attn.q_norm.weight" in W:  # Qwen3 / Gemma 3: per head, over head_dim
                q = norm(q, P + "self_attn.q_norm.weight")
                k = norm(k, P + "self_attn.k_norm.weight")
            q = apply_rope(q, inv, af, rot_dim, pos)
            k = apply_rope(k, inv, af, rot_dim, pos)
            k = k.repeat_interleave(H // KV, 0)  # GQA: query head j uses kv head j // (H/KV)
            v = v.repeat_interleave(H // KV, 0)
        scores = q @ k.transpose(1, 2) * scale
        mask = pos[None, :] <= pos[:, None]
        if lt == "sliding_attention":  # keys k with q - window < k <= q
            mask &= pos[None, :] > pos[:, None] - cfg["sliding_window"]
        scores = scores.masked_fill(~mask, float("-inf"))
        if P + "self_attn.sinks" in W:  # gpt-oss: one extra logit per head in the softmax, then dropped
            sinks = W[P + "self_attn.sinks"][:, None, None].expand(H, T, 1)
            attn = torch.cat([scores, sinks], -1).softmax(-1)[..., :-1] @ v
        else:
            attn = scores.softmax(-1) @ v
        a = lin(attn.transpose(0, 1).reshape(T, -1), "self_attn.o_proj")
        if gemma or olmo2:
            a = norm(a, P + "post_attention_layernorm.weight")
        x = x + a * resid_mult

        # --- MLP
        if olmo2:
            h = x
        elif gemma:
            h = norm(x, P + "pre_feedforward_layernorm.weight")
        else:
            h = norm(x, P + "post_attention_layernorm.weight")  # Llama naming: the pre-MLP norm
        if is_moe_layer(cfg, layer):
            m = moe_block(cfg, W, P, h, stats, layer)
        else:
            if P + "mlp.gate_up_proj.weight" in W:  # Phi-3 fused [gate; up]
                gate, up = lin(h, "mlp.gate_up_proj").chunk(2, -1)
            else:
                gate, up = lin(h, "mlp.gate_proj"), lin(h, "mlp.up_proj")
            m = lin(act(gate) * up, "mlp.down_proj")
        if gemma or olmo2:
            m = norm(m, P + "post_feedforward_layernorm.weight")
        x = x + m * resid_mult

    x = norm(x, "model.norm.weight")
    logits = x @ W.get("lm_head.weight", W["model.embed_tokens.weight"]).T  # tied: embed_tokens
    if granite:
        logits = logits / cfg["logits_scaling"]
    if cfg.get("final_logit_softcapping") or cfg.get("attn_logit_softcapping"):
        raise NotImplementedError("logit softcapping is not exercised by these cases")
    return logits


# ------------------------------------------------------------------------------------------------ check


def check_format(d):
    with safe_open(os.path.join(d, "reference.safetensors"), "pt") as f:
        meta = {k: (f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()}
    T, P = meta["input_ids"][1][0], meta["positions"][1][0]
    assert meta["input_ids"] == ("I32", [T]), meta["input_ids"]
    assert meta["positions"] == ("I32", [P]), meta["positions"]
    assert meta["logits"][0] == "F32" and meta["logits"][1][0] == P, meta["logits"]
    assert meta["nll"] == ("F32", [T - 1]), meta["nll"]
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        for k in f.keys():
            assert f.get_slice(k).get_dtype() == "BF16", k


def check_case(root, case):
    d = os.path.join(root, case)
    check_format(d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "reference.json")) as f:
        meta = json.load(f)
    W = {k: v.double() for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    ref = load_file(os.path.join(d, "reference.safetensors"))
    ids = ref["input_ids"].long()
    T = len(ids)
    assert T == meta["T"]

    stats = {}
    logits = forward(cfg, W, ids, stats)
    err = (logits[ref["positions"].long()] - ref["logits"].double()).abs().max().item()
    nll = -logits.log_softmax(-1)[:-1].gather(1, ids[1:, None]).squeeze(1)
    nll_err = (nll - ref["nll"].double()).abs().max().item()
    ppl = math.exp(nll.mean().item())
    ppl_err = abs(ppl - meta["ppl"]) / meta["ppl"]

    rope = rope_params_by_layer_type(cfg) if cfg["model_type"] != "nemotron_h" else {}  # Nemotron-H: no RoPE
    rope_err = 0.0
    for key, val in ref.items():
        if key.startswith("rope_inv_freq"):
            lt = key[len("rope_inv_freq_"):] or "all"
            inv, af, _ = rope_inv_freq(cfg, rope[lt], T)
            rope_err = max(rope_err, ((inv - val.double()).abs() / inv).max().item())
            rope_err = max(rope_err, abs(af - ref[key.replace("inv_freq", "attention_scaling")].item()))
    moe = ""
    if "expert_tokens" in meta or stats:  # the routing must match transformers' token for token
        if stats.get("expert_tokens") != meta.get("expert_tokens"):
            raise AssertionError(f"{case}: expert tokens {stats.get('expert_tokens')} != {meta.get('expert_tokens')}")
        for layer, c in stats.get("swiglu_clamp_hits", {}).items():
            want = meta["swiglu_clamp_hits"][layer]
            if any(c[key] != want[key] for key in c):
                raise AssertionError(f"{case}: layer {layer} clamp hits {c} != {want}")
        moe = f"  experts ok ({len(stats['expert_tokens'])} MoE layers)"
    print(f"{case:22s} logits {err:.2e}  nll {nll_err:.2e}  rope {rope_err:.1e}  ppl {ppl:.4f} (ref {meta['ppl']:.4f})"
          f"{moe}")
    return max(err, nll_err, rope_err, ppl_err)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.normpath(os.path.join(here, "..", "..", "tests", "data", "conformance"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", default=default)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = sorted(c for c in os.listdir(args.dir) if os.path.isfile(os.path.join(args.dir, c, "reference.json")))
    if not cases:
        sys.exit(f"no cases in {args.dir}")
    worst = max(check_case(args.dir, c) for c in cases)
    if worst > args.tol:
        sys.exit(f"FAILED: worst error {worst:.3g} > tol {args.tol:g}")
    print(f"{len(cases)} cases agree with the independent float64 implementation (worst {worst:.2e} <= {args.tol:g})")


if __name__ == "__main__":
    main()
