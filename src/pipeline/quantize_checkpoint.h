// Weight-only quantization of a whole checkpoint, streamed tensor by tensor: read a Hugging Face
// checkpoint, quantize its Linear weights, and write a checkpoint in an engine's format. Memory
// holds one tensor (and its quantized form) at a time, whatever the model's size.
#pragma once

#include "calib/calibration_data.h"
#include "targets/exporter.h"
#include "targets/serving.h"
#include "formats/registry.h"
#include "formats/weight_rows.h"
#include "kernels/linear.h"
#include "pipeline/source_model.h"
#include "plan/candidates.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace qf {

// Weight algorithm (--algo). max, mse and four_over_six need no data; the others calibrate.
// local_hessian and local_hessian+gptq are NVFP4 only (static-block scales from the
// Hessian-weighted FP8 sweep; the latter then runs GPTQ with those scales frozen).
// four_over_six and four_over_six+gptq are NVFP4 only (each block's scale maps its max to 6 or
// to 4, whichever has the smaller block error, algo/four_over_six.h; the latter then runs GPTQ
// with those scales frozen). smoothquant is INT8 W8A8 only.
enum class WeightAlgo {
  max, mse, awq, gptq, awq_gptq, local_hessian, local_hessian_gptq, four_over_six,
  four_over_six_gptq, smoothquant, tune, local_hessian_tune, gptq_tune, local_hessian_gptq_tune,
  four_over_six_tune
};
std::string_view weight_algo_name(WeightAlgo a);
// Accepts the names weight_algo_name gives and their '_' spellings (awq_gptq).
std::optional<WeightAlgo> parse_weight_algo(std::string_view name);

// One row per --algo: the steps it chains, in order AWQ scaling (or SmoothQuant smoothing) ->
// block scales (local_hessian, or four_over_six, which needs no data) -> GPTQ column sweep;
// rows without a calibrated step are data-free (max, mse, four_over_six).
struct AlgoRow {
  WeightAlgo algo;
  std::string_view name;
  bool awq, smoothquant, local_hessian, gptq;
  bool four_over_six = false;  // NVFP4 block scales by Four Over Six (data-free)
  // Then block-wise tuning (train/block_tuning): each decoder block's rounding offsets learnt
  // on the quantized-path hidden states, from the steps before as the init (max for `tune`).
  bool tune = false;
  bool data() const { return awq || smoothquant || local_hessian || gptq || tune; }
};
const AlgoRow& algo_row(WeightAlgo a);

struct QuantizeOptions {
  Format format = Format::nvfp4;
  WeightAlgo algo = WeightAlgo::max;
  ActQuant activations = ActQuant::none;  // nvfp4 needs format nvfp4, fp8 needs format fp8,
                                          // int8 and format int8 need each other
  bool kv_fp8 = false;                    // --kv-cache fp8
  CalibrationOptions calib;               // --calib files (required when anything calibrates)
  // When set, these windows (calib.seq_len tokens each) are calibrated on instead of reading
  // calib.files (qforge tune --calib-generate: the teacher's sampled windows).
  std::shared_ptr<const CalibrationData> calib_windows;
  bool calib_quantized_inputs = false;    // layers see the outputs of quantized predecessors
  // Block-wise tuning (--algo ...tune): --tune-iters, --tune-lr (0: 1/iters), --tune-batch
  // (windows per step), --tune-optimizer, --tune-target (the output each block is tuned toward:
  // the original model's own hidden states, as AutoRound does (fp, the default: lower KL on the
  // fixtures), or the original block on the quantized-path inputs).
  int64_t tune_iters = 200;
  float tune_lr = 0.f;
  int64_t tune_batch = 8;
  bool tune_adam = false;
  bool tune_target_fp = true;
  bool tune_weights = false;  // --tune-params weights: unbounded offsets (the weights themselves)
  // MoE (--calib-moe): false = each expert is calibrated on the tokens routed to it; true =
  // on all tokens of its layer (ModelOpt's way: no expert goes uncalibrated; E/k times the
  // expert compute during calibration).
  bool calib_moe_all = false;
  float smoothquant_alpha = 1.0f;         // migration strength (ModelOpt 1.0, llm-compressor 0.5)
  ExportFormat export_format = ExportFormat::modelopt;
  std::vector<std::string> exclude;  // glob patterns over module names (fnmatch)
  // --quantize-lm-head: also quantize the output head (weight-only, max or mse). Tied
  // embeddings are untied: lm_head is written quantized, model.embed_tokens keeps its dtype.
  bool quantize_lm_head = false;
  int block = 0;                     // INT4 group size; 0 = the format's default
  int threads = 0;                   // 0 = all hardware threads
  // Which build of ModelOpt the constant divisions of scales reproduce (formats/weight_rows.h);
  // set process-wide for the run.
  ConstantDivision scale_division = ConstantDivision::gpu;
  KernelMode kernels = KernelMode::exact;  // Linear products of the calibration forward
  uint64_t max_shard_bytes = 5'000'000'000;
  bool force = false;     // replace an existing output directory
  // Copy unquantized tensors holding NaN/Inf (embeddings, norms, skipped Linears) with a
  // warning instead of failing; tensors to be quantized must be finite regardless.
  bool allow_nonfinite = false;
  bool progress = true;   // progress bar on stderr when it is a terminal
  // Mixed precision (--auto, --recipe): each Linear's own format, block and data-free algorithm
  // (max, or four_over_six for NVFP4 modules; fused groups must agree; a module absent or
  // "keep" stays unquantized); `format` and `block` are then unused, and `algo` must be max or
  // four_over_six. Weight-only for now (no activations or data algorithms; --kv-cache fp8 is
  // allowed: its scales go on the quantized k_proj / v_proj, as with --exclude).
  std::optional<Assignment> assignment;
  // End-to-end tuning (qforge tune, pipeline/distill.h). `replace_linear`, when set, is asked
  // for each quantized decoder Linear (Architecture::linears index) as it is written: a tensor
  // returned is written instead of the algorithm's (same format and shape; nullopt: as usual).
  // `on_linear`, when set, sees the tensor each quantized decoder Linear is written with.
  std::function<std::optional<QuantizedTensor>(size_t)> replace_linear;
  std::function<void(size_t, const QuantizedTensor&)> on_linear;
  // `replace_float`, when set, is asked for each tensor written unquantized, by its output name:
  // values returned (float32, the tensor's element count) are written in the tensor's dtype
  // instead of the source's (the embedding and head that `tune --embedding-lr` trained).
  std::function<std::optional<std::vector<float>>(const std::string&)> replace_float;
};

// Whether --exclude patterns (fnmatch globs) match module `name` (or `name`.weight).
bool excluded_by_patterns(const std::string& name, const std::vector<std::string>& patterns);

struct ExcludedModule {
  std::string name;
  std::string reason;
  std::string hint;  // what would quantize it (a flag, a recipe rule), for the summary
};

// One decision unit (a Linear, or a fused group) of an --auto plan as chosen.
struct AutoPlanUnit {
  std::string unit;             // e.g. "model.layers.0.self_attn.q_proj+k_proj+v_proj"
  std::string format;           // "nvfp4", "int4:128", "keep", ...
  double bits = 0;              // stored bits per weight, scales included
  double predicted_error = 0;   // the score the solver minimised (0 for keep)
  uint64_t bytes = 0;
};

// What --auto solved and chose, for the summary.
struct AutoPlanSummary {
  std::string target;           // "--target-bits 5"
  std::string measure;          // what predicted_error measures, in words
  std::string solved;           // one line: the constraint, the budget and what was reached
  double achieved = 0;          // the target's own quantity for the choice
  double bits_per_weight = 0;
  uint64_t linear_bytes = 0;    // the units' chosen bytes
  uint64_t budget_bytes = 0;    // what the target allows them
  bool exact_solve = true;      // false: sizes were rounded to keep the search small
  double seconds = 0;           // scoring and solving
  std::vector<AutoPlanUnit> units;
};

// What becomes of one Linear (or the output head) in a plan: its stored format and bits per
// weight (scales included), or "keep" with its dtype's bits and the reason it is kept.
struct ModuleDecision {
  std::string name;
  std::string format;  // "nvfp4", "int4:128", "int4:channel", ... or "keep"
  double bits = 0;
  std::string reason;  // empty when quantized
};

struct QuantizeReport {
  bool dry_run = false;  // a plan only (plan_quantization): nothing was written
  std::filesystem::path output;
  std::string format;
  std::string export_format;
  uint64_t bytes_in = 0;   // sizes of the input safetensors files
  uint64_t bytes_out = 0;  // sizes of the output safetensors files
  double seconds = 0;
  int modules_quantized = 0;
  // FP8 W8A8 tensors whose amax Four Over Six chose (a plan's), and how many took 1.5x the max.
  int fp8_four_over_six_tensors = 0, fp8_four_over_six_wide = 0;
  // A per-module plan: how many modules (the head included) each scheme took ("nvfp4",
  // "nvfp4 four_over_six", "fp8 W8A8", ...); empty without a plan.
  std::map<std::string, int> module_schemes;
  int modules_excluded = 0;  // Linear modules of the decoder left unquantized
  bool lm_head_quantized = false;  // --quantize-lm-head (not counted in modules_quantized)
  int tensors_copied = 0;
  int64_t quantized_weights = 0;  // weight elements that were quantized
  uint64_t quantized_bytes = 0;   // bytes of the tensors that replace them (codes and scales)
  int shards = 0;
  uint64_t peak_rss_bytes = 0;
  // Calibration (zero when none ran).
  std::string algo = "max";
  std::string activations = "none";
  std::string kv_cache = "none";
  int64_t calib_tokens = 0;
  double calib_seconds = 0;       // layer forwards and statistics
  double algo_seconds = 0;        // the weight algorithms during calibration
  // Block-wise tuning, per decoder layer: the block output's mean squared error against the
  // target over all calibration windows with the init's weights and with the tuned ones (the
  // init is kept when tuning did not lower it), and the seconds tuning took.
  struct TunedLayer {
    int64_t layer = 0;
    double mse_init = 0, mse_tuned = 0;
    bool kept_init = false;
    double seconds = 0;
  };
  std::vector<TunedLayer> tuned_layers;
  uint64_t activation_bytes = 0;  // hidden states held during calibration
  // MoE: per MoE layer (in layer order, "layer" = its index), the calibration tokens routed to
  // each expert.
  struct ExpertTokens {
    int64_t layer = 0;
    std::vector<int64_t> tokens;
  };
  std::vector<ExpertTokens> expert_tokens;
  // gpt-oss's MXFP4 release cast to NVFP4 (formats/mxfp4_nvfp4_cast.h): MXFP4 blocks of 32
  // cast, and those whose scale lay beyond the 18 binades E4M3 x tensor scale holds exactly and
  // that changed when requantized (0: the experts dequantize to the same values).
  bool mxfp4_cast = false;
  int64_t mxfp4_blocks = 0;
  int64_t mxfp4_inexact_blocks = 0;
  // Four Over Six: NVFP4 blocks it chose for, and those that map their max to 4 (M=4).
  int64_t four_over_six_blocks = 0;
  int64_t four_over_six_m4_blocks = 0;
  std::vector<ExcludedModule> excluded;
  std::vector<std::string> warnings;
  std::vector<ModuleDecision> modules;  // per Linear in architecture order, then lm_head (dry run)
  // Wall time is `seconds`, everything included; these are parts of it.
  double plan_seconds = 0;   // --auto: scoring and solving (before quantize_checkpoint)
  double write_seconds = 0;  // step 3, writing (and data-free quantization)
  std::optional<AutoPlanSummary> auto_plan;
  std::string html;                 // the --auto HTML report written, if any
  std::vector<ServeCommand> serve;  // how to serve the output, per engine

  double bits_per_quantized_weight() const {
    return quantized_weights ? double(quantized_bytes) * 8.0 / double(quantized_weights) : 0.0;
  }
};

// Quantizes `model` into `out_dir`. The output is written under a temporary name and
// renamed when complete; inputs are only read (the checkpoint as opened, never re-read).
// Throws qf::Error (one line naming the file, tensor or module) on bad input, NaN/Inf weights,
// an existing output without `force`, or a failed write.
QuantizeReport quantize_checkpoint(const SourceModel& model, const std::filesystem::path& out_dir,
                                   const QuantizeOptions& options);

// What quantize_checkpoint would do, without calibrating or writing anything: the same
// decisions (and the same errors for options that do not combine or tensors that do not match),
// the per-module table, and the output's safetensors bytes exactly as the writer lays them out
// (bytes_out, quantized_bytes, quantized_weights, shards). Times and memory are zero.
// `out_dir` only names the output in the serve commands ("OUT" when empty).
QuantizeReport plan_quantization(const SourceModel& model, const QuantizeOptions& options,
                                 const std::filesystem::path& out_dir = {});

}  // namespace qf
