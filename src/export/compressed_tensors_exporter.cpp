// The compressed-tensors format (vLLM, SGLang, HF transformers): `nvfp4-pack-quantized`,
// `mxfp4-pack-quantized`, `float-quantized` (FP8) and `pack-quantized` (INT4), with the
// `quantization_config` that llm-compressor writes (shared/specs/engine-formats.md §2).
#include "export/exporter.h"

#include "formats/int4.h"

#include <cstring>

namespace qf {
namespace {

// The compressed-tensors release whose config layout this mirrors.
constexpr const char* kCompressedTensorsVersion = "0.12.2";

std::string_view ct_format_name(Format format) {
  switch (format) {
    case Format::nvfp4: return "nvfp4-pack-quantized";
    case Format::mxfp4: return "mxfp4-pack-quantized";
    case Format::fp8: return "float-quantized";
    case Format::int4: return "pack-quantized";
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

std::vector<std::byte> copy_bytes(const void* data, size_t n) {
  std::vector<std::byte> out(n);
  if (n) std::memcpy(out.data(), data, n);
  return out;
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
    return {};
  }

  DType scale_dtype(const ExportedLinear& l) const override {
    return float_scale_dtype(l.model_dtype);
  }

  std::vector<TensorSpec> linear_specs(const ExportedLinear& l) const override {
    const std::string& m = l.module;
    switch (l.format) {
      case Format::nvfp4:
        return {{m + ".weight_packed", DType::U8, {l.rows, l.cols / 2}},
                {m + ".weight_scale", DType::F8_E4M3, {l.rows, l.cols / l.block}},
                {m + ".weight_global_scale", DType::F32, {1}}};
      case Format::mxfp4:
        return {{m + ".weight_packed", DType::U8, {l.rows, l.cols / 2}},
                {m + ".weight_scale", DType::U8, {l.rows, l.cols / l.block}}};
      case Format::fp8:
        return {{m + ".weight", DType::F8_E4M3, {l.rows, l.cols}},
                {m + ".weight_scale", float_scale_dtype(l.model_dtype), {l.rows, 1}}};
      case Format::int4:
        return {{m + ".weight_packed", DType::I32, {l.rows, l.cols / 8}},
                {m + ".weight_scale", float_scale_dtype(l.model_dtype), {l.rows, l.cols / l.block}},
                {m + ".weight_shape", DType::I64, {2}}};
    }
    return {};
  }

  std::vector<std::vector<std::byte>> linear_data(const ExportedLinear& l,
                                                  const QuantizedTensor& q) const override {
    std::vector<std::vector<std::byte>> out;
    switch (l.format) {
      case Format::nvfp4: {
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(copy_bytes(q.block_scales.data(), q.block_scales.size()));
        // compressed-tensors stores the reciprocal of ModelOpt's weight_scale_2 (§2.2).
        const float global = 1.0f / q.global_scale;
        out.push_back(copy_bytes(&global, sizeof(float)));
        break;
      }
      case Format::mxfp4:
        out.push_back(copy_bytes(q.codes.data(), q.codes.size()));
        out.push_back(copy_bytes(q.block_scales.data(), q.block_scales.size()));
        break;
      case Format::fp8:
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

  nlohmann::ordered_json quantization_config(const QuantizationSummary& s) const override {
    // QuantizationArgs.model_dump() with sort_keys, as llm-compressor writes it.
    nlohmann::json w;
    w["actorder"] = nullptr;
    w["block_structure"] = nullptr;
    w["dynamic"] = false;
    w["observer"] = "memoryless_minmax";
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
        w["strategy"] = "channel";
        w["group_size"] = nullptr;
        w["scale_dtype"] = nullptr;
        w["observer"] = "minmax";
        break;
      case Format::int4:
        w["num_bits"] = 4;
        w["type"] = "int";
        w["strategy"] = "group";
        w["group_size"] = s.block;
        w["scale_dtype"] = nullptr;
        w["observer"] = "minmax";
        break;
    }
    nlohmann::json group;
    group["format"] = ct_format_name(s.format);
    group["input_activations"] = nullptr;
    group["output_activations"] = nullptr;
    group["targets"] = {"Linear"};
    group["weights"] = w;
    nlohmann::json c;
    c["config_groups"]["group_0"] = group;
    c["format"] = ct_format_name(s.format);
    c["global_compression_ratio"] = nullptr;
    c["ignore"] = s.excluded_modules;
    c["kv_cache_scheme"] = nullptr;
    c["quant_method"] = "compressed-tensors";
    c["quantization_status"] = "compressed";
    c["sparsity_config"] = nlohmann::json::object();
    c["transform_config"] = nlohmann::json::object();
    c["version"] = kCompressedTensorsVersion;
    return nlohmann::ordered_json::parse(c.dump());  // keeps the sorted key order
  }
};

}  // namespace

std::unique_ptr<Exporter> make_compressed_tensors_exporter() {
  return std::make_unique<CompressedTensorsExporter>();
}

}  // namespace qf
