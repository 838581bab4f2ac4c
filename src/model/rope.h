// Rotary position embedding settings as config.json states them, in both layouts that
// transformers writes (4.x: top-level `rope_theta` + `rope_scaling`; 5.x: `rope_parameters`,
// possibly nested per layer type), and the inverse frequencies each type computes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace qf {

// freq_factors: llama.cpp's `rope_freqs` tensor (what convert_hf_to_gguf writes for llama3):
// each inverse frequency of plain RoPE divided by its own factor. No config.json states it; the
// GGUF loader sets it.
enum class RopeType : uint8_t { default_, linear, dynamic, llama3, yarn, longrope, freq_factors };

std::string_view rope_type_name(RopeType t);

struct RopeSpec {
  RopeType type = RopeType::default_;
  double theta = 10000.0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;  // head_dim * partial_rotary_factor, even; the first rotary_dim
                           // elements of each head are rotated (rotate-half within them)
  double factor = 1.0;     // linear, dynamic, llama3, yarn, longrope
  int64_t original_max_position_embeddings = 0;  // llama3, yarn, longrope
  int64_t max_position_embeddings = 0;           // dynamic: the length scaling starts from
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  bool truncate = true;                                  // yarn
  double attention_factor = 1.0;  // yarn, longrope: multiplies cos and sin
  std::vector<double> short_factor, long_factor;  // longrope, rotary_dim / 2 each
  std::vector<float> freq_factors;                // freq_factors, rotary_dim / 2

  // True when the frequencies depend on the length of the sequence run (dynamic, longrope):
  // transformers recomputes them from max(position) + 1 of each forward call.
  bool depends_on_length() const {
    return type == RopeType::dynamic || type == RopeType::longrope;
  }

  // The rotary_dim / 2 inverse frequencies for a forward call whose last position is
  // seq_len - 1, computed in float32 in the order transformers' modeling_rope_utils does.
  std::vector<float> inv_freq(int64_t seq_len) const;

  // llama3 only: the rotary_dim / 2 divisors of plain RoPE's inverse frequencies that
  // convert_hf_to_gguf writes as `rope_freqs.weight` (computed in float32 in its order: 1 for
  // short wavelengths, `factor` for long ones, the smoothed blend between).
  std::vector<float> llama3_freq_factors() const;

  // A one-line description for summaries, e.g. "llama3 (factor 8, theta 500000)".
  std::string describe() const;
};

// Reads the RoPE settings of one layer type from config.json.
// `params`: the rope parameters object of that layer type (transformers-5 `rope_parameters`, or a
// 4.x `rope_scaling` merged over top-level `rope_theta`), or null for plain RoPE with
// `default_theta`. `head_dim`, `partial_rotary_factor` and `max_position_embeddings` come from the
// config. Throws qf::Error naming `label` and the field for a type or value it cannot compute.
RopeSpec parse_rope(const nlohmann::json& params, double default_theta, int64_t head_dim,
                    double partial_rotary_factor, int64_t max_position_embeddings,
                    const std::string& label);

}  // namespace qf
