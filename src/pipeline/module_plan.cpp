#include "pipeline/module_plan.h"

#include "core/error.h"
#include "formats/int4.h"
#include "train/block_weights.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>

namespace qf {
namespace {

// Throws qf::Error (one line, naming the flags) for combinations that are refused.
AlgoModes check_options(const QuantizeOptions& options, const FormatInfo& info) {
  AlgoModes m;
  const AlgoRow& row = algo_row(options.algo);
  m.awq = row.awq;
  m.local_hessian = row.local_hessian;
  m.gptq = row.gptq;
  m.smoothquant = row.smoothquant;
  m.four_over_six = row.four_over_six;
  m.tune = row.tune;
  m.data_algo = row.data();
  // A plan's modules may quantize their inputs (a recipe's "activations"): calibrated too.
  std::string planned_act;
  if (options.assignment)
    for (const auto& [name, c] : options.assignment->modules)
      if (c.activations != ActQuant::none && planned_act.empty())
        planned_act = fmt::format("the plan's activations {} (module '{}')",
                                  act_quant_name(c.activations), name);
  m.calibrate = options.activations != ActQuant::none || options.kv_fp8 || m.data_algo ||
                options.calib_quantized_inputs || !planned_act.empty();
  if (m.calibrate && options.calib.files.empty()) {
    const std::string what =
        options.activations != ActQuant::none
            ? fmt::format("--activations {}", act_quant_name(options.activations))
        : !planned_act.empty() ? planned_act
        : options.kv_fp8 ? std::string("--kv-cache fp8")
        : m.data_algo    ? fmt::format("--algo {}", weight_algo_name(options.algo))
                         : std::string("--calib-quantized-inputs");
    fail("{} needs calibration data: pass --calib FILE (plain text or JSON Lines)", what);
  }
  if (options.activations == ActQuant::nvfp4 && options.format != Format::nvfp4)
    fail("--activations nvfp4 (W4A4) needs --format nvfp4, not {}", info.name);
  if (options.activations == ActQuant::fp8 && options.format != Format::fp8)
    fail("--activations fp8 (FP8 W8A8 per-tensor) needs --format fp8, not {}", info.name);
  // INT8 is W8A8 only (ModelOpt W8A8_SQ_PER_CHANNEL, compressed-tensors int-quantized):
  // smoothquant, or max (per-channel weights, unsmoothed inputs) for comparison.
  if (options.format == Format::int8 && options.activations != ActQuant::int8)
    fail("--format int8 is W8A8: pass --activations int8 (weight-only INT8 is not supported)");
  if (options.activations == ActQuant::int8 && options.format != Format::int8)
    fail("--activations int8 (W8A8) needs --format int8, not {}", info.name);
  if (m.smoothquant && options.format != Format::int8)
    fail("--algo smoothquant needs --format int8 --activations int8 (SmoothQuant W8A8), not {}",
         info.name);
  if (!(options.smoothquant_alpha >= 0.f && options.smoothquant_alpha <= 1.f))
    fail("--smoothquant-alpha must be in [0, 1], not {}", options.smoothquant_alpha);
  if (options.smoothquant_alpha != 1.0f && !m.smoothquant)
    fail("--smoothquant-alpha applies to --algo smoothquant only");
  if (options.format == Format::int8 && options.algo != WeightAlgo::smoothquant &&
      options.algo != WeightAlgo::max)
    fail("--format int8 supports --algo smoothquant or max, not {}", weight_algo_name(options.algo));
  m.per_tensor = options.format == Format::fp8 && options.activations == ActQuant::fp8;
  // A plan takes --kv-cache fp8 (its calibration only measures K/V amaxes) and the data-free
  // algorithms max and four_over_six (NVFP4 modules); nothing else calibrated yet.
  if (options.assignment &&
      (options.activations != ActQuant::none || m.data_algo || options.calib_quantized_inputs ||
       (options.algo != WeightAlgo::max && options.algo != WeightAlgo::four_over_six)))
    fail("a per-module plan (--auto / --recipe) takes --algo max or four_over_six and no "
         "--activations (its modules say their own activations)");
  if (options.assignment)
    for (const auto& [name, c] : options.assignment->modules) {
      if (c.algo != "max" && c.algo != "four_over_six")
        fail("module '{}': the plan asks for algo '{}'; per-module plans support max and "
             "four_over_six only", name, c.algo);
      if (c.algo == "four_over_six" && c.format.format != Format::nvfp4 &&
          !(c.format.format == Format::fp8 && c.activations == ActQuant::fp8))
        fail("module '{}': the plan asks for algo four_over_six with format {}; four_over_six "
             "chooses NVFP4 block scales (format nvfp4) or an FP8 W8A8 tensor's amax (format "
             "fp8 with activations fp8)", name, c.format.name());
      if ((c.activations == ActQuant::nvfp4 && c.format.format != Format::nvfp4) ||
          (c.activations == ActQuant::fp8 && c.format.format != Format::fp8) ||
          c.activations == ActQuant::int8)
        fail("module '{}': the plan asks for activations {} with format {}; a module takes nvfp4 "
             "activations with format nvfp4 and fp8 with fp8", name,
             act_quant_name(c.activations), c.format.name());
    }
  if (m.tune) {
    const char* name = "--algo";
    if (options.format == Format::int8 || m.per_tensor)
      fail("{} {}: block-wise tuning takes the block formats and FP8 weight-only (nvfp4, "
           "mxfp4, int4, fp8 without --activations fp8), not {}{}", name,
           weight_algo_name(options.algo), info.name, m.per_tensor ? " per tensor (W8A8)" : "");
    if (options.tune_iters < 1 || options.tune_iters > 100000)
      fail("--tune-iters must be in [1, 100000], not {}", options.tune_iters);
    if (!(options.tune_lr >= 0.f && options.tune_lr <= 1.f))
      fail("--tune-lr must be in (0, 1] (or 0: 1/iters), not {}", options.tune_lr);
    if (options.tune_batch < 1 || options.tune_batch > 4096)
      fail("--tune-batch must be in [1, 4096] windows, not {}", options.tune_batch);
    if (options.calib.samples < options.tune_batch)
      fail("--tune-batch {} needs at least as many calibration windows; --calib-samples is {}",
           options.tune_batch, options.calib.samples);
  } else if (options.tune_iters != 200 || options.tune_lr != 0.f || options.tune_batch != 8 ||
             options.tune_adam || !options.tune_target_fp || options.tune_weights) {
    fail("--tune-* flags apply to --algo tune and its combinations (local_hessian+tune, "
         "gptq+tune, ...), not {}", weight_algo_name(options.algo));
  }
  if (m.per_tensor && m.awq) fail("--algo awq is not available for FP8 per-tensor weights (W8A8)");
  if (m.local_hessian && options.format != Format::nvfp4)
    fail("--algo {} needs --format nvfp4 (it sweeps NVFP4 block scales), not {}",
         weight_algo_name(options.algo), info.name);
  // With a plan, --algo four_over_six applies to every NVFP4 module of it.
  if (m.four_over_six && options.format != Format::nvfp4 && !options.assignment)
    fail("--algo {} needs --format nvfp4 (it chooses each NVFP4 block's scale), not {}",
         weight_algo_name(options.algo), info.name);
  return m;
}

}  // namespace

bool matches_any(const std::string& name, const std::vector<std::string>& patterns,
                 std::string* matched) {
  for (const auto& p : patterns) {
    if (::fnmatch(p.c_str(), name.c_str(), 0) == 0 ||
        ::fnmatch(p.c_str(), (name + ".weight").c_str(), 0) == 0) {
      *matched = p;
      return true;
    }
  }
  return false;
}

ModulePlan plan_modules(const SourceModel& source, const QuantizeOptions& options,
                        const Exporter& exporter) {
  const std::filesystem::path& model_dir = source.dir;
  const Checkpoint& ckpt = *source.checkpoint;
  const Architecture& arch = source.arch;
  const FormatInfo& info = format_info(options.format);
  ModulePlan plan;
  // gpt-oss's MXFP4 release: its experts are cast to NVFP4 (max/RTN, weight-only); anything
  // else already quantized is refused.
  plan.mxfp4_cast = source.is_gpt_oss_mxfp4();
  if (!plan.mxfp4_cast) source.require_unquantized("quantize");
  if (plan.mxfp4_cast &&
      (options.format != Format::nvfp4 || options.algo != WeightAlgo::max || options.assignment ||
       options.activations != ActQuant::none || options.kv_fp8 || options.calib_quantized_inputs))
    fail("{}: gpt-oss's MXFP4 experts can be cast to NVFP4 weight-only (--format nvfp4 --algo max, "
         "no --activations, --kv-cache, --auto or --recipe); other formats and algorithms need "
         "the BF16 checkpoint", model_dir.string());
  // INT4 per channel (kInt4ChannelGroup): each module's block is its in_features.
  const bool free_block = info.block_rule == BlockRule::free;
  const bool int4_channel = free_block && options.block == kInt4ChannelGroup;
  const int block = (free_block && options.block > 0) ? options.block : info.block;
  if (options.block != 0 && !free_block)
    fail("--group-size applies to int4 only ({} has a fixed block of {})", info.name, info.block);

  const AlgoModes modes = check_options(options, info);
  // Block-wise tuning differentiates plain Llama blocks only: refused before any work.
  if (modes.tune)
    for (int64_t l = 0; l < arch.num_layers; ++l) {
      try {
        block_shape(arch, l);
      } catch (const Error& e) {
        fail("--algo {}: {}", weight_algo_name(options.algo), e.what());
      }
    }
  if (options.kv_fp8)
    for (const auto& l : arch.layers)
      if (l.has_attention && l.slot_of(LinearRole::k_proj) < 0)
        fail("{}: --kv-cache fp8 needs separate k_proj / v_proj modules to carry the scales; "
             "this {} checkpoint {}", model_dir.string(), arch.model_type,
             arch.is_mla() ? "has multi-head latent attention (kv_b_proj makes both)"
                           : "fuses them (qkv_proj)");
  const bool awq = modes.awq, smoothquant_algo = modes.smoothquant, per_tensor = modes.per_tensor;
  plan.modes = modes;
  plan.int4_channel = int4_channel;
  plan.block = block;

  // Decide, per Linear, whether it is quantized.
  std::vector<std::string> reason(arch.linears.size());
  std::vector<std::string> hint(arch.linears.size());
  std::vector<ExportedLinear> exported(arch.linears.size());
  std::vector<const CheckpointTensor*> weights(arch.linears.size());
  std::string pattern_unused;
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    const LinearModule& m = arch.linears[i];
    const CheckpointTensor* t = ckpt.find(m.weight_name());
    if (!t) fail("{}: tensor '{}' is missing", model_dir.string(), m.weight_name());
    const SafetensorsEntry& e = *t->entry;
    if (plan.mxfp4_cast && m.expert >= 0) {
      // MXFP4 codes [out, in/2] with E8M0 scales (model/expert_tensors splits the release).
      const CheckpointTensor* bias = ckpt.find(m.name + ".bias");
      const CheckpointTensor* scale = ckpt.find(m.name + ".weight_scale");
      if (e.dtype != DType::U8 || e.shape != Shape{m.out_features, m.in_features / 2} || !scale ||
          !bias)
        fail("{}: tensor '{}' is not an MXFP4 expert of the shape config.json implies",
             t->file->path().string(), m.weight_name());
      weights[i] = t;
      exported[i] = {m.name, options.format, m.out_features, m.in_features, block,
                     bias->entry->dtype};
      exported[i].fused_expert =
          m.role == LinearRole::gate_up_proj ? FusedExpert::gate_up : FusedExpert::down;
      plan.dropped.insert(scale->name);
      if (matches_any(m.name, options.exclude, &pattern_unused))
        fail("{}: --exclude '{}' matches an MXFP4 expert; the cast writes every expert in NVFP4 "
             "(keep them as they are by serving the release itself)", model_dir.string(),
             pattern_unused);
      continue;
    }
    if (e.shape != Shape{m.out_features, m.in_features})
      fail("{}: tensor '{}' has shape {} but config.json implies [{}, {}]", t->file->path().string(),
           m.weight_name(), shape_str(e.shape), m.out_features, m.in_features);
    if (!is_quantizable_float(e.dtype))
      fail("{}: tensor '{}' has dtype {}; quantization needs F32, F16 or BF16 weights",
           t->file->path().string(), m.weight_name(), dtype_name(e.dtype));
    weights[i] = t;
    exported[i] = {m.name, options.format, m.out_features, m.in_features,
                   int4_channel ? int(m.in_features) : block, e.dtype};
    exported[i].act = options.activations;
    exported[i].per_tensor = per_tensor;
    // AWQ scales of a Linear with no foldable norm before it (o_proj, down_proj; every Linear
    // of post-norm families) go out as pre_quant_scale in ModelOpt; compressed-tensors has no
    // such tensor, so those are quantized with max there.
    exported[i].pre_quant_scale =
        awq && exporter.stores_pre_quant_scale() && m.fold_norm < 0;
    // SmoothQuant: ModelOpt keeps every Linear's pre_quant_scale as a tensor (specs §4.3);
    // compressed-tensors folds q/k/v and gate/up scales into the norms (llm-compressor) and
    // leaves o_proj / down_proj unsmoothed.
    if (smoothquant_algo && exporter.stores_pre_quant_scale())
      exported[i].pre_quant_scale = true;
    if (m.expert >= 0 && arch.layers[size_t(m.layer)].moe.gate_up_interleaved) {
      exported[i].fused_expert =
          m.role == LinearRole::gate_up_proj ? FusedExpert::gate_up : FusedExpert::down;
      // One fused tensor holds no per-expert pre_quant_scale: AWQ quantizes these with max, as
      // compressed-tensors' Linears without a foldable norm.
      if (exporter.fuses_experts() && awq) exported[i].pre_quant_scale = false;
    }
    if (options.kv_fp8 && m.role == LinearRole::k_proj) exported[i].kv_scale = 'k';
    if (options.kv_fp8 && m.role == LinearRole::v_proj) exported[i].kv_scale = 'v';
    std::string pattern;
    const ModuleChoice planned = options.assignment ? options.assignment->at(m.name) : ModuleChoice{};
    if (options.assignment && !planned.format.is_keep()) {
      exported[i].format = *planned.format.format;
      exported[i].block = planned.format.block_for(m.in_features);
      exported[i].act = planned.activations;
      exported[i].per_tensor = planned.activations == ActQuant::fp8;
    }
    // Each reason comes with what would lift it, so the summary says what to do, not only why.
    if (matches_any(m.name, options.exclude, &pattern)) {
      reason[i] = fmt::format("excluded by --exclude '{}'", pattern);
      hint[i] = fmt::format("drop --exclude '{}' to quantize it", pattern);
    } else if (options.assignment && planned.format.is_keep()) {
      reason[i] = "kept in its dtype by the plan";
      hint[i] = "a looser --auto target, or a recipe rule giving it a format, quantizes it";
    } else if (m.in_features % exported[i].block != 0) {
      const FormatInfo& f = format_info(exported[i].format);
      reason[i] = fmt::format("in_features {} is not a multiple of the {} block of {}",
                              m.in_features, f.name, exported[i].block);
      hint[i] = f.block_rule == BlockRule::free
                    ? "--group-size channel (one INT4 scale per output channel) fits any "
                      "in_features"
                    : fmt::format("--auto picks a format that fits it; or by hand: --format int4 "
                                  "--group-size channel, or a recipe rule {{\"match\": \"{}\", "
                                  "\"format\": \"int4:channel\"}} (or \"fp8\")",
                                  m.name);
    } else if (auto why = exporter.unsupported_reason(exported[i]); !why.empty()) {
      reason[i] = why;
      hint[i] = fmt::format("--export {} may write it, or a recipe rule giving it another format",
                            exporter.kind() == ExportFormat::modelopt ? "compressed-tensors" : "modelopt");
    }
  }
  // Engines fuse q/k/v and gate/up: a group is quantized entirely or not at all, in one format.
  for (const auto& group : arch.fused_groups)
    for (size_t i : group)
      if (exported[i].format != exported[group[0]].format ||
          exported[i].block != exported[group[0]].block)
        fail("the plan gives fused modules '{}' and '{}' different formats",
             arch.linears[group[0]].name, arch.linears[i].name);
  // gpt-oss experts written as one tensor per projection (ModelOpt): each such tensor is a unit
  // like a fused group, and its experts share one tensor scale.
  std::vector<ModulePlan::ExpertStack> stacks;
  if (exporter.fuses_experts())
    for (const LayerSpec& layer : arch.layers) {
      if (!layer.is_moe || !layer.moe.gate_up_interleaved) continue;
      const std::string moe_block = layer.moe.router.substr(0, layer.moe.router.rfind('.') + 1);
      for (int r = 1; r < 3; ++r) {
        ModulePlan::ExpertStack st;
        for (const auto& slots : layer.moe.experts)
          st.linears.push_back(layer.linears[size_t(slots[size_t(r)])]);
        st.name = moe_block + "experts." + std::string(linear_role_name(arch.linears[st.linears[0]].role));
        for (size_t i : st.linears)
          if (exported[i].format != exported[st.linears[0]].format ||
              exported[i].block != exported[st.linears[0]].block)
            fail("the plan gives '{}' and '{}' different formats; {} writes them as one tensor "
                 "('{}')", arch.linears[st.linears[0]].name, arch.linears[i].name,
                 export_format_name(exporter.kind()), st.name);
        stacks.push_back(std::move(st));
      }
    }
  std::vector<std::vector<size_t>> units = arch.fused_groups;
  for (const auto& st : stacks) units.push_back(st.linears);
  for (const auto& group : units) {
    auto excluded_member = std::find_if(group.begin(), group.end(),
                                        [&](size_t i) { return !reason[i].empty(); });
    if (excluded_member == group.end()) continue;
    for (size_t i : group)
      if (reason[i].empty()) {
        reason[i] = fmt::format("fused with {}, which is not quantized",
                                arch.linears[*excluded_member].name);
        hint[i] = fmt::format("quantized together with {} once that one is",
                              arch.linears[*excluded_member].name);
      }
  }
  std::map<std::string, int> linear_by_weight;
  std::vector<std::string> excluded_names = arch.never_quantized_modules();
  // An unquantized fused expert tensor is listed as its module (`...mlp.experts`, which holds
  // both projections, as ModelOpt names the GptOssExperts it leaves alone), once.
  std::map<size_t, std::string> stacked_module;
  for (const auto& st : stacks)
    for (size_t i : st.linears) stacked_module[i] = st.name.substr(0, st.name.rfind('.'));
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    if (reason[i].empty()) {
      linear_by_weight[arch.linears[i].weight_name()] = int(i);
      continue;
    }
    plan.excluded.push_back({arch.linears[i].name, reason[i], hint[i]});
    if (auto it = stacked_module.find(i); it != stacked_module.end()) {
      if (std::find(excluded_names.begin(), excluded_names.end(), it->second) == excluded_names.end())
        excluded_names.push_back(it->second);
      continue;
    }
    excluded_names.push_back(arch.linears[i].name);
  }
  // The output head (--quantize-lm-head): its own tensor, or the tied embedding's, which then
  // stays as it is and gains a quantized copy named lm_head.
  const CheckpointTensor* head_src = nullptr;
  bool head_tied = false;
  ExportedLinear head;
  // A plan quantizes the head where it names it (a recipe rule for lm_head), weight-only.
  const ModuleChoice head_choice =
      options.assignment ? options.assignment->at(arch.head_module) : ModuleChoice{};
  const bool head_planned = !head_choice.format.is_keep();
  if (options.quantize_lm_head || head_planned) {
    if (options.quantize_lm_head && (options.assignment || options.activations != ActQuant::none))
      fail("--quantize-lm-head is weight-only and single-format for now (no --activations, "
           "--auto or --recipe; a recipe quantizes the head with a rule for lm_head)");
    head_src = ckpt.find(arch.head_name);
    const CheckpointTensor* embed = ckpt.find(arch.embed_name);
    head_tied = !head_src || ckpt.aliases().count(arch.head_name) > 0;
    if (head_tied) {
      if (!arch.tie_word_embeddings || !embed)
        fail("{}: tensor 'lm_head.weight' is missing", model_dir.string());
      head_src = embed;
    } else if (!embed || ckpt.aliases().count(arch.embed_name)) {
      fail("{}: 'lm_head.weight' is also the token embedding; --quantize-lm-head needs a "
           "stored model.embed_tokens.weight", model_dir.string());
    }
    const SafetensorsEntry& e = *head_src->entry;
    if (e.shape != Shape{arch.vocab_size, arch.hidden_size} || !is_quantizable_float(e.dtype))
      fail("{}: tensor '{}' ({} {}) cannot be quantized as the output head", model_dir.string(),
           head_src->name, dtype_name(e.dtype), shape_str(e.shape));
    const Format head_format = head_planned ? *head_choice.format.format : options.format;
    const int head_block = head_planned ? head_choice.format.block_for(arch.hidden_size) : block;
    head = {arch.head_module, head_format, arch.vocab_size, arch.hidden_size, head_block, e.dtype};
    plan.head_four_over_six = head_planned && head_choice.algo == "four_over_six";
    std::string why = arch.hidden_size % head_block != 0
                          ? fmt::format("hidden_size {} is not a multiple of the {} block of {}",
                                        arch.hidden_size, format_info(head_format).name, head_block)
                          : exporter.unsupported_reason(head);
    if (!why.empty())
      fail("{}: lm_head cannot be quantized: {}",
           head_planned ? "the plan" : "--quantize-lm-head", why);
    std::erase(excluded_names, arch.head_module);
    plan.warnings.push_back(
        "lm_head is quantized: engines may not load it. vLLM loads an "
        "NVFP4 lm_head from ModelOpt exports only in recent builds (ModelOptNvFp4LMHeadMethod); "
        "SGLang and older vLLM builds do not. llm-compressor also writes quantized heads for "
        "compressed-tensors; other formats' heads have not been checked in any engine");
  }
  std::sort(excluded_names.begin(), excluded_names.end());
  if (linear_by_weight.empty())
    plan.warnings.push_back(fmt::format("no Linear module can be quantized to {}", info.name));
  plan.scale_group.assign(arch.linears.size(), -1);
  for (const auto& group : units) {
    for (size_t i : group) plan.scale_group[i] = int(plan.scale_groups.size());
    plan.scale_groups.push_back(group);
  }
  plan.stacks = std::move(stacks);
  plan.four_over_six.assign(arch.linears.size(), 0);
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    const bool planned =
        options.assignment && options.assignment->at(arch.linears[i].name).algo == "four_over_six";
    // NVFP4: each block's scale maps its max to 6 or 4; FP8 per tensor (a plan's W8A8 module):
    // the tensor's amax is 1.0x or 1.5x its max (ModelOpt's search in the same recipes).
    plan.four_over_six[i] =
        (exported[i].format == Format::nvfp4 && (modes.four_over_six || planned)) ||
        (exported[i].format == Format::fp8 && exported[i].per_tensor && planned);
  }
  for (const auto& group : units)
    for (size_t i : group)
      if (plan.four_over_six[i] != plan.four_over_six[group[0]])
        fail("the plan gives fused modules '{}' and '{}' different algorithms (four_over_six and "
             "max); they share one tensor scale", arch.linears[group[0]].name,
             arch.linears[i].name);
  plan.reason = std::move(reason);
  plan.exported = std::move(exported);
  plan.weights = std::move(weights);
  plan.linear_by_weight = std::move(linear_by_weight);
  plan.excluded_names = std::move(excluded_names);
  plan.head_src = head_src;
  plan.head_tied = head_tied;
  plan.head = head;
  return plan;
}

}  // namespace qf
