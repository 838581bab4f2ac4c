// Two on-disk layouts of a layer's routed experts, one view. Hub checkpoints store one tensor
// per expert Linear (`mlp.experts.7.gate_proj.weight`); transformers 5 keeps them fused in
// memory and some checkpoints are written that way: `<block>experts.gate_up_proj` [E, 2I, H]
// (each expert's gate rows, then its up rows) and `<block>experts.down_proj` [E, H, I]. The
// fused tensors are presented as the per-expert Linears the layer spec names (views of the same
// bytes, nothing copied), so the engine, the quantizer and the writers see one layout, and an
// export is written with the per-expert names engines load.
// gpt-oss stores its experts fused and transposed (x @ W): `experts.gate_up_proj` [E, H, 2I]
// (gate/up interleaved along 2I), `gate_up_proj_bias` [E, 2I], `down_proj` [E, I, H],
// `down_proj_bias` [E, H]. Those become per-expert parts `experts.N.gate_up_proj.weight`
// [2I, H] / `down_proj.weight` [H, I] marked transposed (read_tensor makes the [out, in] copy,
// one expert at a time) and per-expert `.bias` views. Its original release stores them in
// MXFP4 (`gate_up_proj_blocks` / `_scales`, out-major): views `experts.N.gate_up_proj.weight`
// (codes) and `.weight_scale` (E8M0), read by targets/gpt_oss_mxfp4.cpp. ModelOpt's exports
// keep the fused names: NVFP4 `gate_up_proj` [E, H/2, 2I] codes with `_weight_scale`
// [E, H/16, 2I], FP8 `gate_up_proj` [E, H, 2I] E4M3; both become transposed per-expert parts,
// and the one `_weight_scale_2` / `_weight_scale` / `_input_scale` of all experts is found
// under each expert's name (Checkpoint::share_tensor).
#pragma once

#include "io/checkpoint.h"
#include "model/architecture.h"

#include <filesystem>
#include <memory>

namespace qf {

// Splits every fused expert tensor of `a`'s MoE layers found in `ck` (for Mixtral also under
// the `mlp.` block name transformers 5 uses). Throws qf::Error naming the tensor when its
// shape is not [num_experts, 2 * expert_intermediate, hidden] / [num_experts, hidden,
// expert_intermediate] (gpt-oss: the shapes above), or when a layer mixes layouts.
void split_fused_experts(Checkpoint& ck, const Architecture& a);

// Architecture::from_config for `ck`'s config.json, with the options its tensors imply
// (ArchitectureOptions: gpt-oss experts stored linearised, `mlp.experts.0.gate_proj.*`).
// `label` starts error messages (the config's path).
Architecture checkpoint_architecture(const Checkpoint& ck, const std::string& label);

// Checkpoint::open, then split_fused_experts with the architecture of its config.json when
// it is a supported model (else the checkpoint as stored: callers report the architecture).
std::shared_ptr<const Checkpoint> open_model_checkpoint(const std::filesystem::path& dir);

}  // namespace qf
