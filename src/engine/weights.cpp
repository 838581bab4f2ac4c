// Loading a checkpoint's weights for the engine: the quantization scheme from the configs, each
// Linear checked against it tensor by tensor, views into the mapped shards.
#include "engine/weights.h"

#include "core/error.h"
#include "core/numeric.h"
#include "formats/registry.h"

#include <fnmatch.h>
#include <fmt/format.h>

#include <map>
#include <optional>
#include <regex>

namespace qf {
namespace {

// What the configs say about quantized Linears.
struct QuantScheme {
  enum class Exporter { none, modelopt, compressed_tensors } exporter = Exporter::none;
  std::optional<Format> format;
  int group = 0;  // from the config, 0 if not given
  std::string algo;
  std::vector<std::string> ignore;
  ActQuant act = ActQuant::none;   // what the config says about Linear inputs
  bool kv_fp8 = false;             // FP8 KV cache with per-layer k/v scales

  // Mixed precision (ModelOpt MIXED_PRECISION quantized_layers, compressed-tensors groups
  // whose targets name modules): each listed module's format and group; unlisted modules stay
  // float. `format` then holds the first listed format (quantizes() is true).
  bool mixed = false;
  std::map<std::string, std::pair<Format, int>> layers;

  bool quantizes() const { return format.has_value(); }

  // The scheme of one module: itself, or for mixed precision that module's format and group
  // (no format when the module is not listed).
  QuantScheme for_module(const std::string& module) const {
    if (!mixed) return *this;
    QuantScheme one = *this;
    one.mixed = false;
    one.layers.clear();
    auto it = layers.find(module);
    if (it == layers.end()) {
      one.format.reset();
    } else {
      one.format = it->second.first;
      one.group = it->second.second;
    }
    return one;
  }

  bool ignored(const std::string& module) const {
    for (const auto& p : ignore) {
      if (p == module) return true;
      if (p.rfind("re:", 0) == 0) {
        try {
          if (std::regex_match(module, std::regex(p.substr(3)))) return true;
        } catch (const std::regex_error&) {
        }
      } else if (fnmatch(p.c_str(), module.c_str(), 0) == 0) {
        return true;
      }
    }
    return false;
  }
};

std::optional<Format> modelopt_format(const std::string& algo) {
  if (algo == "W4A16_NVFP4" || algo == "NVFP4" || algo == "NVFP4_AWQ") return Format::nvfp4;
  if (algo == "mxfp4" || algo == "MXFP4" || algo == "W4A16_MXFP4") return Format::mxfp4;
  if (algo == "FP8_PER_CHANNEL_PER_TOKEN" || algo == "FP8") return Format::fp8;
  if (algo == "W4A16_AWQ" || algo == "INT4_AWQ" || algo == "W4A16") return Format::int4;
  if (algo == "W8A8_SQ_PER_CHANNEL") return Format::int8;  // SmoothQuant W8A8
  return std::nullopt;
}

std::optional<Format> ct_format(const std::string& f) {
  if (f == "nvfp4-pack-quantized") return Format::nvfp4;
  if (f == "mxfp4-pack-quantized") return Format::mxfp4;
  if (f == "float-quantized") return Format::fp8;
  if (f == "pack-quantized") return Format::int4;
  if (f == "int-quantized") return Format::int8;  // INT8 channel weights (W8A8)
  return std::nullopt;
}

std::vector<std::string> string_list(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (j.is_array())
    for (const auto& e : j)
      if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

QuantScheme read_scheme(const Checkpoint& ck, const std::string& label) {
  QuantScheme s;
  const auto& cfg = ck.config();
  nlohmann::json qc;
  if (cfg.contains("quantization_config") && cfg["quantization_config"].is_object())
    qc = cfg["quantization_config"];
  const auto hf_quant = ck.dir() / "hf_quant_config.json";
  if (qc.is_null() && std::filesystem::exists(hf_quant)) {
    // The nested ModelOpt form only.
    const auto j = read_json_file(hf_quant);
    if (j.contains("quantization") && j["quantization"].is_object()) {
      const auto& q = j["quantization"];
      qc = nlohmann::json::object();
      qc["quant_method"] = "modelopt";
      qc["quant_algo"] = q.value("quant_algo", "");
      qc["ignore"] = q.contains("exclude_modules") ? q["exclude_modules"] : nlohmann::json::array();
      if (q.contains("group_size")) qc["group_size"] = q["group_size"];
      if (q.contains("quantized_layers")) qc["quantized_layers"] = q["quantized_layers"];
    }
  }
  if (qc.is_null()) return s;
  const std::string method = qc.value("quant_method", "");
  if (method == "modelopt") {
    s.exporter = QuantScheme::Exporter::modelopt;
    s.algo = qc.contains("quant_algo") && qc["quant_algo"].is_string()
                 ? qc["quant_algo"].get<std::string>() : "";
    s.format = modelopt_format(s.algo);
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
        const std::string algo = lc.is_object() ? lc.value("quant_algo", "") : "";
        const auto f = modelopt_format(algo);
        // Mixed checkpoints are weight-only here: activation-quantized algos are refused.
        if (!f || algo == "NVFP4" || algo == "FP8" || algo == "NVFP4_AWQ" ||
            algo == "W8A8_SQ_PER_CHANNEL")
          fail("{}: config.json: quantized_layers['{}']: unsupported quant_algo '{}'", label, module,
               algo);
        const int group = lc.contains("group_size") && lc["group_size"].is_number_integer()
                              ? lc["group_size"].get<int>() : 0;
        s.layers[module] = {*f, group};
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
    s.ignore = string_list(qc.value("ignore", nlohmann::json::array()));
    if (qc.contains("group_size") && qc["group_size"].is_number_integer())
      s.group = qc["group_size"].get<int>();
    // The group size of INT4 lives in hf_quant_config.json.
    if (s.group == 0 && std::filesystem::exists(hf_quant)) {
      const auto j = read_json_file(hf_quant);
      if (j.contains("quantization") && j["quantization"].contains("group_size") &&
          j["quantization"]["group_size"].is_number_integer())
        s.group = j["quantization"]["group_size"].get<int>();
    }
  } else if (method == "compressed-tensors") {
    s.exporter = QuantScheme::Exporter::compressed_tensors;
    s.algo = qc.value("format", "");
    s.format = ct_format(s.algo);
    if (s.algo == "mixed-precision" && qc.contains("config_groups") &&
        qc["config_groups"].is_object()) {
      // One group per format, each naming its modules in targets.
      for (const auto& [name, g] : qc["config_groups"].items()) {
        const auto f = ct_format(g.value("format", ""));
        if (!f) fail("{}: config.json: config group '{}': unsupported format", label, name);
        if (g.contains("input_activations") && !g["input_activations"].is_null())
          fail("{}: config.json: config group '{}': mixed precision with activation "
               "quantization is not supported", label, name);
        const int group = g.contains("weights") && g["weights"].contains("group_size") &&
                                  g["weights"]["group_size"].is_number_integer()
                              ? g["weights"]["group_size"].get<int>() : 0;
        for (const auto& t : string_list(g.value("targets", nlohmann::json::array())))
          s.layers[t] = {*f, group};
        if (!s.format) s.format = f;
      }
      s.mixed = true;
      s.ignore = string_list(qc.value("ignore", nlohmann::json::array()));
      if (qc.contains("kv_cache_scheme") && qc["kv_cache_scheme"].is_object()) s.kv_fp8 = true;
      return s;
    }
    if (!s.format)
      fail("{}: config.json: unsupported compressed-tensors format '{}'", label, s.algo);
    s.ignore = string_list(qc.value("ignore", nlohmann::json::array()));
    if (qc.contains("config_groups") && qc["config_groups"].is_object())
      for (const auto& [name, g] : qc["config_groups"].items())
      {
        if (g.contains("weights") && g["weights"].contains("group_size") &&
            g["weights"]["group_size"].is_number_integer())
          s.group = g["weights"]["group_size"].get<int>();
        if (g.contains("input_activations") && g["input_activations"].is_object()) {
          const auto& ia = g["input_activations"];
          const int bits = ia.value("num_bits", 0);
          const std::string type = ia.value("type", "");
          if (bits == 4 && type == "float") s.act = ActQuant::nvfp4;
          else if (bits == 8 && type == "float") s.act = ActQuant::fp8;
          else if (bits == 8 && type == "int") s.act = ActQuant::int8;
          else fail("{}: config.json: unsupported compressed-tensors input_activations", label);
        }
      }
    if (qc.contains("kv_cache_scheme") && qc["kv_cache_scheme"].is_object()) s.kv_fp8 = true;
  } else if (!method.empty()) {
    fail("{}: config.json: unsupported quantization method '{}'", label, method);
  }
  return s;
}

class Loader {
 public:
  Loader(const Checkpoint& ck, std::string label) : ck_(ck), label_(std::move(label)) {}

  const CheckpointTensor* find(const std::string& name) const { return ck_.find(name); }

  TensorView require(const std::string& name, const std::string& why) const {
    const CheckpointTensor* t = ck_.find(name);
    if (!t) fail("{}: tensor '{}' missing ({})", label_, name, why);
    return t->file->view(*t->entry);
  }

  [[noreturn]] void mismatch(const std::string& name, const TensorView& v,
                             const std::string& expected) const {
    fail("{}: tensor '{}' is {} {}, expected {}", label_, name, dtype_name(v.dtype),
         shape_str(v.shape), expected);
  }

  // A float vector of `n` elements (norms, biases, pre_quant_scale).
  std::vector<float> vector(const std::string& name, int64_t n) const {
    const TensorView v = require(name, "needed by the model");
    if (!is_quantizable_float(v.dtype) || v.numel() != n)
      mismatch(name, v, fmt::format("F32/F16/BF16 [{}]", n));
    return to_f32(v);
  }

  // A float scalar stored as [] or [1] in F32/BF16/F16 (input_scale, k_scale, ...).
  float scalar(const std::string& name, const std::string& why) const {
    const TensorView v = require(name, why);
    if (!is_quantizable_float(v.dtype) || v.numel() != 1 || v.shape.size() > 1)
      mismatch(name, v, fmt::format("F32/BF16/F16 [] or [1] ({})", why));
    return to_f32(v)[0];
  }

  static std::vector<float> to_f32(const TensorView& v) {
    std::vector<float> out(size_t(v.numel()));
    for (int64_t i = 0; i < v.numel(); ++i) {
      switch (v.dtype) {
        case DType::F32: {
          float f;
          std::memcpy(&f, v.data + 4 * i, 4);
          out[size_t(i)] = f;
          break;
        }
        case DType::F16:
        case DType::BF16: {
          uint16_t h;
          std::memcpy(&h, v.data + 2 * i, 2);
          out[size_t(i)] = v.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
          break;
        }
        default: break;
      }
    }
    return out;
  }

  LinearWeight float_weight(const std::string& name, int64_t rows, int64_t cols,
                            const std::string& why) const {
    const TensorView v = require(name, why);
    if (!is_quantizable_float(v.dtype) || v.shape != Shape{rows, cols})
      mismatch(name, v, fmt::format("F32/F16/BF16 [{}, {}] ({})", rows, cols, why));
    LinearWeight w;
    w.format = v.dtype == DType::F32 ? WeightFormat::f32
               : v.dtype == DType::F16 ? WeightFormat::f16 : WeightFormat::bf16;
    w.rows = rows;
    w.cols = cols;
    w.data = v.data;
    return w;
  }

  // Checks dtype and shape of a quantized tensor.
  TensorView expect(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape,
                    const std::string& what) const {
    const TensorView v = require(name, what);
    bool ok = v.shape == shape;
    bool dt = false;
    for (DType d : dtypes) dt |= v.dtype == d;
    if (!ok || !dt) {
      std::string names;
      for (DType d : dtypes) {
        if (!names.empty()) names += '/';
        names += dtype_name(d);
      }
      mismatch(name, v, fmt::format("{} {} ({})", names, shape_str(shape), what));
    }
    return v;
  }

  // Per-row or per-group scales as float32, whatever float dtype they are stored in.
  std::shared_ptr<std::vector<float>> scales(const TensorView& v) const {
    return std::make_shared<std::vector<float>>(to_f32(v));
  }

  // `bias`: the spec says the module has one ([rows], required); otherwise a stored bias is an
  // error, since config.json says the model does not use it.
  EngineLinear linear(const std::string& module, int64_t rows, int64_t cols,
                      const QuantScheme& scheme, bool bias, bool must_float = false) const {
    const QuantScheme s = scheme.for_module(module);
    EngineLinear L;
    L.name = module;
    const bool quantized = s.quantizes() && !must_float && !s.ignored(module);
    const bool ct = s.exporter == QuantScheme::Exporter::compressed_tensors;
    const std::string what =
        quantized ? fmt::format("the quantization config makes {} {} {}", module,
                                ct ? "compressed-tensors" : "ModelOpt", s.algo)
                  : "not quantized";
    if (!quantized) {
      if (find(module + ".weight_scale") || find(module + ".weight_packed"))
        fail("{}: tensor '{}.weight_scale' present but the quantization config does not quantize "
             "'{}'", label_, module, module);
      L.w = float_weight(module + ".weight", rows, cols, what);
    } else if (*s.format == Format::int8) {
      int8_weight(L, module, rows, cols, what);
    } else {
      L.w = quantized_weight(module, rows, cols, s, what);
    }
    if (bias) {
      L.bias = vector(module + ".bias", rows);
    } else if (find(module + ".bias")) {
      fail("{}: tensor '{}.bias' present but config.json gives '{}' no bias (attention_bias / "
           "mlp_bias)", label_, module, module);
    }
    if (find(module + ".pre_quant_scale")) L.pre_scale = vector(module + ".pre_quant_scale", cols);
    if (quantized && s.act != ActQuant::none) {
      const bool ct_nvfp4 = s.exporter == QuantScheme::Exporter::compressed_tensors &&
                            s.act == ActQuant::nvfp4;
      const std::string iname = module + (ct_nvfp4 ? ".input_global_scale" : ".input_scale");
      if (find(iname)) {
        L.input_scale = scalar(iname, what);
        if (ct_nvfp4) L.input_scale = 1.0f / L.input_scale;
        if (!std::isfinite(L.input_scale) || L.input_scale <= 0)
          fail("{}: tensor '{}' is not a positive finite scale", label_, iname);
        L.act = s.act;
      } else if (s.algo != "NVFP4_AWQ") {
        fail("{}: tensor '{}' missing ({})", label_, iname, what);
      }
    }
    return L;
  }

 private:
  // INT8 per-channel (SmoothQuant W8A8): the codes are used as stored (INT8 kernels); the row
  // scales (ModelOpt F32 [out], compressed-tensors [out, 1] in the model dtype) become float32.
  void int8_weight(EngineLinear& L, const std::string& m, int64_t rows, int64_t cols,
                   const std::string& what) const {
    const TensorView q = expect(m + ".weight", {DType::I8}, {rows, cols}, what);
    const std::string sname = m + ".weight_scale";
    const TensorView sv = require(sname, what);
    if (!is_quantizable_float(sv.dtype) || sv.numel() != rows ||
        !(sv.shape == Shape{rows} || sv.shape == Shape{rows, 1}))
      mismatch(sname, sv, fmt::format("F32/BF16/F16 [{}] or [{}, 1] ({})", rows, rows, what));
    L.w = LinearWeight{};
    L.w.format = WeightFormat::int8;
    L.w.rows = rows;
    L.w.cols = cols;
    L.w.data = q.data;
    L.w.owned_scales = scales(sv);
    L.w.scales = L.w.owned_scales->data();
  }

  LinearWeight quantized_weight(const std::string& m, int64_t rows, int64_t cols,
                                const QuantScheme& s, const std::string& what) const {
    const bool ct = s.exporter == QuantScheme::Exporter::compressed_tensors;
    const std::string wname = m + (ct && *s.format != Format::fp8 ? ".weight_packed" : ".weight");
    LinearWeight w;
    w.rows = rows;
    w.cols = cols;
    auto need_div = [&](int64_t block) {
      if (cols % block != 0)
        fail("{}: module '{}': in_features {} is not a multiple of the block {} ({})", label_, m,
             cols, block, what);
    };
    switch (*s.format) {
      case Format::nvfp4: {
        need_div(16);
        w.format = WeightFormat::nvfp4;
        w.data = expect(wname, {DType::U8}, {rows, cols / 2}, what).data;
        w.block_scales = reinterpret_cast<const uint8_t*>(
            expect(m + ".weight_scale", {DType::F8_E4M3}, {rows, cols / 16}, what).data);
        const std::string gname = m + (ct ? ".weight_global_scale" : ".weight_scale_2");
        const TensorView g = require(gname, what);
        if (g.dtype != DType::F32 || g.numel() != 1 || g.shape.size() > 1)
          mismatch(gname, g, fmt::format("F32 [] or [1] ({})", what));
        float gv;
        std::memcpy(&gv, g.data, 4);
        // compressed-tensors stores the reciprocal of the dequantization scale.
        w.global_scale = ct ? 1.0f / gv : gv;
        if (!std::isfinite(w.global_scale) || w.global_scale <= 0)
          fail("{}: tensor '{}' holds {}, not a positive finite scale", label_, gname, gv);
        break;
      }
      case Format::mxfp4: {
        need_div(32);
        w.format = WeightFormat::mxfp4;
        w.data = expect(wname, {DType::U8}, {rows, cols / 2}, what).data;
        w.block_scales = reinterpret_cast<const uint8_t*>(
            expect(m + ".weight_scale", {DType::U8}, {rows, cols / 32}, what).data);
        break;
      }
      case Format::fp8: {
        w.format = WeightFormat::fp8;
        w.data = expect(wname, {DType::F8_E4M3}, {rows, cols}, what).data;
        const std::string sname = m + ".weight_scale";
        const TensorView sv = require(sname, what);
        const bool per_row = sv.numel() == rows && (sv.shape == Shape{rows} ||
                                                    sv.shape == Shape{rows, 1});
        const bool per_tensor = sv.numel() == 1 && sv.shape.size() <= 1;
        if (!is_quantizable_float(sv.dtype) || !(per_row || per_tensor))
          mismatch(sname, sv, fmt::format("F32/BF16/F16 [{}] or [{}, 1] ({})", rows, rows, what));
        auto sc = scales(sv);
        if (per_tensor) sc->assign(size_t(rows), (*sc)[0]);
        w.owned_scales = sc;
        w.scales = sc->data();
        break;
      }
      case Format::int8:
        fail("{}: module '{}': INT8 weights are loaded by int8_weight", label_, m);
      case Format::int4: {
        w.format = ct ? WeightFormat::int4_packed32 : WeightFormat::int4_row_pairs;
        if (ct) {
          if (cols % 8) need_div(8);
          w.data = expect(wname, {DType::I32}, {rows, cols / 8}, what).data;
        } else {
          if (rows % 2)
            fail("{}: module '{}': out_features {} is odd; INT4 row pairs need it even", label_, m,
                 rows);
          w.data = expect(wname, {DType::U8}, {rows / 2, cols}, what).data;
        }
        const std::string sname = m + ".weight_scale";
        const TensorView sv = require(sname, what);
        if (!is_quantizable_float(sv.dtype) || sv.shape.size() != 2 || sv.shape[0] != rows ||
            sv.shape[1] <= 0 || cols % sv.shape[1] != 0)
          mismatch(sname, sv, fmt::format("F32/BF16/F16 [{}, {}/group] ({})", rows, cols, what));
        w.group = int(cols / sv.shape[1]);
        if (s.group > 0 && w.group != s.group)
          mismatch(sname, sv, fmt::format("[{}, {}] for the config's group_size {} ({})", rows,
                                          cols / s.group, s.group, what));
        if (ct && w.group % 8 != 0)
          mismatch(sname, sv, fmt::format("a group that is a multiple of 8 ({})", what));
        auto sc = scales(sv);
        w.owned_scales = sc;
        w.scales = sc->data();
        break;
      }
    }
    return w;
  }

  const Checkpoint& ck_;
  std::string label_;
};

}  // namespace

void EmbeddingView::row(int64_t id, float* out) const {
  const auto* base = static_cast<const uint8_t*>(data);
  for (int64_t c = 0; c < cols; ++c) {
    switch (dtype) {
      case DType::F32: std::memcpy(out + c, base + 4 * (id * cols + c), 4); break;
      case DType::F16:
      case DType::BF16: {
        uint16_t h;
        std::memcpy(&h, base + 2 * (id * cols + c), 2);
        out[c] = dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
        break;
      }
      default: out[c] = 0.f; break;
    }
  }
}

uint64_t ModelWeights::weight_bytes_per_token() const {
  uint64_t n = lm_head.w.stored_bytes();
  for (const auto& l : layers)
    for (const EngineLinear& L : l.linears) n += L.w.stored_bytes();
  return n;
}

ModelWeights ModelWeights::load(const std::filesystem::path& dir) {
  return load(std::make_shared<const Checkpoint>(Checkpoint::open(dir)));
}

ModelWeights ModelWeights::load(std::shared_ptr<const Checkpoint> checkpoint) {
  ModelWeights mw;
  mw.checkpoint = std::move(checkpoint);
  const Checkpoint& ck = *mw.checkpoint;
  const std::string label = ck.dir().string();
  mw.arch = Architecture::from_config(ck.config(), label + "/config.json");
  const Architecture& a = mw.arch;
  const QuantScheme scheme = read_scheme(ck, label);
  mw.quantization = !scheme.quantizes() ? "none"
                    : fmt::format("{} {}",
                                  scheme.exporter == QuantScheme::Exporter::modelopt
                                      ? "modelopt" : "compressed-tensors",
                                  scheme.algo);
  Loader ld(ck, label);

  // Embedding and output head: stored once and shared when the embeddings are tied.
  std::string embed_name = a.embed_name;
  std::string head_name = a.head_name;
  if (!ld.find(embed_name) && ld.find(head_name) && a.tie_word_embeddings) embed_name = head_name;
  if (!ld.find(head_name) && a.tie_word_embeddings) head_name = embed_name;
  const LinearWeight embed =
      ld.float_weight(embed_name, a.vocab_size, a.hidden_size, "token embedding");
  mw.embed.dtype = embed.format == WeightFormat::f32 ? DType::F32
                   : embed.format == WeightFormat::f16 ? DType::F16 : DType::BF16;
  mw.embed.data = embed.data;
  mw.embed.rows = a.vocab_size;
  mw.embed.cols = a.hidden_size;
  if (head_name == a.head_name && ld.find("lm_head.weight_scale")) {
    mw.lm_head = ld.linear("lm_head", a.vocab_size, a.hidden_size, scheme, false);
  } else {
    mw.lm_head.name = "lm_head";
    mw.lm_head.w = ld.float_weight(head_name, a.vocab_size, a.hidden_size, "output head");
  }
  // Norm weights hold the multiplier the engine applies: Gemma's x * (1 + w) becomes 1 + w.
  auto norm = [&](const std::string& name, int64_t n) {
    std::vector<float> w = ld.vector(name, n);
    if (a.norm_style == NormStyle::one_plus)
      for (float& v : w) v = 1.0f + v;
    return w;
  };
  mw.final_norm = norm(a.final_norm_name, a.hidden_size);

  const int64_t q_out = a.num_heads * a.head_dim, kv_out = a.num_kv_heads * a.head_dim;
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const LayerSpec& spec = a.layers[size_t(l)];
    LayerWeights L;
    for (int s = 0; s < kNormSlots; ++s) {
      const NormSlot slot = NormSlot(s);
      if (!spec.has(slot)) continue;
      int64_t n = a.hidden_size;
      if (slot == NormSlot::q || slot == NormSlot::k)
        n = a.qk_norm == QkNorm::per_head ? a.head_dim : slot == NormSlot::q ? q_out : kv_out;
      L.norms[size_t(s)] = norm(spec.norm(slot), n);
    }
    for (size_t i : spec.linears) {
      const LinearModule& m = a.linears[i];
      L.linears.push_back(ld.linear(m.name, m.out_features, m.in_features, scheme, m.bias));
    }
    if (scheme.kv_fp8) {
      // ModelOpt puts the scales on k_proj / v_proj, compressed-tensors on the attention.
      const bool ct = scheme.exporter == QuantScheme::Exporter::compressed_tensors;
      const std::string p = fmt::format("model.layers.{}.", l);
      const std::string kn = p + (ct ? "self_attn.k_scale" : "self_attn.k_proj.k_scale");
      const std::string vn = p + (ct ? "self_attn.v_scale" : "self_attn.v_proj.v_scale");
      // Cast mode writes no scales: engines then use 1.0 (§6.2).
      L.k_scale = ld.find(kn) ? ld.scalar(kn, "FP8 KV cache") : 1.f;
      L.v_scale = ld.find(vn) ? ld.scalar(vn, "FP8 KV cache") : 1.f;
      if (!(L.k_scale > 0) || !(L.v_scale > 0) || !std::isfinite(L.k_scale) ||
          !std::isfinite(L.v_scale))
        fail("{}: layer {}: k_scale/v_scale must be positive and finite", label, l);
    }
    mw.layers.push_back(std::move(L));
  }
  return mw;
}

}  // namespace qf
