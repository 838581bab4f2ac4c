// Exporters turn quantized linears into the tensors and configuration of a checkpoint format
// that inference engines load. One exporter per target format; the pipeline asks an exporter
// first for the tensor list (names, dtypes, shapes) so that output shards can be planned and
// their headers written before any data is produced, then for the bytes, module by module.
#pragma once

#include "core/act_quant.h"
#include "formats/quantized_tensor.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace qf {

enum class ExportFormat { modelopt, compressed_tensors };

// gpt-oss routed experts: the hub stores each projection fused over the experts and transposed
// (`mlp.experts.gate_up_proj` [E, H, 2I], used as x @ W, gate/up columns interleaved), which the
// layer spec presents per expert (gate_up rows alternating gate, up).
enum class FusedExpert : uint8_t { none, gate_up, down };

std::string_view export_format_name(ExportFormat format);
std::optional<ExportFormat> parse_export_format(std::string_view name);

// One Linear as it will be exported.
struct ExportedLinear {
  std::string module;  // HF module prefix, e.g. "model.layers.0.mlp.up_proj"
  Format format = Format::nvfp4;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features
  int block = 0;
  DType model_dtype = DType::BF16;  // dtype of the original weight
  // Beyond weight-only (calibrated exports):
  ActQuant act = ActQuant::none;   // input quantization: adds input_scale (CT NVFP4: input_global_scale)
  bool per_tensor = false;         // fp8: one weight_scale for the tensor (FP8 W8A8), not per row
  bool pre_quant_scale = false;    // exports <module>.pre_quant_scale [cols] (AWQ, SmoothQuant)
  char kv_scale = 0;               // 'k' / 'v': this k_proj / v_proj also carries the layer's
                                   // FP8 KV-cache scale (ModelOpt k_proj.k_scale, CT self_attn.k_scale)
  FusedExpert fused_expert = FusedExpert::none;  // a gpt-oss expert projection
};

// Values of the extra tensors ExportedLinear asks for.
struct LinearExtras {
  float input_scale = 0.f;               // ModelOpt convention: amax_in / maxbound
  std::vector<float> pre_quant_scale;    // [cols]
  float kv_scale = 0.f;                  // amax / 448
};

// What the quantization config of a (single-format) export describes.
struct QuantizationSummary {
  Format format = Format::nvfp4;
  int block = 0;
  std::vector<std::string> excluded_modules;  // every unquantized Linear, sorted, incl. lm_head
  ActQuant act = ActQuant::none;  // activation quantization of the quantized Linears
  bool per_tensor = false;        // fp8 per-tensor weights (FP8 W8A8)
  bool awq = false;               // weights made by AWQ (ModelOpt W4A16_AWQ / NVFP4_AWQ names)
  bool kv_fp8 = false;            // FP8 KV cache scales written
  // int4 with one scale per output channel (every layer's block is its own in_features):
  // compressed-tensors strategy "channel" (group_size null); ModelOpt group_size = in_features.
  bool channel = false;
  // Mixed precision: every quantized Linear with its own format, block and input quantization,
  // in architecture order (the head last when a plan quantizes it). Empty: every quantized
  // Linear is `format` / `block` / `act`. Only filled when at least two distinct schemes are
  // used; then excluded_modules still lists the rest.
  struct Layer {
    std::string module;
    Format format = Format::nvfp4;
    int block = 0;
    int64_t cols = 0;  // in_features (an int4 block equal to it is one scale per channel)
    ActQuant act = ActQuant::none;  // this layer's input quantization (a plan's per module)
    bool per_tensor = false;        // fp8 per-tensor weights (FP8 W8A8)
  };
  std::vector<Layer> mixed;
};

class Exporter {
 public:
  virtual ~Exporter() = default;
  virtual ExportFormat kind() const = 0;
  // Empty if the linear can be written in this export, else why not (one phrase).
  virtual std::string unsupported_reason(const ExportedLinear& linear) const;
  // The dtype FP8 and INT4 scales are stored in (they are rounded to it before the codes are
  // computed, so the stored scale is exactly the one used).
  virtual DType scale_dtype(const ExportedLinear& linear) const;
  // The dtype `<module>.pre_quant_scale` is stored in (SmoothQuant rounds its scales to it
  // before dividing the weights, so the stored scale is exactly the one applied). Default F32.
  virtual DType pre_quant_scale_dtype(const ExportedLinear& linear) const;
  // Whether the target stores per-input-channel `pre_quant_scale` tensors (ModelOpt). Without
  // them AWQ / SmoothQuant scales must be folded into a norm, and a Linear with no foldable norm
  // keeps its unscaled weights. Default false.
  virtual bool stores_pre_quant_scale() const;
  // Whose round-to-nearest rounding this target's checkpoints reproduce. Default reference
  // (the formats' own, compressed-tensors' for MXFP4).
  virtual ExportNumerics numerics() const;
  // The tensors that replace `<module>.weight`, in the order linear_data returns them.
  virtual std::vector<TensorSpec> linear_specs(const ExportedLinear& linear) const = 0;
  // The FP8 KV-cache scale a k_proj / v_proj carries (linear.kv_scale 'k' / 'v'): its tensor,
  // and the bytes of `scale` (amax / 448) as stored. linear_specs / linear_data include it for
  // a quantized projection; a projection kept in its dtype (a recipe's BF16 attention) is
  // copied with this tensor after it.
  virtual TensorSpec kv_scale_spec(const ExportedLinear& linear) const = 0;
  virtual std::vector<std::byte> kv_scale_data(const ExportedLinear& linear, float scale) const = 0;
  virtual std::vector<std::vector<std::byte>> linear_data(const ExportedLinear& linear,
                                                          const QuantizedTensor& q,
                                                          const LinearExtras& extras = {}) const = 0;
  // gpt-oss experts: true when the target writes all experts of a projection as one tensor under
  // the hub's fused names (ModelOpt: one quantizer per 3-D tensor, so one tensor scale for all
  // experts); false when it writes them one Linear per expert through linear_specs (which then
  // names gate and up as the target does). Default false.
  virtual bool fuses_experts() const;
  // With fuses_experts: the tensors of one fused projection `name` ("...mlp.experts.gate_up_proj")
  // holding `experts` (one per expert, equal shapes and formats, quantized with one tensor
  // scale), and their bytes from each expert's result. Default: none (the target fuses nothing).
  virtual std::vector<TensorSpec> fused_expert_specs(const std::string& name,
                                                     const std::vector<ExportedLinear>& experts) const;
  virtual std::vector<std::vector<std::byte>> fused_expert_data(
      const std::vector<ExportedLinear>& experts, const std::vector<QuantizedTensor>& q,
      const LinearExtras& extras) const;
  // The `quantization_config` block of config.json.
  virtual nlohmann::ordered_json quantization_config(const QuantizationSummary& summary) const = 0;
  // Files besides config.json (ModelOpt's hf_quant_config.json). Default: none.
  virtual void write_extra_files(const QuantizationSummary& summary,
                                 const std::filesystem::path& out_dir) const;
};

std::unique_ptr<Exporter> make_exporter(ExportFormat format);

// A copy of `n` bytes at `data`, as one output tensor's bytes.
std::vector<std::byte> copy_bytes(const void* data, size_t n);

// Serializes float scales in `dtype` (F32, BF16 or F16), little-endian.
std::vector<std::byte> scales_to_bytes(const std::vector<float>& scales, DType dtype);

}  // namespace qf
