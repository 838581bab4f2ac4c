// RoPE inverse frequencies per type. Each follows transformers' modeling_rope_utils.py step by
// step in float32 (python scalars meet float32 tensors there, so every tensor op rounds to
// float32), which keeps the engine's logits within ~1e-7 of transformers'.
#include "model/rope.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace qf {
namespace {

double number(const nlohmann::json& p, const char* key, double fallback, const std::string& label) {
  if (!p.contains(key) || p[key].is_null()) return fallback;
  if (!p[key].is_number()) fail("{}: rope field '{}' is not a number", label, key);
  const double v = p[key].get<double>();
  if (!std::isfinite(v)) fail("{}: rope field '{}' is not finite", label, key);
  return v;
}

std::vector<double> factors(const nlohmann::json& p, const char* key, size_t n,
                            const std::string& label) {
  if (!p.contains(key) || !p[key].is_array())
    fail("{}: longrope needs '{}' as a list of {} numbers", label, key, n);
  std::vector<double> out;
  for (const auto& v : p[key]) {
    if (!v.is_number() || !(v.get<double>() > 0))
      fail("{}: rope field '{}' holds a value that is not a positive number", label, key);
    out.push_back(v.get<double>());
  }
  if (out.size() != n)
    fail("{}: rope field '{}' has {} values, expected rotary_dim / 2 = {}", label, key, out.size(), n);
  return out;
}

// 1 / theta^(2i/dim) in float32, i < dim/2: `base ** (arange(0, dim, 2).float() / dim)`.
std::vector<float> base_powers(double theta, int64_t dim) {
  std::vector<float> out(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float e = float(2 * i) / float(dim);
    out[size_t(i)] = std::pow(float(theta), e);
  }
  return out;
}

}  // namespace

std::string_view rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::default_: return "default";
    case RopeType::linear: return "linear";
    case RopeType::dynamic: return "dynamic";
    case RopeType::llama3: return "llama3";
    case RopeType::yarn: return "yarn";
    case RopeType::longrope: return "longrope";
    case RopeType::freq_factors: return "freq_factors";
  }
  return "default";
}

std::vector<float> RopeSpec::inv_freq(int64_t seq_len) const {
  const int64_t dim = rotary_dim, half = rotary_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  switch (type) {
    case RopeType::default_:
    case RopeType::linear:
    case RopeType::llama3:
    case RopeType::freq_factors: {
      const auto pw = base_powers(theta, dim);
      for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / pw[size_t(i)];
      if (type == RopeType::linear)
        for (float& f : inv) f /= float(factor);
      if (type == RopeType::freq_factors) {
        if (int64_t(freq_factors.size()) != half)
          fail("rope: {} frequency factors for {} rotary dimensions", freq_factors.size(), dim);
        for (int64_t i = 0; i < half; ++i) inv[size_t(i)] /= freq_factors[size_t(i)];
      }
      if (type == RopeType::llama3) {
        const float f = float(factor), lo = float(low_freq_factor);
        const float old_len = float(original_max_position_embeddings);
        const float low_wavelen = float(double(original_max_position_embeddings) / low_freq_factor);
        const float high_wavelen = float(double(original_max_position_embeddings) / high_freq_factor);
        for (float& v : inv) {
          const float wavelen = float(2 * std::numbers::pi) / v;
          const float scaled = wavelen > low_wavelen ? v / f : v;
          if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            const float smooth = (old_len / wavelen - lo) / float(high_freq_factor - low_freq_factor);
            v = (1.0f - smooth) * scaled / f + smooth * scaled;
          } else {
            v = scaled;
          }
        }
      }
      break;
    }
    case RopeType::dynamic: {
      // base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2)) with
      // seq_len = max(max(position) + 1, max_position_embeddings): seq_len is a tensor there, so
      // every step rounds to float32.
      const float len = float(std::max(seq_len, max_position_embeddings));
      float ratio = float(factor) * len;
      ratio = ratio / float(max_position_embeddings);
      ratio = ratio - float(factor - 1.0);
      const float base = float(theta) * std::pow(ratio, float(double(dim) / double(dim - 2)));
      const auto pw = base_powers(base, dim);
      for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / pw[size_t(i)];
      break;
    }
    case RopeType::yarn: {
      const auto pw = base_powers(theta, dim);
      auto correction_dim = [&](double rotations) {
        return (double(dim) * std::log(double(original_max_position_embeddings) /
                                       (rotations * 2 * std::numbers::pi))) /
               (2 * std::log(theta));
      };
      double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
      if (truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, double(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        const float extrapolation = 1.0f / pw[size_t(i)];
        const float interpolation = 1.0f / (float(factor) * pw[size_t(i)]);
        float ramp = (float(i) - float(low)) / float(high - low);
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        const float extra_factor = 1.0f - ramp;
        inv[size_t(i)] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
      }
      break;
    }
    case RopeType::longrope: {
      const auto& ext = seq_len > original_max_position_embeddings ? long_factor : short_factor;
      const auto pw = base_powers(theta, dim);
      for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / (float(ext[size_t(i)]) * pw[size_t(i)]);
      break;
    }
  }
  return inv;
}

std::vector<float> RopeSpec::llama3_freq_factors() const {
  if (type != RopeType::llama3) fail("rope: {} has no llama3 frequency factors", rope_type_name(type));
  RopeSpec plain = *this;
  plain.type = RopeType::default_;
  const std::vector<float> freqs = plain.inv_freq(0);
  // convert_hf_to_gguf's loop over float32 tensors: every step rounds to float32.
  const float f = float(factor), lo = float(low_freq_factor);
  const float old_len = float(original_max_position_embeddings);
  const double low_wavelen = double(original_max_position_embeddings) / low_freq_factor;
  const double high_wavelen = double(original_max_position_embeddings) / high_freq_factor;
  const float span = float(high_freq_factor - low_freq_factor);
  std::vector<float> out;
  for (const float freq : freqs) {
    const float wavelen = float(2 * std::numbers::pi) / freq;
    if (double(wavelen) < high_wavelen) {
      out.push_back(1.0f);
    } else if (double(wavelen) > low_wavelen) {
      out.push_back(f);
    } else {
      const float smooth = (old_len / wavelen - lo) / span;
      out.push_back(1.0f / ((1.0f - smooth) / f + smooth));
    }
  }
  return out;
}

std::string RopeSpec::describe() const {
  std::string s = fmt::format("{} (theta {}", rope_type_name(type), theta);
  if (type != RopeType::default_ && type != RopeType::freq_factors)
    s += fmt::format(", factor {}", factor);
  if (rotary_dim != head_dim) s += fmt::format(", rotary dims {}/{}", rotary_dim, head_dim);
  return s + ")";
}

RopeSpec parse_rope(const nlohmann::json& params, double default_theta, int64_t head_dim,
                    double partial_rotary_factor, int64_t max_position_embeddings,
                    const std::string& label) {
  RopeSpec r;
  r.head_dim = head_dim;
  r.max_position_embeddings = max_position_embeddings;
  const nlohmann::json p = params.is_object() ? params : nlohmann::json::object();
  if (!params.is_null() && !params.is_object()) fail("{}: rope parameters are not a JSON object", label);
  r.theta = number(p, "rope_theta", default_theta, label);
  if (!(r.theta > 1.0)) fail("{}: rope_theta {} must be greater than 1", label, r.theta);
  const double prf = number(p, "partial_rotary_factor", partial_rotary_factor, label);
  if (!(prf > 0.0 && prf <= 1.0))
    fail("{}: partial_rotary_factor {} must be in (0, 1]", label, prf);
  r.rotary_dim = int64_t(double(head_dim) * prf);
  if (r.rotary_dim < 2 || r.rotary_dim % 2 != 0)
    fail("{}: rotary dimension {} (head_dim {} x partial_rotary_factor {}) must be even and at "
         "least 2", label, r.rotary_dim, head_dim, prf);

  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (p.contains(key) && p[key].is_string()) {
      type = p[key].get<std::string>();
      break;
    }
  const std::string where = fmt::format("{}: rope type '{}'", label, type);
  auto original_max = [&]() {
    const double v = number(p, "original_max_position_embeddings", double(max_position_embeddings), label);
    if (!(v >= 2 && v <= 1e12)) fail("{}: original_max_position_embeddings {} is out of range", where, v);
    return int64_t(v);
  };
  auto need_factor = [&](bool required) {
    if (required && (!p.contains("factor") || p["factor"].is_null()))
      fail("{}: field 'factor' missing", where);
    const double f = number(p, "factor", 1.0, label);
    if (!(f >= 1.0)) fail("{}: factor {} must be at least 1", where, f);
    return f;
  };
  if (type == "default") {
    r.type = RopeType::default_;
  } else if (type == "linear") {
    r.type = RopeType::linear;
    r.factor = need_factor(true);
  } else if (type == "dynamic") {
    r.type = RopeType::dynamic;
    r.factor = need_factor(true);
    if (r.rotary_dim <= 2) fail("{}: needs a rotary dimension above 2", where);
  } else if (type == "llama3") {
    r.type = RopeType::llama3;
    r.factor = need_factor(true);
    r.low_freq_factor = number(p, "low_freq_factor", std::nan(""), label);
    r.high_freq_factor = number(p, "high_freq_factor", std::nan(""), label);
    if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor))
      fail("{}: needs low_freq_factor > 0 and high_freq_factor > low_freq_factor", where);
    r.original_max_position_embeddings = original_max();
  } else if (type == "yarn") {
    r.type = RopeType::yarn;
    r.original_max_position_embeddings = original_max();
    r.factor = p.contains("factor") && !p["factor"].is_null()
                   ? need_factor(true)
                   : double(max_position_embeddings) / double(r.original_max_position_embeddings);
    r.beta_fast = number(p, "beta_fast", 0.0, label);
    r.beta_slow = number(p, "beta_slow", 0.0, label);
    if (r.beta_fast == 0) r.beta_fast = 32;  // transformers: `get("beta_fast") or 32`
    if (r.beta_slow == 0) r.beta_slow = 1;
    if (!(r.beta_fast > 0) || !(r.beta_slow > 0)) fail("{}: beta_fast/beta_slow must be positive", where);
    if (p.contains("truncate") && !p["truncate"].is_null()) {
      if (!p["truncate"].is_boolean()) fail("{}: field 'truncate' is not a boolean", where);
      r.truncate = p["truncate"].get<bool>();
    }
    auto mscale_of = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    const double mscale = number(p, "mscale", 0.0, label);
    const double mscale_all_dim = number(p, "mscale_all_dim", 0.0, label);
    if (p.contains("attention_factor") && !p["attention_factor"].is_null())
      r.attention_factor = number(p, "attention_factor", 1.0, label);
    else if (mscale != 0 && mscale_all_dim != 0)
      r.attention_factor = mscale_of(r.factor, mscale) / mscale_of(r.factor, mscale_all_dim);
    else
      r.attention_factor = mscale_of(r.factor, 1.0);
  } else if (type == "longrope") {
    r.type = RopeType::longrope;
    r.original_max_position_embeddings = original_max();
    r.short_factor = factors(p, "short_factor", size_t(r.rotary_dim / 2), label);
    r.long_factor = factors(p, "long_factor", size_t(r.rotary_dim / 2), label);
    r.factor = p.contains("factor") && !p["factor"].is_null()
                   ? need_factor(true)
                   : double(max_position_embeddings) / double(r.original_max_position_embeddings);
    if (p.contains("attention_factor") && !p["attention_factor"].is_null())
      r.attention_factor = number(p, "attention_factor", 1.0, label);
    else
      r.attention_factor =
          r.factor <= 1.0 ? 1.0
                          : std::sqrt(1 + std::log(r.factor) /
                                              std::log(double(r.original_max_position_embeddings)));
  } else {
    fail("{}: unsupported rope type '{}' (supported: default, linear, dynamic, llama3, yarn, "
         "longrope)", label, type);
  }
  if (!(r.attention_factor > 0)) fail("{}: attention_factor must be positive", where);
  return r;
}

}  // namespace qf
