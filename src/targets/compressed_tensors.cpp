// The compressed-tensors format (vLLM, SGLang, HF transformers): `nvfp4-pack-quantized`,
// `mxfp4-pack-quantized`, `float-quantized` (FP8), `pack-quantized` (INT4) and `int-quantized`
// (INT8 channel weights with static per-tensor INT8 inputs, llm-compressor's W8A8), with the
// `quantization_config` that llm-compressor writes (shared/specs/engine-formats.md §2).
// Both directions: the Exporter writes it, the TargetReader reads it back.
#include "core/convert.h"
#include "targets/exporter.h"
#include "targets/reader.h"

#include "core/error.h"
#include "formats/int4.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <iterator>
#include <cstring>

namespace qf {
namespace {

// The compressed-tensors release whose config layout this mirrors.
constexpr const char* kCompressedTensorsVersion = "0.12.2";

// llm-compressor lists only Linear modules in `ignore` (the embedding is no Linear, so it is
// never a target and never named there).
// A gpt-oss expert's gate_up_proj is written as gate_proj and up_proj (gpt_oss_gate_and_up), so
// an unquantized one is two ignored Linears.
// A module name in `ignore` / `targets`. transformers loads Nemotron-H with its hub prefix
// `backbone.` renamed to `model.` and matches these lists against its own names (a plain name it
// cannot find is looked up as a submodule and the load fails); vLLM renames backbone. to model.
// too. A regex accepting either prefix (matched as Python's re.match) serves every reader.
std::string ct_module_name(const std::string& m) {
  constexpr std::string_view hub = "backbone.";
  if (!m.starts_with(hub)) return m;
  std::string rx = "re:(backbone|model)\\.";
  for (char c : std::string_view(m).substr(hub.size())) {
    if (c == '.') rx += '\\';
    rx += c;
  }
  return rx + "$";
}

std::vector<std::string> ct_ignore(std::vector<std::string> modules) {
  // The embedding is not a Linear: llm-compressor does not list it.
  std::erase(modules, std::string("model.embed_tokens"));
  std::erase(modules, std::string("backbone.embeddings"));
  std::vector<std::string> out;
  const std::string gate_up = ".gate_up_proj";
  for (std::string& m : modules) {
    if (m.find(".experts.") != std::string::npos && m.size() > gate_up.size() &&
        m.compare(m.size() - gate_up.size(), gate_up.size(), gate_up) == 0) {
      const std::string prefix = m.substr(0, m.size() - gate_up.size() + 1);
      out.push_back(ct_module_name(prefix + "gate_proj"));
      out.push_back(ct_module_name(prefix + "up_proj"));
    } else {
      out.push_back(ct_module_name(m));
    }
  }
  return out;
}

// llm-compressor linearises gpt-oss experts (modeling/moe/gpt_oss.py, GptOssExpertMLP): each
// expert becomes gate_proj (the even rows of gate_up_proj [2I, H]), up_proj (the odd rows) and
// down_proj, Linears of their own, and saves them so. A row's codes and block scales do not
// depend on the other rows, and llm-compressor gives gate and up one tensor scale (its fused
// gate/up global scale), as quantizing gate_up as one Linear does.
std::pair<ExportedLinear, ExportedLinear> gpt_oss_gate_and_up(const ExportedLinear& l) {
  const std::string prefix = l.module.substr(0, l.module.rfind('.') + 1);
  ExportedLinear gate = l, up = l;
  gate.module = prefix + "gate_proj";
  up.module = prefix + "up_proj";
  gate.rows = up.rows = l.rows / 2;
  gate.fused_expert = up.fused_expert = FusedExpert::none;
  return {gate, up};
}

std::string_view ct_format_name(Format format) {
  switch (format) {
    case Format::nvfp4: return "nvfp4-pack-quantized";
    case Format::mxfp4: return "mxfp4-pack-quantized";
    case Format::fp8: return "float-quantized";
    case Format::int4: return "pack-quantized";
    case Format::int8: return "int-quantized";
  }
  return "";
}

// torch dtype spelling used in `scale_dtype`.
std::string_view torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "torch.float32";
    case DType::BF16: return "torch.bfloat16";
    case DType::F16: return "torch.float16";
    case DType::F8_E4M3: return "torch.float8_e4m3fn";
    case DType::U8: return "torch.uint8";
    default: return "torch.float32";
  }
}

// FP8 and INT8 weights keep the name "weight"; packed codes are "weight_packed".
std::string weight_leaf(Format format) {
  return format == Format::fp8 || format == Format::int8 ? "weight" : "weight_packed";
}

// NVFP4 inputs store the reciprocal global scale under their own name (engine-formats §2.2).
std::string input_scale_leaf(ActQuant act) {
  return act == ActQuant::nvfp4 ? "input_global_scale" : "input_scale";
}

// "model.layers.3.self_attn.k_proj" -> "model.layers.3.self_attn" (CT keeps KV scales on the
// attention module).
std::string attention_prefix(const std::string& module) {
  const auto dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(0, dot);
}

// The FP8 KV-cache scale written with projection `proj`: "...self_attn.k_scale".
std::string kv_scale_tensor(const std::string& proj, char which) {
  return attention_prefix(proj) + "." + which + "_scale";
}

// Scale dtype of FP8 and INT4 scales: the model's own dtype, as llm-compressor stores them.
DType float_scale_dtype(DType model_dtype) {
  return (model_dtype == DType::BF16 || model_dtype == DType::F16) ? model_dtype : DType::F32;
}

class CompressedTensorsExporter final : public Exporter {
 public:
  ExportFormat kind() const override { return ExportFormat::compressed_tensors; }

  std::string unsupported_reason(const ExportedLinear& l) const override {
    if (l.format == Format::int4 && l.cols % 8 != 0)
      return "INT4 packs 8 values per int32 and in_features is not a multiple of 8";
    return unsupported_reason_extra(l);
  }

  DType scale_dtype(const ExportedLinear& l) const override {
    return float_scale_dtype(l.model_dtype);
  }

  ExportNumerics numerics() const override { return ExportNumerics::llm_compressor; }

  std::string unsupported_reason_extra(const ExportedLinear& l) const {
    if (l.pre_quant_scale) return "compressed-tensors has no pre_quant_scale";
    return {};
  }

  std::vector<TensorSpec> linear_specs(const ExportedLinear& l) const override {
    if (l.fused_expert == FusedExpert::gate_up) {
      const auto [gate, up] = gpt_oss_gate_and_up(l);
      std::vector<TensorSpec> specs = linear_specs(gate);
      for (TensorSpec& t : linear_specs(up)) specs.push_back(std::move(t));
      return specs;
    }
    std::vector<TensorSpec> specs = weight_specs(l);
    const std::string& m = l.module;
    const DType sd = float_scale_dtype(l.model_dtype);
    const std::string input = m + "." + input_scale_leaf(l.act);
    if (l.act == ActQuant::nvfp4) specs.push_back({input, DType::F32, {1}});
    else if (l.act != ActQuant::none) specs.push_back({input, sd, {1}});
    if (l.kv_scale) specs.push_back(kv_scale_spec(l));
    return specs;
  }

  TensorSpec kv_scale_spec(const ExportedLinear& l) const override {
    return {kv_scale_tensor(l.module, l.kv_scale), float_scale_dtype(l.model_dtype), {1}};
  }
  std::vector<std::byte> kv_scale_data(const ExportedLinear& l, float scale) const override {
    return scales_to_bytes({scale}, float_scale_dtype(l.model_dtype));
  }

  std::vector<std::vector<std::byte>> linear_data(const ExportedLinear& l, const QuantizedTensor& q,
                                                  const LinearExtras& x) const override {
    if (l.fused_expert == FusedExpert::gate_up) {
      const auto [gate, up] = gpt_oss_gate_and_up(l);
      auto out = linear_data(gate, every_other_row(q, 0), x);
      for (auto& t : linear_data(up, every_other_row(q, 1), x)) out.push_back(std::move(t));
      return out;
    }
    std::vector<std::vector<std::byte>> out = weight_data(l, q);
    const DType sd = float_scale_dtype(l.model_dtype);
    if (l.act == ActQuant::nvfp4) {
      // The reciprocal of ModelOpt's input_scale (engine-formats §2.2).
      const float g = 1.0f / x.input_scale;
      out.push_back(copy_bytes(&g, sizeof(float)));
    } else if (l.act != ActQuant::none) {
      out.push_back(scales_to_bytes({x.input_scale}, sd));
    }
    if (l.kv_scale) out.push_back(kv_scale_data(l, x.kv_scale));
    return out;
  }

 private:
  std::vector<TensorSpec> weight_specs(const ExportedLinear& l) const {
    const std::string& m = l.module;
    const std::string codes = m + "." + weight_leaf(l.format);
    switch (l.format) {
      case Format::nvfp4:
        return {{codes, DType::U8, {l.rows, l.cols / 2}},
                {m + ".weight_scale", DType::F8_E4M3, {l.rows, l.cols / l.block}},
                {m + ".weight_global_scale", DType::F32, {1}}};
      case Format::mxfp4:
        return {{codes, DType::U8, {l.rows, l.cols / 2}},
                {m + ".weight_scale", DType::U8, {l.rows, l.cols / l.block}}};
      case Format::fp8:
        return {{codes, DType::F8_E4M3, {l.rows, l.cols}},
                {m + ".weight_scale", float_scale_dtype(l.model_dtype),
                 l.per_tensor ? Shape{1} : Shape{l.rows, 1}}};
      case Format::int8:
        return {{codes, DType::I8, {l.rows, l.cols}},
                {m + ".weight_scale", float_scale_dtype(l.model_dtype), {l.rows, 1}}};
      case Format::int4:
        return {{codes, DType::I32, {l.rows, l.cols / 8}},
                {m + ".weight_scale", float_scale_dtype(l.model_dtype), {l.rows, l.cols / l.block}},
                {m + ".weight_shape", DType::I64, {2}}};
    }
    return {};
  }

  std::vector<std::vector<std::byte>> weight_data(const ExportedLinear& l,
                                                  const QuantizedTensor& q) const {
    std::vector<std::vector<std::byte>> out;
    switch (l.format) {
      case Format::nvfp4: {
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(copy_bytes(q.block_scales.data(), q.block_scales.size()));
        // compressed-tensors stores the reciprocal of ModelOpt's weight_scale_2 (§2.2), as
        // llm-compressor's rounding computed it where that made the codes (formats/
        // llm_compressor_rtn.h), else the float32 reciprocal.
        const float global = q.global_scale_reciprocal > 0.f ? q.global_scale_reciprocal
                                                             : 1.0f / q.global_scale;
        out.push_back(copy_bytes(&global, sizeof(float)));
        break;
      }
      case Format::mxfp4:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(copy_bytes(q.block_scales.data(), q.block_scales.size()));
        break;
      case Format::fp8:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        if (l.per_tensor)
          out.push_back(scales_to_bytes({q.scales.at(0)}, float_scale_dtype(l.model_dtype)));
        else
          out.push_back(scales_to_bytes(q.scales, float_scale_dtype(l.model_dtype)));
        break;
      case Format::int8:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(scales_to_bytes(q.scales, float_scale_dtype(l.model_dtype)));
        break;
      case Format::int4: {
        std::vector<std::byte> packed(size_t(q.rows * (q.cols / 8)) * sizeof(int32_t));
        int4_pack_int32(reinterpret_cast<const int8_t*>(q.codes.data()), q.rows, q.cols,
                        reinterpret_cast<int32_t*>(packed.data()));
        out.push_back(std::move(packed));
        out.push_back(scales_to_bytes(q.scales, float_scale_dtype(l.model_dtype)));
        const int64_t shape[2] = {q.rows, q.cols};
        out.push_back(copy_bytes(shape, sizeof(shape)));
        break;
      }
    }
    return out;
  }

 public:
  nlohmann::ordered_json quantization_config(const QuantizationSummary& s) const override {
    if (!s.mixed.empty()) return mixed_quantization_config(s);
    // QuantizationArgs.model_dump() with sort_keys, as llm-compressor writes it.
    nlohmann::json w;
    w["actorder"] = nullptr;
    w["block_structure"] = nullptr;
    w["dynamic"] = false;
    w["observer"] = "memoryless_minmax";  // llm-compressor 0.14, every weight scheme
    w["observer_kwargs"] = nlohmann::json::object();
    w["symmetric"] = true;
    w["zp_dtype"] = nullptr;
    switch (s.format) {
      case Format::nvfp4:
        w["num_bits"] = 4;
        w["type"] = "float";
        w["strategy"] = "tensor_group";
        w["group_size"] = s.block;
        w["scale_dtype"] = torch_dtype_name(DType::F8_E4M3);
        break;
      case Format::mxfp4:
        w["num_bits"] = 4;
        w["type"] = "float";
        w["strategy"] = "group";
        w["group_size"] = s.block;
        w["scale_dtype"] = torch_dtype_name(DType::U8);
        break;
      case Format::fp8:
        w["num_bits"] = 8;
        w["type"] = "float";
        w["strategy"] = s.per_tensor ? "tensor" : "channel";
        w["group_size"] = nullptr;
        w["scale_dtype"] = nullptr;
        break;
      case Format::int8:
        w["num_bits"] = 8;
        w["type"] = "int";
        w["strategy"] = "channel";
        w["group_size"] = nullptr;
        w["scale_dtype"] = nullptr;
        break;
      case Format::int4:
        w["num_bits"] = 4;
        w["type"] = "int";
        // Per channel: strategy "channel", weight_scale [out, 1], no group_size (§2).
        w["strategy"] = s.channel ? "channel" : "group";
        w["group_size"] = s.channel ? nlohmann::json(nullptr) : nlohmann::json(s.block);
        w["scale_dtype"] = nullptr;
        break;
    }
    nlohmann::json group;
    group["format"] = ct_format_name(s.format);
    group["input_activations"] = nullptr;
    if (s.act != ActQuant::none) {
      nlohmann::json a = w;
      if (s.act == ActQuant::nvfp4) {
        a["dynamic"] = "local";  // per-16 scales dynamic, the global scale static (§2.1)
        a["observer"] = "static_minmax";
      } else {
        a["num_bits"] = 8;
        a["type"] = s.act == ActQuant::fp8 ? "float" : "int";
        a["strategy"] = "tensor";
        a["group_size"] = nullptr;
        a["scale_dtype"] = nullptr;
        a["dynamic"] = false;
        a["observer"] = "static_minmax";  // llm-compressor 0.14 for static activations
      }
      group["input_activations"] = a;
    }
    group["output_activations"] = nullptr;
    group["targets"] = {"Linear"};
    group["weights"] = w;
    nlohmann::json c;
    c["config_groups"]["group_0"] = group;
    c["format"] = ct_format_name(s.format);
    c["global_compression_ratio"] = nullptr;
    c["ignore"] = ct_ignore(s.excluded_modules);
    c["kv_cache_scheme"] = nullptr;
    if (s.kv_fp8) {
      nlohmann::json kv;
      kv["actorder"] = nullptr;
      kv["block_structure"] = nullptr;
      kv["dynamic"] = false;
      kv["group_size"] = nullptr;
      kv["num_bits"] = 8;
      kv["observer"] = nullptr;  // as llm-compressor 0.14 writes it
      kv["observer_kwargs"] = nlohmann::json::object();
      kv["scale_dtype"] = nullptr;
      kv["strategy"] = "tensor";
      kv["symmetric"] = true;
      kv["type"] = "float";
      kv["zp_dtype"] = nullptr;
      c["kv_cache_scheme"] = kv;
    }
    c["quant_method"] = "compressed-tensors";
    c["quantization_status"] = "compressed";
    c["sparsity_config"] = nlohmann::json::object();
    c["transform_config"] = nlohmann::json::object();
    c["version"] = kCompressedTensorsVersion;
    return nlohmann::ordered_json::parse(c.dump());  // keeps the sorted key order
  }

 private:
  // One config group per (format, block), each with its own "format" and targets = its module
  // names (sorted); the global format is "mixed-precision". INT4 layers with one scale per
  // channel (block == in_features) share one "channel" group whatever their in_features; if
  // that leaves a single group, the single-format config is written.
  nlohmann::ordered_json mixed_quantization_config(const QuantizationSummary& s) const {
    using Key = std::tuple<Format, int, ActQuant>;
    std::vector<std::pair<Key, std::vector<std::string>>> groups;
    for (const auto& l : s.mixed) {
      const bool channel = l.format == Format::int4 && l.block == l.cols;
      const Key key{l.format, channel ? kInt4ChannelGroup : l.block, l.act};
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == key; });
      if (it == groups.end()) {
        groups.emplace_back(key, std::vector<std::string>{});
        it = std::prev(groups.end());
      }
      it->second.push_back(l.module);
    }
    auto group_summary = [&](const Key& key) {
      QuantizationSummary one = s;
      one.format = std::get<0>(key);
      one.channel = std::get<1>(key) == kInt4ChannelGroup;
      one.block = one.channel ? 0 : std::get<1>(key);
      one.act = std::get<2>(key);
      one.per_tensor = one.act == ActQuant::fp8;
      one.mixed.clear();
      return one;
    };
    if (groups.size() == 1) return quantization_config(group_summary(groups[0].first));
    nlohmann::json c;
    for (size_t i = 0; i < groups.size(); ++i) {
      const QuantizationSummary one = group_summary(groups[i].first);
      nlohmann::json single = quantization_config(one);
      if (i == 0) c = single;
      nlohmann::json group = single["config_groups"]["group_0"];
      auto targets = groups[i].second;
      std::sort(targets.begin(), targets.end());
      for (std::string& t : targets) t = ct_module_name(t);
      group["targets"] = targets;
      c["config_groups"][fmt::format("group_{}", i)] = group;
    }
    c["format"] = "mixed-precision";
    return nlohmann::ordered_json::parse(c.dump());
  }
};

// Reading: config.json's quantization_config (quant_method "compressed-tensors") and the tensor
// names written above.
class CompressedTensorsReader final : public TargetReader {
  // A config group's input quantization (none without input_activations).
  static ActQuant input_activations(const nlohmann::json& g, const std::string& where_group,
                                    const std::string& label) {
    if (!g.contains("input_activations") || !g["input_activations"].is_object())
      return ActQuant::none;
    const auto& ia = g["input_activations"];
    const int bits = json_int_member(ia, "num_bits", where_group + ".input_activations").value_or(0);
    const std::string type = json_string_member(ia, "type", where_group + ".input_activations");
    if (bits == 4 && type == "float") return ActQuant::nvfp4;
    if (bits == 8 && type == "float") return ActQuant::fp8;
    if (bits == 8 && type == "int") return ActQuant::int8;
    fail("{}: config.json: unsupported compressed-tensors input_activations", label);
  }

 public:
  std::string_view name() const override { return "compressed-tensors"; }
  std::string_view display_name() const override { return "compressed-tensors"; }

  std::optional<QuantScheme> read_scheme(const Checkpoint& ck,
                                         const std::string& label) const override {
    const auto& cfg = ck.config();
    if (!cfg.contains("quantization_config") || !cfg["quantization_config"].is_object())
      return std::nullopt;
    const nlohmann::json& qc = cfg["quantization_config"];
    const std::string where = label + ": config.json: quantization_config";
    if (json_string_member(qc, "quant_method", where) != "compressed-tensors") return std::nullopt;
    QuantScheme s;
    s.algo = json_string_member(qc, "format", where);
    s.format = format_of(s.algo);
    if (s.algo == "mixed-precision" && qc.contains("config_groups") &&
        qc["config_groups"].is_object()) {
      // One group per format, each naming its modules in targets.
      for (const auto& [name, g] : qc["config_groups"].items()) {
        const std::string where_group = fmt::format("{}.config_groups['{}']", where, name);
        const auto f = format_of(json_string_member(g, "format", where_group));
        if (!f) fail("{}: config.json: config group '{}': unsupported format", label, name);
        const ActQuant act = input_activations(g, where_group, label);
        const int group = g.contains("weights")
                              ? json_int_member(g["weights"], "group_size", where_group + ".weights")
                                    .value_or(0)
                              : 0;
        for (const auto& t : json_string_list(g.contains("targets") ? g["targets"] : nlohmann::json())) {
          if (t.starts_with("re:"))
            s.layer_patterns.emplace_back(NamePattern(t, NamePattern::Anchor::prefix, where_group),
                                          QuantScheme::Layer{*f, group, act, ""});
          else
            s.layers[t] = {*f, group, act, ""};
        }
        if (!s.format) s.format = f;
      }
      s.mixed = true;
      s.ignore = ignore_patterns(qc.value("ignore", nlohmann::json::array()), where + ".ignore");
      if (qc.contains("kv_cache_scheme") && qc["kv_cache_scheme"].is_object()) s.kv_fp8 = true;
      return s;
    }
    if (!s.format)
      fail("{}: config.json: unsupported compressed-tensors format '{}'", label, s.algo);
    s.ignore = ignore_patterns(qc.value("ignore", nlohmann::json::array()), where + ".ignore");
    if (qc.contains("config_groups") && qc["config_groups"].is_object())
      for (const auto& [name, g] : qc["config_groups"].items()) {
        const std::string where_group = fmt::format("{}.config_groups['{}']", where, name);
        if (g.contains("weights"))
          if (const auto gs = json_int_member(g["weights"], "group_size", where_group + ".weights"))
            s.group = *gs;
        if (const ActQuant act = input_activations(g, where_group, label); act != ActQuant::none)
          s.act = act;
      }
    if (qc.contains("kv_cache_scheme") && qc["kv_cache_scheme"].is_object()) s.kv_fp8 = true;
    return s;
  }

  StoredLinear stored_linear(const std::string& m, const QuantScheme& s) const override {
    StoredLinear st;
    st.weight = m + "." + weight_leaf(*s.format);
    st.weight_scale = m + ".weight_scale";
    switch (*s.format) {
      case Format::nvfp4:
        st.layout = WeightFormat::nvfp4;
        st.global_scale = m + ".weight_global_scale";
        st.global_scale_stored = ScaleStored::reciprocal;
        break;
      case Format::mxfp4: st.layout = WeightFormat::mxfp4; break;
      case Format::fp8: st.layout = WeightFormat::fp8; break;
      case Format::int8: st.layout = WeightFormat::int8; break;
      case Format::int4: st.layout = WeightFormat::int4_packed32; break;
    }
    if (s.act != ActQuant::none) {
      st.input_scale = m + "." + input_scale_leaf(s.act);
      if (s.act == ActQuant::nvfp4) st.input_scale_stored = ScaleStored::reciprocal;
    }
    return st;
  }

  std::string kv_scale_name(const std::string& proj, char which) const override {
    return kv_scale_tensor(proj, which);
  }

  std::vector<std::string> packed_weight_leaves() const override { return {"weight_packed"}; }
  std::vector<std::string> quantized_marker_leaves() const override {
    return {"weight_scale", "weight_packed"};
  }
  // compressed-tensors folds smoothing into the weights and norms; it stores no input scale.
  std::vector<std::string> pre_scale_leaves() const override { return {}; }
  std::vector<std::string> companion_leaves() const override {
    return {"weight_scale", "weight_global_scale", "weight_shape", "input_scale",
            "input_global_scale"};
  }

  std::optional<std::string> algo_name(const nlohmann::json& q) const override {
    if (q.contains("format") && q["format"].is_string()) return q["format"].get<std::string>();
    return std::nullopt;
  }

 private:
  // The weight format of a `format` string, as ct_format_name writes it.
  static std::optional<Format> format_of(const std::string& f) {
    for (Format format : {Format::nvfp4, Format::mxfp4, Format::fp8, Format::int4, Format::int8})
      if (f == ct_format_name(format)) return format;
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<Exporter> make_compressed_tensors_exporter() {
  return std::make_unique<CompressedTensorsExporter>();
}

const TargetReader& compressed_tensors_reader() {
  static const CompressedTensorsReader reader;
  return reader;
}

}  // namespace qf
