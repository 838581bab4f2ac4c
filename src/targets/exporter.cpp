#include "targets/exporter.h"

#include "core/convert.h"
#include "core/error.h"
#include "targets/target.h"

#include <cstring>


namespace qf {

namespace {

const Target& target_of(ExportFormat format) {
  for (const Target& t : targets())
    if (t.format == format) return t;
  fail("export format {} has no row in the target table", int(format));
}

}  // namespace

std::string_view export_format_name(ExportFormat format) { return target_of(format).name; }

std::optional<ExportFormat> parse_export_format(std::string_view name) {
  for (const Target& t : targets())
    if (t.name == name) return t.format;
  return std::nullopt;
}

std::unique_ptr<Exporter> make_exporter(ExportFormat format) {
  return target_of(format).make_exporter();
}

std::string Exporter::unsupported_reason(const ExportedLinear&) const { return {}; }

DType Exporter::scale_dtype(const ExportedLinear&) const { return DType::F32; }

DType Exporter::pre_quant_scale_dtype(const ExportedLinear&) const { return DType::F32; }
bool Exporter::stores_pre_quant_scale() const { return false; }
ExportNumerics Exporter::numerics() const { return ExportNumerics::reference; }

bool Exporter::fuses_experts() const { return false; }
std::vector<TensorSpec> Exporter::fused_expert_specs(const std::string&,
                                                     const std::vector<ExportedLinear>&) const {
  return {};
}
std::vector<std::vector<std::byte>> Exporter::fused_expert_data(const std::vector<ExportedLinear>&,
                                                                const std::vector<QuantizedTensor>&,
                                                                const LinearExtras&) const {
  return {};
}

void Exporter::write_extra_files(const QuantizationSummary&, const std::filesystem::path&) const {}

std::vector<std::byte> copy_bytes(const void* data, size_t n) {
  std::vector<std::byte> out(n);
  if (n) std::memcpy(out.data(), data, n);
  return out;
}

std::vector<std::byte> scales_to_bytes(const std::vector<float>& scales, DType dtype) {
  std::vector<std::byte> out(scales.size() * dtype_size(dtype));
  convert_from_f32(dtype, scales.data(), out.data(), scales.size());
  return out;
}

}  // namespace qf
