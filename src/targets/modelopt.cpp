// The ModelOpt unified Hugging Face checkpoint format (vLLM, SGLang, TensorRT-LLM): tensor names
// and dtypes of shared/specs/engine-formats.md §1.2/§1.6 and modelopt-nvfp4.md §3–§4, with
// `hf_quant_config.json` (nested form) and `config.json["quantization_config"]` (flat form).
// Both directions: the Exporter writes it, the TargetReader reads it back.
#include "targets/exporter.h"
#include "targets/reader.h"

#include "core/error.h"
#include "formats/int4.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <cstring>

namespace qf {
namespace {

constexpr const char* kProducerName = "qforge";
constexpr const char* kProducerVersion = "0.1.0";

// ModelOpt keeps a layer's FP8 KV-cache scales on its k_proj / v_proj ("...k_proj.k_scale").
std::string kv_scale_tensor(const std::string& proj, char which) {
  return proj + "." + which + "_scale";
}

// The per-layer config ModelOpt writes for each weight-only format (modelopt-nvfp4.md §4.6).
nlohmann::ordered_json layer_config(const QuantizationSummary& s) {
  const Format format = s.format;
  const int block = s.block;
  nlohmann::ordered_json c;
  switch (format) {
    case Format::nvfp4:
      if (s.awq) {
        c["quant_algo"] = "NVFP4_AWQ";
        c["group_size"] = block;
        c["has_zero_point"] = false;
        c["pre_quant_scale"] = true;
      } else {
        c["quant_algo"] = s.act == ActQuant::nvfp4 ? "NVFP4" : "W4A16_NVFP4";
        c["group_size"] = block;
      }
      break;
    case Format::mxfp4:
      // ModelOpt has no named weight-only MXFP4 algo and emits its internal name lowercase.
      c["quant_algo"] = "mxfp4";
      break;
    case Format::fp8:
      c["quant_algo"] = s.per_tensor ? "FP8" : "FP8_PER_CHANNEL_PER_TOKEN";
      break;
    case Format::int8:
      // int8_sq / int8_wo (§4.6); neither gets group_size or other fields.
      c["quant_algo"] = s.act == ActQuant::int8 ? "W8A8_SQ_PER_CHANNEL" : "W8A16";
      break;
    case Format::int4:
      c["quant_algo"] = "W4A16_AWQ";
      c["group_size"] = block;
      c["has_zero_point"] = false;
      c["pre_quant_scale"] = true;
      break;
  }
  return c;
}

class ModelOptExporter final : public Exporter {
 public:
  ExportFormat kind() const override { return ExportFormat::modelopt; }

  std::string unsupported_reason(const ExportedLinear& l) const override {
    if (l.format == Format::int4 && l.rows % 2 != 0)
      return "INT4 packs pairs of output rows and out_features is odd";
    // gpt-oss experts are written as ModelOpt's _QuantGptOssExperts exports them: one tensor per
    // projection, with one quantizer, so one tensor scale: NVFP4 (modelopt-nvfp4.md §3.2) and
    // FP8 per tensor (checked against ModelOpt 0.47's export); no per-expert pre_quant_scale.
    if (l.fused_expert != FusedExpert::none && l.format != Format::nvfp4 &&
        !(l.format == Format::fp8 && l.per_tensor))
      return "ModelOpt's fused gpt-oss expert tensors are NVFP4 or FP8 per tensor only";
    if (l.fused_expert != FusedExpert::none && l.pre_quant_scale)
      return "ModelOpt's fused gpt-oss expert tensors hold no per-expert pre_quant_scale";
    return {};
  }

  bool fuses_experts() const override { return true; }

  // _QuantGptOssExperts (GptOssExperts stores W as [E, in, out]): transposed to [E, out, in],
  // quantized with one weight quantizer, transposed back, so the codes are [E, in/2, out] (a
  // byte still holds two consecutive inputs of one output) and the block scales [E, in/16, out];
  // one weight_scale_2 and one input_scale for all experts, named `<attr>_<leaf>`
  // (modelopt-nvfp4.md §3.2, §4.2; moe-hybrid.md §2.2).
  std::vector<TensorSpec> fused_expert_specs(const std::string& name,
                                             const std::vector<ExportedLinear>& ls) const override {
    const ExportedLinear& l = ls.at(0);
    const int64_t e = int64_t(ls.size());
    std::vector<TensorSpec> specs;
    if (l.format == Format::fp8)  // the [E, in, out] weight in E4M3 and one scale
      specs = {{name, DType::F8_E4M3, {e, l.cols, l.rows}}, {name + "_weight_scale", DType::F32, {}}};
    else
      specs = {{name, DType::U8, {e, l.cols / 2, l.rows}},
               {name + "_weight_scale", DType::F8_E4M3, {e, l.cols / l.block, l.rows}},
               {name + "_weight_scale_2", DType::F32, {}}};
    if (l.act != ActQuant::none) specs.push_back({name + "_input_scale", DType::F32, {}});
    return specs;
  }

  std::vector<std::vector<std::byte>> fused_expert_data(const std::vector<ExportedLinear>& ls,
                                                        const std::vector<QuantizedTensor>& qs,
                                                        const LinearExtras& x) const override {
    const ExportedLinear& l = ls.at(0);
    const bool fp8 = l.format == Format::fp8;
    const int64_t rows = l.rows, code_cols = fp8 ? l.cols : l.cols / 2;
    const int64_t scale_cols = fp8 ? 0 : l.cols / l.block;
    std::vector<std::byte> codes(size_t(int64_t(qs.size()) * rows * code_cols));
    std::vector<std::byte> scales(size_t(int64_t(qs.size()) * rows * scale_cols));
    for (size_t e = 0; e < qs.size(); ++e) {
      const QuantizedTensor& q = qs[e];
      const bool same_scale = fp8 ? !q.scales.empty() && q.scales[0] == qs[0].scales.at(0)
                                  : q.global_scale == qs[0].global_scale;
      if (q.format != l.format || q.rows != rows || q.cols != l.cols || !same_scale)
        fail("{}: the experts of one fused tensor must have one format, shape and tensor scale",
             ls[e].module);
      std::byte* c = codes.data() + int64_t(e) * rows * code_cols;
      std::byte* s = scales.data() + int64_t(e) * rows * scale_cols;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < code_cols; ++j)
          c[j * rows + r] = std::byte(q.codes[size_t(r * code_cols + j)]);
        for (int64_t j = 0; j < scale_cols; ++j)
          s[j * rows + r] = std::byte(q.block_scales[size_t(r * scale_cols + j)]);
      }
    }
    std::vector<std::vector<std::byte>> out;
    out.push_back(std::move(codes));
    if (fp8) {
      out.push_back(copy_bytes(qs.at(0).scales.data(), sizeof(float)));
    } else {
      out.push_back(std::move(scales));
      out.push_back(copy_bytes(&qs.at(0).global_scale, sizeof(float)));
    }
    if (l.act != ActQuant::none) out.push_back(copy_bytes(&x.input_scale, sizeof(float)));
    return out;
  }

  // pre_quant_scale is a buffer of the model's dtype in ModelOpt, for SmoothQuant and AWQ alike
  // (specs modelopt-nvfp4 §5.4: "stored in weight dtype").
  bool stores_pre_quant_scale() const override { return true; }
  ExportNumerics numerics() const override { return ExportNumerics::modelopt; }
  DType pre_quant_scale_dtype(const ExportedLinear& l) const override {
    return is_quantizable_float(l.model_dtype) ? l.model_dtype : DType::F32;
  }

  std::vector<TensorSpec> linear_specs(const ExportedLinear& l) const override {
    std::vector<TensorSpec> specs = weight_specs(l);
    const std::string& m = l.module;
    if (l.act != ActQuant::none) specs.push_back({m + ".input_scale", DType::F32, {}});
    if (l.pre_quant_scale)
      specs.push_back({m + ".pre_quant_scale", pre_quant_scale_dtype(l), {l.cols}});
    if (l.kv_scale) specs.push_back(kv_scale_spec(l));
    return specs;
  }

  TensorSpec kv_scale_spec(const ExportedLinear& l) const override {
    return {kv_scale_tensor(l.module, l.kv_scale), DType::F32, {}};
  }
  std::vector<std::byte> kv_scale_data(const ExportedLinear&, float scale) const override {
    return copy_bytes(&scale, sizeof(float));
  }

  std::vector<std::vector<std::byte>> linear_data(const ExportedLinear& l, const QuantizedTensor& q,
                                                  const LinearExtras& x) const override {
    std::vector<std::vector<std::byte>> out = weight_data(l, q);
    if (l.act != ActQuant::none) out.push_back(copy_bytes(&x.input_scale, sizeof(float)));
    if (l.pre_quant_scale)
      out.push_back(scales_to_bytes(x.pre_quant_scale, pre_quant_scale_dtype(l)));
    if (l.kv_scale) out.push_back(kv_scale_data(l, x.kv_scale));
    return out;
  }

 private:
  std::vector<TensorSpec> weight_specs(const ExportedLinear& l) const {
    const std::string& m = l.module;
    switch (l.format) {
      case Format::nvfp4:
        return {{m + ".weight", DType::U8, {l.rows, l.cols / 2}},
                {m + ".weight_scale", DType::F8_E4M3, {l.rows, l.cols / l.block}},
                {m + ".weight_scale_2", DType::F32, {}}};
      case Format::mxfp4:
        return {{m + ".weight", DType::U8, {l.rows, l.cols / 2}},
                {m + ".weight_scale", DType::U8, {l.rows, l.cols / l.block}}};
      case Format::fp8:
        if (l.per_tensor)
          return {{m + ".weight", DType::F8_E4M3, {l.rows, l.cols}},
                  {m + ".weight_scale", DType::F32, {}}};
        return {{m + ".weight", DType::F8_E4M3, {l.rows, l.cols}},
                {m + ".weight_scale", DType::F32, {l.rows}}};
      case Format::int8:
        return {{m + ".weight", DType::I8, {l.rows, l.cols}},
                {m + ".weight_scale", DType::F32, {l.rows}}};
      case Format::int4:
        return {{m + ".weight", DType::U8, {l.rows / 2, l.cols}},
                {m + ".weight_scale", DType::F32, {l.rows, l.cols / l.block}}};
    }
    return {};
  }

  std::vector<std::vector<std::byte>> weight_data(const ExportedLinear& l,
                                                  const QuantizedTensor& q) const {
    std::vector<std::vector<std::byte>> out;
    switch (l.format) {
      case Format::nvfp4:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(copy_bytes(q.block_scales.data(), q.block_scales.size()));
        out.push_back(copy_bytes(&q.global_scale, sizeof(float)));
        break;
      case Format::mxfp4:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(copy_bytes(q.block_scales.data(), q.block_scales.size()));
        break;
      case Format::fp8:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        if (l.per_tensor) out.push_back(copy_bytes(q.scales.data(), sizeof(float)));
        else out.push_back(scales_to_bytes(q.scales, DType::F32));
        break;
      case Format::int8:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(scales_to_bytes(q.scales, DType::F32));
        break;
      case Format::int4: {
        std::vector<std::byte> packed(size_t(q.rows / 2 * q.cols));
        int4_pack_row_pairs(reinterpret_cast<const int8_t*>(q.codes.data()), q.rows, q.cols,
                            reinterpret_cast<uint8_t*>(packed.data()));
        out.push_back(std::move(packed));
        out.push_back(scales_to_bytes(q.scales, DType::F32));
        break;
      }
    }
    return out;
  }

 public:
  // config.json: the flat form vLLM reads first (engine-formats.md §1.1, modelopt-nvfp4.md §4.7).
  nlohmann::ordered_json quantization_config(const QuantizationSummary& s) const override {
    if (!s.mixed.empty()) return mixed_quantization_config(s);
    nlohmann::ordered_json c;
    const auto layer = layer_config(s);
    // Only NVFP4, W4A16_NVFP4 and FP8 get config_groups (§4.7); AWQ variants do not.
    if (s.format == Format::nvfp4 && !s.awq) {
      nlohmann::ordered_json weights;
      weights["dynamic"] = false;
      weights["num_bits"] = 4;
      weights["type"] = "float";
      weights["group_size"] = s.block;
      if (s.act == ActQuant::nvfp4) c["config_groups"]["group_0"]["input_activations"] = weights;
      c["config_groups"]["group_0"]["weights"] = weights;
      c["config_groups"]["group_0"]["targets"] = {"Linear"};
    } else if (s.format == Format::fp8 && s.per_tensor) {
      nlohmann::ordered_json e;
      e["dynamic"] = false;
      e["num_bits"] = 8;
      e["type"] = "float";
      if (s.act == ActQuant::fp8) c["config_groups"]["group_0"]["input_activations"] = e;
      c["config_groups"]["group_0"]["weights"] = e;
      c["config_groups"]["group_0"]["targets"] = {"Linear"};
    }
    c["ignore"] = s.excluded_modules;
    // As ModelOpt: the flat form carries no group_size or other per-algo fields; engines take
    // them from config_groups (NVFP4) or from hf_quant_config.json.
    c["quant_algo"] = layer["quant_algo"];
    if (s.kv_fp8) c["kv_cache_scheme"] = {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}};
    c["producer"] = {{"name", kProducerName}, {"version", kProducerVersion}};
    c["quant_method"] = "modelopt";
    return c;
  }

  // hf_quant_config.json: the nested form TensorRT-LLM reads (modelopt-nvfp4.md §4.6).
  void write_extra_files(const QuantizationSummary& s,
                         const std::filesystem::path& out_dir) const override {
    nlohmann::ordered_json q;
    if (!s.mixed.empty()) {
      // MIXED_PRECISION (§4.6): quantized_layers, no exclude_modules; unquantized Linears are
      // simply absent from the map.
      q["quant_algo"] = "MIXED_PRECISION";
      q["kv_cache_quant_algo"] = s.kv_fp8 ? nlohmann::ordered_json("FP8") : nlohmann::ordered_json();
      q["quantized_layers"] = quantized_layers(s);
      nlohmann::ordered_json root;
      root["producer"] = {{"name", kProducerName}, {"version", kProducerVersion}};
      root["quantization"] = q;
      write_json_file(out_dir / "hf_quant_config.json", root);
      return;
    }
    const auto layer = layer_config(s);
    q["quant_algo"] = layer["quant_algo"];
    if (s.kv_fp8) q["kv_cache_quant_algo"] = "FP8";
    else q["kv_cache_quant_algo"] = nullptr;
    for (const auto& [key, value] : layer.items())
      if (key != "quant_algo") q[key] = value;
    q["exclude_modules"] = s.excluded_modules;
    nlohmann::ordered_json root;
    root["producer"] = {{"name", kProducerName}, {"version", kProducerVersion}};
    root["quantization"] = q;
    write_json_file(out_dir / "hf_quant_config.json", root);
  }

 private:
  // The summary of one layer of a mixed export, for layer_config.
  static QuantizationSummary layer_summary(const QuantizationSummary& s,
                                           const QuantizationSummary::Layer& l) {
    QuantizationSummary one = s;
    one.format = l.format;
    one.block = l.block;
    one.act = l.act;
    one.per_tensor = l.per_tensor;
    one.mixed.clear();
    return one;
  }

  static nlohmann::ordered_json quantized_layers(const QuantizationSummary& s) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& l : s.mixed) m[l.module] = layer_config(layer_summary(s, l));
    return m;
  }

  // The flat form of MIXED_PRECISION (§4.7): one config group per distinct layer config, in
  // order of first appearance, targets = its sorted module names; ignore = [].
  static nlohmann::ordered_json mixed_quantization_config(const QuantizationSummary& s) {
    std::vector<std::pair<nlohmann::ordered_json, std::vector<std::string>>> groups;
    for (const auto& l : s.mixed) {
      const auto layer = layer_config(layer_summary(s, l));
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.first == layer; });
      if (it == groups.end()) {
        groups.emplace_back(layer, std::vector<std::string>{});
        it = std::prev(groups.end());
      }
      it->second.push_back(l.module);
    }
    nlohmann::ordered_json c;
    c["config_groups"] = nlohmann::ordered_json::object();
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& layer = groups[i].first;
      const std::string algo = layer["quant_algo"].get<std::string>();
      nlohmann::ordered_json w;
      w["dynamic"] = false;
      const bool eight = algo.rfind("FP8", 0) == 0;
      w["num_bits"] = eight ? 8 : 4;
      w["type"] = algo == "W4A16_AWQ" ? "int" : "float";
      if (layer.contains("group_size")) w["group_size"] = layer["group_size"];
      else if (algo == "mxfp4") w["group_size"] = 32;
      auto targets = groups[i].second;
      std::sort(targets.begin(), targets.end());
      nlohmann::ordered_json g;
      // W4A4 NVFP4 and FP8 W8A8 layers: their inputs as the single-format config says them.
      if (algo == "NVFP4" || algo == "FP8") g["input_activations"] = w;
      g["weights"] = w;
      g["targets"] = targets;
      c["config_groups"][fmt::format("group_{}", i)] = g;
    }
    c["quantized_layers"] = quantized_layers(s);
    c["ignore"] = nlohmann::ordered_json::array();
    c["quant_algo"] = "MIXED_PRECISION";
    if (s.kv_fp8) c["kv_cache_scheme"] = {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}};
    c["producer"] = {{"name", kProducerName}, {"version", kProducerVersion}};
    c["quant_method"] = "modelopt";
    return c;
  }
};

// Reading: config.json's flat quantization_config or hf_quant_config.json's nested form, the
// tensor names written above.
class ModelOptReader final : public TargetReader {
 public:
  std::string_view name() const override { return "modelopt"; }
  std::string_view display_name() const override { return "ModelOpt"; }

  std::optional<QuantScheme> read_scheme(const Checkpoint& ck,
                                         const std::string& label) const override {
    const auto& cfg = ck.config();
    nlohmann::json qc;
    // Where the fields read below come from, for messages.
    std::string where = label + ": config.json: quantization_config";
    const std::string where_hf = label + ": hf_quant_config.json: quantization";
    if (cfg.contains("quantization_config") && cfg["quantization_config"].is_object())
      qc = cfg["quantization_config"];
    const auto hf_quant = ck.dir() / "hf_quant_config.json";
    if (qc.is_null() && std::filesystem::exists(hf_quant)) {
      // The nested form only.
      const auto j = read_json_file(hf_quant);
      if (j.contains("quantization") && j["quantization"].is_object()) {
        const auto& q = j["quantization"];
        where = where_hf;
        qc = nlohmann::json::object();
        qc["quant_method"] = "modelopt";
        qc["quant_algo"] = json_string_member(q, "quant_algo", where);
        qc["ignore"] = q.contains("exclude_modules") ? q["exclude_modules"] : nlohmann::json::array();
        if (q.contains("group_size")) qc["group_size"] = q["group_size"];
        if (q.contains("quantized_layers")) qc["quantized_layers"] = q["quantized_layers"];
      }
    }
    if (qc.is_null() || json_string_member(qc, "quant_method", where) != "modelopt")
      return std::nullopt;
    QuantScheme s;
    s.algo = json_string_member(qc, "quant_algo", where);
    s.format = format_of(s.algo);
    if (s.algo == "MIXED_PRECISION") {
      // quantized_layers: module -> {"quant_algo", ["group_size"]}, in either config file.
      nlohmann::json layers = qc.value("quantized_layers", nlohmann::json());
      if (!layers.is_object() && std::filesystem::exists(hf_quant)) {
        const auto j = read_json_file(hf_quant);
        if (j.contains("quantization") && j["quantization"].contains("quantized_layers"))
          layers = j["quantization"]["quantized_layers"];
      }
      if (!layers.is_object() || layers.empty())
        fail("{}: config.json: MIXED_PRECISION without a quantized_layers map", label);
      for (const auto& [module, lc] : layers.items()) {
        const std::string where_layer = fmt::format("{}.quantized_layers['{}']", where, module);
        const std::string algo = json_string_member(lc, "quant_algo", where_layer);
        const auto f = format_of(algo);
        // NVFP4 (W4A4) and FP8 (W8A8 per tensor) layers quantize their inputs too; AWQ and
        // SmoothQuant layers are not written mixed.
        if (!f || algo == "NVFP4_AWQ" || algo == "W8A8_SQ_PER_CHANNEL")
          fail("{}: config.json: quantized_layers['{}']: unsupported quant_algo '{}'", label, module,
               algo);
        const int group = json_int_member(lc, "group_size", where_layer).value_or(0);
        const ActQuant act = algo == "NVFP4" ? ActQuant::nvfp4
                             : algo == "FP8" ? ActQuant::fp8 : ActQuant::none;
        s.layers[module] = {*f, group, act, algo};
        if (!s.format) s.format = f;
      }
      s.mixed = true;
    } else if (s.algo == "W8A8_SQ_PER_CHANNEL") {
      s.act = ActQuant::int8;
    } else if (s.algo == "NVFP4" || s.algo == "NVFP4_AWQ") {
      s.act = ActQuant::nvfp4;  // NVFP4_AWQ without input_scale tensors runs weight-only
    } else if (s.algo == "FP8") {
      s.act = ActQuant::fp8;
    }
    if (qc.contains("kv_cache_scheme") && !qc["kv_cache_scheme"].is_null()) s.kv_fp8 = true;
    if (qc.contains("kv_cache_quant_algo") && qc["kv_cache_quant_algo"].is_string()) s.kv_fp8 = true;
    if (std::filesystem::exists(hf_quant)) {
      const auto j = read_json_file(hf_quant);
      if (j.contains("quantization") && j["quantization"].contains("kv_cache_quant_algo") &&
          j["quantization"]["kv_cache_quant_algo"].is_string())
        s.kv_fp8 = true;
    }
    if (!s.format) fail("{}: config.json: unsupported ModelOpt quant_algo '{}'", label, s.algo);
    s.ignore = ignore_patterns(qc.value("ignore", nlohmann::json::array()), where + ".ignore");
    s.group = json_int_member(qc, "group_size", where).value_or(0);
    // The group size of INT4 lives in hf_quant_config.json.
    if (s.group == 0 && std::filesystem::exists(hf_quant)) {
      const auto j = read_json_file(hf_quant);
      if (j.contains("quantization"))
        s.group = json_int_member(j["quantization"], "group_size", where_hf).value_or(0);
    }
    return s;
  }

  StoredLinear stored_linear(const std::string& m, const QuantScheme& s) const override {
    StoredLinear st;
    st.weight = m + ".weight";
    st.weight_scale = m + ".weight_scale";
    switch (*s.format) {
      case Format::nvfp4:
        st.layout = WeightFormat::nvfp4;
        st.global_scale = m + ".weight_scale_2";
        break;
      case Format::mxfp4: st.layout = WeightFormat::mxfp4; break;
      case Format::fp8: st.layout = WeightFormat::fp8; break;
      case Format::int8: st.layout = WeightFormat::int8; break;
      case Format::int4: st.layout = WeightFormat::int4_row_pairs; break;
    }
    if (s.act != ActQuant::none) {
      st.input_scale = m + ".input_scale";
      st.input_scale_optional = s.algo == "NVFP4_AWQ";
    }
    return st;
  }

  std::string kv_scale_name(const std::string& proj, char which) const override {
    return kv_scale_tensor(proj, which);
  }

  std::vector<std::string> packed_weight_leaves() const override { return {}; }
  std::vector<std::string> quantized_marker_leaves() const override { return {"weight_scale"}; }
  std::vector<std::string> pre_scale_leaves() const override { return {"pre_quant_scale"}; }
  std::vector<std::string> companion_leaves() const override {
    return {"weight_scale", "weight_scale_2", "input_scale", "pre_quant_scale"};
  }

  nlohmann::json declared_config(const std::filesystem::path& dir) const override {
    const auto hf_quant = dir / "hf_quant_config.json";
    return std::filesystem::exists(hf_quant) ? read_json_file(hf_quant) : nlohmann::json();
  }

  std::optional<std::string> algo_name(const nlohmann::json& q) const override {
    if (q.contains("quant_algo") && q["quant_algo"].is_string())
      return q["quant_algo"].get<std::string>();
    if (q.contains("quantization") && q["quantization"].is_object() &&
        q["quantization"].contains("quant_algo") && q["quantization"]["quant_algo"].is_string())
      return q["quantization"]["quant_algo"].get<std::string>();
    return std::nullopt;
  }

 private:
  // The weight format of a quant_algo, as layer_config writes it (and ModelOpt's aliases).
  static std::optional<Format> format_of(const std::string& algo) {
    if (algo == "W4A16_NVFP4" || algo == "NVFP4" || algo == "NVFP4_AWQ") return Format::nvfp4;
    if (algo == "mxfp4" || algo == "MXFP4" || algo == "W4A16_MXFP4") return Format::mxfp4;
    if (algo == "FP8_PER_CHANNEL_PER_TOKEN" || algo == "FP8") return Format::fp8;
    if (algo == "W4A16_AWQ" || algo == "INT4_AWQ" || algo == "W4A16") return Format::int4;
    if (algo == "W8A8_SQ_PER_CHANNEL") return Format::int8;  // SmoothQuant W8A8
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<Exporter> make_modelopt_exporter() { return std::make_unique<ModelOptExporter>(); }

const TargetReader& modelopt_reader() {
  static const ModelOptReader reader;
  return reader;
}

}  // namespace qf
