// The original gpt-oss release (openai/gpt-oss-20b / -120b): config.json's quantization_config
// is {"quant_method": "mxfp4", "modules_to_not_convert": [...]}, and only the routed experts are
// MXFP4, stored fused as `mlp.experts.gate_up_proj_blocks` [E, 2I, H/32, 16] (uint8, two E2M1
// codes per byte, element 2j in the low nibble; output rows interleaved gate, up) with
// `gate_up_proj_scales` [E, 2I, H/32] (E8M0, value 2^(code - 127)), and the same for down_proj
// [E, H, I/32, 16] / [E, H, I/32] (transformers integrations/mxfp4.py
// _convert_moe_packed_tensors; vLLM's gpt_oss.py load_weights). Those are the layout of
// qforge's MXFP4 LinearWeight, expert by expert, so model/expert_tensors splits them into
// per-expert views `experts.N.gate_up_proj.weight` / `.weight_scale` (nothing copied) and this
// reader says how they are stored. Read only: qforge writes no checkpoint in this form.
#include "core/error.h"
#include "targets/reader.h"

namespace qf {
namespace {

class GptOssMxfp4Reader final : public TargetReader {
 public:
  std::string_view name() const override { return "gpt-oss-mxfp4"; }
  std::string_view display_name() const override { return "gpt-oss MXFP4"; }

  std::optional<QuantScheme> read_scheme(const Checkpoint& ck,
                                         const std::string& label) const override {
    const auto& cfg = ck.config();
    if (!cfg.contains("quantization_config") || !cfg["quantization_config"].is_object())
      return std::nullopt;
    const std::string where = label + ": config.json: quantization_config";
    if (json_string_member(cfg["quantization_config"], "quant_method", where) != "mxfp4" ||
        json_string_member(cfg, "model_type", label + ": config.json") != "gpt_oss")
      return std::nullopt;
    QuantScheme s;
    s.format = Format::mxfp4;
    s.algo = "MXFP4";
    // transformers' Mxfp4HfQuantizer replaces only GptOssExperts (modules_to_not_convert lists
    // attention, routers, embeddings and the head, which it would not convert anyway): every
    // module but a routed expert is float.
    s.ignore.emplace_back("re:(?!.*\\.mlp\\.experts\\.[0-9]+\\.)", NamePattern::Anchor::prefix,
                          where);
    return s;
  }

  StoredLinear stored_linear(const std::string& module, const QuantScheme&) const override {
    StoredLinear st;
    st.weight = module + ".weight";
    st.layout = WeightFormat::mxfp4;
    st.weight_scale = module + ".weight_scale";
    return st;
  }
  std::string kv_scale_name(const std::string& proj, char which) const override {
    return proj + "." + which + "_scale";  // the release has no FP8 KV cache
  }
  // The per-expert names are made by the split, never stored: nothing to list for the readers
  // that look at stored tensors.
  std::vector<std::string> packed_weight_leaves() const override { return {}; }
  std::vector<std::string> quantized_marker_leaves() const override { return {}; }
  std::vector<std::string> pre_scale_leaves() const override { return {}; }
  std::vector<std::string> companion_leaves() const override { return {}; }
  std::optional<std::string> algo_name(const nlohmann::json& config) const override {
    if (config.is_object() && config.contains("quant_method") && config["quant_method"] == "mxfp4")
      return std::string("MXFP4");
    return std::nullopt;
  }
};

}  // namespace

const TargetReader& gpt_oss_mxfp4_reader() {
  static const GptOssMxfp4Reader reader;
  return reader;
}

}  // namespace qf
