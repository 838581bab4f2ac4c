// The serve-command table: per engine and export target, what the engine notes
// (../shared/specs/engine-formats.md, sections 1, 2 and 5) say it loads. Anything the notes do
// not cover is reported as unverified rather than guessed.
#include "targets/serving.h"

#include <optional>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace qf {

std::string_view engine_support_name(EngineSupport s) {
  switch (s) {
    case EngineSupport::loads: return "loads";
    case EngineSupport::unverified: return "unverified";
    case EngineSupport::no: return "does not load";
  }
  return "unverified";
}

namespace {

std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' ||
           c == '-' || c == '+' || c == ':' || c == '=' || c == ',';
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Verdict {
  EngineSupport support;
  std::string flags;  // engine flags besides the model path
  std::string note;
};

Verdict loads(std::string flags, std::string note) {
  return {EngineSupport::loads, std::move(flags), std::move(note)};
}
Verdict unverified(std::string flags, std::string note) {
  return {EngineSupport::unverified, std::move(flags), std::move(note)};
}
Verdict no(std::string note) { return {EngineSupport::no, "", std::move(note)}; }

bool only(const std::set<Format>& fs, std::initializer_list<Format> allowed) {
  return std::all_of(fs.begin(), fs.end(), [&](Format f) {
    return std::find(allowed.begin(), allowed.end(), f) != allowed.end();
  });
}

// The one format of a single-format export (formats is never empty here).
Format sole(const ServeQuery& q) { return *q.formats.begin(); }
bool mixed(const ServeQuery& q) { return q.formats.size() > 1 || q.int4_channel; }

Verdict vllm(const ServeQuery& q) {
  if (q.target == ExportFormat::compressed_tensors) {
    // vLLM reads compressed-tensors from config.json: no --quantization flag needed.
    if (q.formats.size() > 1) return loads("", "one scheme per config group");
    switch (sole(q)) {
      case Format::nvfp4:
        return loads("", q.activations == ActQuant::nvfp4
                             ? "CUDA; W4A4 natively on Blackwell (SM100/SM120), else Marlin FP4 "
                               "weight-only or emulation"
                             : "CUDA SM75+ (Marlin FP4, weight-only)");
      case Format::mxfp4: return loads("", "W4A16 Marlin, CUDA SM80+");
      case Format::fp8:
        return loads("", q.activations == ActQuant::fp8
                             ? "W8A8, CUDA SM89+ (Ada, Hopper, Blackwell)"
                             : "SM89+, or weight-only Marlin on Ampere");
      case Format::int4: return loads("", "W4A16 (Marlin on CUDA SM80+; ROCm and CPU kernels exist)");
      case Format::int8: return loads("", "W8A8 INT8 (CompressedTensorsW8A8Int8)");
    }
  }
  const std::string redirect = "use --export compressed-tensors for vLLM";
  if (mixed(q)) {
    if (!only(q.formats, {Format::nvfp4, Format::fp8}))
      return no("vLLM's ModelOpt MIXED_PRECISION takes FP8 and NVFP4 layers only; " + redirect);
    if (q.formats.count(Format::fp8) && q.fp8_per_channel)
      return unverified("--quantization modelopt_mixed",
                        "vLLM's MIXED_PRECISION lists per-tensor FP8 layers; these are per "
                        "channel (FP8_PER_CHANNEL_PER_TOKEN), not covered by our notes");
    return loads("--quantization modelopt_mixed", "CUDA SM89+");
  }
  switch (sole(q)) {
    case Format::nvfp4:
      if (q.pre_quant_scale)
        return no("vLLM's ModelOpt loader does not list NVFP4_AWQ (pre_quant_scale); " + redirect);
      return loads("--quantization modelopt_fp4",
                   q.activations == ActQuant::nvfp4
                       ? "CUDA; W4A4 natively on Blackwell (SM100/SM120), else Marlin FP4 "
                         "weight-only"
                       : "CUDA SM75+ (Marlin FP4, weight-only)");
    case Format::fp8: return loads("--quantization modelopt", "CUDA SM89+ (Ada, Hopper, Blackwell)");
    case Format::mxfp4:
      return no("vLLM's ModelOpt loader has no MXFP4 (its mxfp4 method is for gpt-oss MoE "
                "experts); " + redirect);
    case Format::int4: return no("vLLM's ModelOpt loader does not accept W4A16_AWQ; " + redirect);
    case Format::int8:
      return no("vLLM's ModelOpt loader does not accept W8A8_SQ_PER_CHANNEL; " + redirect);
  }
  return unverified("", "");
}

Verdict sglang(const ServeQuery& q) {
  if (q.target == ExportFormat::compressed_tensors) {
    if (q.formats.size() > 1) return unverified("", "mixed compressed-tensors schemes are not covered by our notes");
    switch (sole(q)) {
      case Format::nvfp4:
        return q.activations == ActQuant::nvfp4
                   ? loads("", "Blackwell only (W4A4 NVFP4)")
                   : loads("", "newer builds (Marlin FP4 for NVFP4A16, SM75+)");
      case Format::mxfp4: return loads("", "W4A16 MXFP4 via Marlin");
      case Format::fp8: return loads("", "CUDA SM89+");
      case Format::int4:
      case Format::int8: return unverified("", "not covered by our notes");
    }
  }
  if (mixed(q)) return unverified("", "SGLang's ModelOpt MIXED_PRECISION is not covered by our notes");
  switch (sole(q)) {
    case Format::nvfp4:
      if (q.activations == ActQuant::nvfp4 && !q.pre_quant_scale)
        return loads("--quantization modelopt_fp4", "Blackwell only (minimum capability 100)");
      return unverified("--quantization modelopt_fp4",
                        "our notes cover SGLang's modelopt_fp4 for W4A4 NVFP4 only; this is " +
                            std::string(q.pre_quant_scale ? "NVFP4_AWQ" : "W4A16_NVFP4"));
    case Format::fp8:
      if (q.activations == ActQuant::fp8) return loads("--quantization modelopt", "CUDA SM89+");
      return unverified("--quantization modelopt",
                        "per-channel FP8 (FP8_PER_CHANNEL_PER_TOKEN) is not covered by our notes");
    case Format::mxfp4:
      return no("SGLang's mxfp4 is for gpt-oss MoE experts; dense MXFP4 loads from "
                "--export compressed-tensors");
    case Format::int4:
    case Format::int8: return unverified("", "ModelOpt's " + std::string(sole(q) == Format::int4 ? "W4A16_AWQ" : "W8A8_SQ_PER_CHANNEL") + " is not covered by our notes");
  }
  return unverified("", "");
}

Verdict trtllm(const ServeQuery& q) {
  if (q.target == ExportFormat::compressed_tensors)
    return no("TensorRT-LLM reads ModelOpt's hf_quant_config.json; use --export modelopt");
  if (mixed(q)) {
    if (q.formats.count(Format::mxfp4))
      return no("TensorRT-LLM's MXFP4 path is for gpt-oss MoE experts");
    return unverified("", q.int4_channel
                              ? "MIXED_PRECISION (INT4 per channel); its AWQ kernels take only "
                                "some group sizes"
                              : "reads MIXED_PRECISION quantized_layers; this mix is not covered "
                                "by our notes");
  }
  switch (sole(q)) {
    case Format::nvfp4:
      if (q.activations == ActQuant::nvfp4 && !q.pre_quant_scale)
        return loads("", "Blackwell (NVFP4 GEMM)");
      return unverified("", std::string(q.pre_quant_scale ? "NVFP4_AWQ" : "W4A16_NVFP4") +
                                " is not covered by our notes");
    case Format::fp8:
      if (q.activations == ActQuant::fp8) return loads("", "CUDA SM89+");
      return unverified("", "per-channel FP8 (FP8_PER_CHANNEL_PER_TOKEN) is not covered by our notes");
    case Format::int4: return loads("", "W4A16_AWQ, Ampere or newer");
    case Format::mxfp4: return no("TensorRT-LLM's MXFP4 path is for gpt-oss MoE experts");
    case Format::int8: return unverified("", "W8A8_SQ_PER_CHANNEL is not covered by our notes");
  }
  return unverified("", "");
}

void append_note(std::string& note, const std::string& more) {
  note += note.empty() ? more : "; " + more;
}

// gpt-oss's quantized experts, per engine (sources read, not run): what overrides the target's
// own verdict, or nothing.
std::optional<Verdict> gpt_oss_verdict(std::string_view engine, const ServeQuery& q) {
  if (!q.gpt_oss_experts) return std::nullopt;
  if (q.target == ExportFormat::modelopt) {
    if (!q.formats.count(Format::nvfp4))
      return unverified("", "gpt-oss's fused FP8 experts (one weight_scale per tensor) are not "
                            "covered by our notes");
    if (engine == "vLLM")
      return no("vLLM's gpt-oss loader drops ModelOpt's fused expert scales "
                "(gate_up_proj_weight_scale / _weight_scale_2 / _input_scale) and its NVFP4 MoE "
                "takes no expert biases: ModelOpt's own gpt-oss NVFP4 export gives NaN logits "
                "(vllm-project/vllm#46641; the fix, PR #46645, is not merged)");
    if (engine == "SGLang")
      return unverified("", "an SGLang test maps the fused gate_up_proj{,_bias,_weight_scale,"
                            "_weight_scale_2,_input_scale} names to w13 "
                            "(make_expert_params_mapping_fused_nvfp4); its release path is "
                            "not confirmed");
    return unverified("", "gpt-oss NVFP4 experts are not covered by our notes");
  }
  if (engine == "vLLM")
    return no("vLLM's gpt-oss loader reads the experts only under the fused names "
              "(experts.gate_up_proj -> w13); per-expert gate_proj/up_proj/down_proj, as "
              "llm-compressor saves gpt-oss, are not mapped (a loader for them, vLLM PR #29315, "
              "was closed unmerged); use --export modelopt");
  if (engine == "SGLang")
    return unverified("", "linearised gpt-oss experts (llm-compressor's layout) are not "
                          "covered by our notes");
  return std::nullopt;
}

}  // namespace

std::vector<ServeCommand> serve_commands(const ServeQuery& q) {
  std::vector<ServeCommand> out;
  if (q.formats.empty()) return out;
  const std::string dir = shell_word(q.output.empty() ? "OUT" : q.output);
  struct Engine {
    const char* name;
    Verdict v;
    std::string command;
  };
  Engine engines[] = {
      {"vLLM", vllm(q), "vllm serve " + dir},
      {"SGLang", sglang(q), "python -m sglang.launch_server --model-path " + dir},
      {"TensorRT-LLM", trtllm(q), "trtllm-serve " + dir},
  };
  for (Engine& e : engines) {
    if (e.v.support != EngineSupport::no)
      if (std::optional<Verdict> g = gpt_oss_verdict(e.name, q)) e.v = *g;
    ServeCommand c{e.name, "", e.v.support, e.v.note};
    if (c.support != EngineSupport::no) {
      c.command = e.command;
      if (!e.v.flags.empty()) c.command += " " + e.v.flags;
      if (q.kv_fp8) {
        // vLLM and SGLang apply k_scale / v_scale only with an FP8 cache dtype; TensorRT-LLM
        // takes it from kv_cache_quant_algo.
        if (c.engine == "vLLM") c.command += " --kv-cache-dtype fp8";
        if (c.engine == "SGLang") c.command += " --kv-cache-dtype fp8_e4m3";
      }
    }
    if (q.lm_head_quantized) {
      if (c.engine == "SGLang") {
        c = {e.name, "", EngineSupport::no, "SGLang does not load a quantized lm_head; rerun "
                                            "without --quantize-lm-head"};
      } else if (c.support == EngineSupport::loads) {
        c.support = EngineSupport::unverified;
        append_note(c.note, c.engine == "vLLM" && q.target == ExportFormat::modelopt &&
                                    q.formats.count(Format::nvfp4)
                                ? "quantized lm_head: recent vLLM builds only"
                                : "a quantized lm_head is not covered by our notes");
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace qf
