// Nemotron-H / Nemotron 3 (`model_type: nemotron_h`, NemotronHForCausalLM): hybrid layers of
// four kinds from `hybrid_override_pattern` / `layers_block_type` (M Mamba2, * attention
// without positional encoding, - ReLU² MLP, E MoE with sigmoid group routing, non-gated ReLU²
// experts, a shared expert and optional latent projections), as transformers 5.24 computes
// them (../shared/specs/moe-hybrid.md §3). Internal to model/: Architecture::from_config calls it.
#pragma once

#include "model/architecture.h"

#include <nlohmann/json.hpp>

#include <string>

namespace qf {

inline constexpr std::string_view kNemotronHModelType = "nemotron_h";
inline constexpr std::string_view kNemotronHArchitecture = "NemotronHForCausalLM";

// Throws qf::Error starting with `label` naming the field: an unknown pattern character or
// layer type, n_groups not dividing the Mamba heads, a zero chunk size, an activation or a
// setting whose math qforge does not compute (or that transformers and vLLM compute
// differently: attention_bias, sliding_window, n_shared_experts other than 1).
Architecture nemotron_h_architecture(const nlohmann::json& config, const std::string& label);

}  // namespace qf
