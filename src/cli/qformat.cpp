// --qformat: ModelOpt's hf_ptq.py quantization names as aliases of qforge's own flags.
#include "cli/commands.h"
#include "core/error.h"

#include <algorithm>
#include <array>
#include <cctype>

namespace qf::cli {
namespace {

// One row per ModelOpt name: the --format / --activations / --algo / --group-size it stands
// for ("" leaves the flag as it is), or why qforge cannot express it.
constexpr std::array<QFormat, 7> kQFormats = {{
    {"nvfp4", "nvfp4", "nvfp4", "max", "", "W4A4 NVFP4 (NVFP4_DEFAULT_CFG; needs --calib)", ""},
    {"w4a16_nvfp4", "nvfp4", "none", "max", "", "NVFP4 weight-only", ""},
    {"nvfp4_awq", "nvfp4", "nvfp4", "awq", "", "W4A4 NVFP4 with AWQ (NVFP4_AWQ; needs --calib)", ""},
    {"fp8", "fp8", "fp8", "max", "", "FP8 per-tensor W8A8 (FP8_DEFAULT_CFG; needs --calib)", ""},
    {"int4_awq", "int4", "none", "awq", "128", "INT4 weight-only, group 128, AWQ (W4A16_AWQ; needs --calib)", ""},
    {"w4a8_awq", "", "", "", "", "INT4 AWQ weights with FP8 activations (W4A8_AWQ)",
     "qforge has no INT4-weight / FP8-activation scheme (--activations fp8 needs --format fp8)"},
    {"int8_sq", "int8", "int8", "smoothquant", "", "INT8 W8A8 with SmoothQuant (W8A8_SQ_PER_CHANNEL; needs --calib)", ""},
}};

}  // namespace

std::span<const QFormat> qformats() { return kQFormats; }

std::vector<std::string> qformat_names() {
  std::vector<std::string> out;
  for (const QFormat& q : kQFormats) out.emplace_back(q.name);
  return out;
}

void apply_qformat(const std::string& given, std::initializer_list<QFormatFlag> flags) {
  std::string name = given;  // ModelOpt's names are case-insensitive (hf_ptq.py lowers them)
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  const QFormat* q = nullptr;
  for (const QFormat& row : kQFormats)
    if (row.name == name) q = &row;
  if (!q) fail("{}", "--qformat: unknown name '" + name + "'");
  if (!q->refusal.empty()) fail("--qformat {} ({}) cannot be expressed: {}", q->name, q->summary, q->refusal);
  for (const QFormatFlag& f : flags) {
    const std::string_view wanted = f.flag == "--format"       ? q->format
                                    : f.flag == "--activations" ? q->activations
                                    : f.flag == "--algo"        ? q->algo
                                                                : q->group_size;
    if (wanted.empty()) continue;
    // An explicit --group-size refines int4_awq (ModelOpt's AWQ block size is configurable too).
    if (f.given && f.flag == "--group-size") continue;
    if (f.given && *f.value != wanted)
      fail("--qformat {} sets {} {}, which conflicts with {} {}", q->name, f.flag, wanted, f.flag,
           *f.value);
    *f.value = std::string(wanted);
  }
}

}  // namespace qf::cli
