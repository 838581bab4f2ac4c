// The planning flags of `qforge quantize`: --recipe, --save-recipe, and --auto with one target
// (--target-bits, --target-size, --fit-memory + --context [--batch], --min-speedup).
#include "cli/commands.h"
#include "core/error.h"
#include "core/progress.h"
#include "targets/exporter.h"
#include "io/checkpoint.h"
#include "pipeline/auto_plan.h"
#include "pipeline/quantize_checkpoint.h"
#include "plan/presets.h"
#include "plan/recipe.h"

#include <fmt/format.h>

namespace qf::cli {

void add_plan_options(CLI::App* cmd, PlanArgs& a) {
  cmd->add_option("--recipe", a.recipe,
                  "Per-module formats from a recipe file, JSON or (.yaml / .yml) the same in "
                  "YAML: {\"rules\": [{\"match\": GLOB or "
                  "\"re:REGEX\", \"format\": " + format_names("|", true) +
                      "|keep, \"algo\": max|four_over_six (optional; NVFP4 rules, or FP8 rules with fp8 "
                      "activations: the 1.0x/1.5x amax), "
                      "\"activations\": nvfp4|fp8 (optional: W4A4 / FP8 W8A8; calibrated)}, "
                      "...], \"kv_cache\": fp8 (optional)}; the first matching rule wins, "
                      "unmatched modules take --format; a rule matching lm_head quantizes the "
                      "output head; --algo four_over_six applies to every NVFP4 module");
  cmd->add_option("--preset", a.preset,
                  "A recipe shipped with qforge (NVIDIA's published Nemotron recipes; "
                  "needs --calib where it quantizes activations or the KV cache); "
                  "'--preset list' prints them. Presets:\n" + preset_listing());
  cmd->add_option("--save-recipe", a.save_recipe,
                  "Write the per-module choice (of --auto or --recipe) as a recipe file that "
                  "--recipe replays exactly");
  cmd->add_flag("--auto", a.auto_plan,
                "Choose each module's format (from --formats, or keep) to meet one target with "
                "the least sensitivity (calibration proxy; needs --calib)");
  cmd->add_flag("--auto-exact", a.auto_exact,
                "--auto: score each module and format by the exact KL of the final logits with "
                "only it quantized (one model run per module and format over the calibration "
                "windows) instead of the layer-local proxy: slower, better choices on small models");
  cmd->add_option("--auto-experts", a.auto_experts,
                  "--auto on mixtures of experts: layer (one format for all routed experts of a "
                  "layer, what vLLM's fused-MoE layers load) or expert (each expert's gate/up and "
                  "down decided alone; for engines that take per-expert formats). Speed targets "
                  "count top_k / experts of the routed experts' bytes per token")
      ->check(name_choice("MoE decision unit", {"layer", "expert"}))
      ->capture_default_str();
  cmd->add_option("--formats", a.formats,
                  "--auto: candidate formats, comma-separated: " + format_names(", ", true) +
                      " (int4: group 128), " + free_block_choice_names(", ") +
                      " (one scale per output channel, only where no other "
                  "int4 choice fits), nvfp4:4o6 (NVFP4 with Four Over Six block scales: the "
                  "same bytes as nvfp4, so each unit takes whichever of the two scores better). "
                  "Default nvfp4,fp8, plus mxfp4,int4,int4:channel when the target is below what "
                  "nvfp4,fp8 reach; with --algo four_over_six every nvfp4 candidate is nvfp4:4o6");
  cmd->add_option("--html", a.html,
                  "--auto: write a self-contained HTML report of the plan to this file: the "
                  "predicted error against bits per weight with the chosen point and the target, "
                  "the chosen format per unit, the sensitivity bars and the calibration settings");
  cmd->add_option("--target-bits", a.target_bits,
                  "--auto: average bits per weight over the quantizable Linear weights, scales "
                  "included (kept modules count at their dtype)")
      ->check(finite_range(1.0, 32.0));
  cmd->add_option("--target-size", a.target_size,
                  "--auto: largest size of the output's safetensors files, e.g. 1.5GB");
  cmd->add_option("--fit-memory", a.fit_memory,
                  "--auto: weights plus the KV cache of --context tokens (x --batch) must fit this");
  cmd->add_option("--context", a.context,
                  "--fit-memory, --min-speedup: tokens of KV cache per sequence (--min-speedup: "
                  "the cache each decode step reads; default none)");
  cmd->add_option("--batch", a.batch,
                  "--fit-memory, --min-speedup: sequences (decoded together: the weights read "
                  "once per step, each sequence's cache once)")
      ->capture_default_str();
  cmd->add_option("--min-speedup", a.min_speedup,
                  "--auto: estimated decode throughput over BF16 from the bytes a decode step "
                  "reads (weights once; with --context, the --batch sequences' KV caches, BF16 "
                  "against the plan's)")
      ->check(finite_range(1.0, 16.0));
}

bool apply_plan(const PlanArgs& a, QuantizeOptions& o, const SourceModel& model, bool quiet,
                AutoPlanSummary* summary, AutoPlanReport* report) {
  const int targets = (a.target_bits > 0) + !a.target_size.empty() + !a.fit_memory.empty() +
                      (a.min_speedup > 0);
  if (!a.auto_plan && (targets > 0 || a.auto_exact))
    fail("--auto-exact / --target-bits / --target-size / --fit-memory / --min-speedup need --auto");
  if (int(a.auto_plan) + !a.recipe.empty() + !a.preset.empty() > 1)
    fail("--auto, --recipe and --preset are exclusive");
  if (!a.html.empty() && !a.auto_plan) fail("--html needs --auto (sensitivity alone: qforge sensitivity --html)");
  if (!a.auto_plan && a.recipe.empty() && a.preset.empty()) {
    if (!a.save_recipe.empty()) fail("--save-recipe needs --auto, --recipe or --preset");
    return false;
  }
  const Checkpoint& ck = *model.checkpoint;
  const Architecture& arch = model.arch;
  if (!a.recipe.empty() || !a.preset.empty()) {
    ModuleChoice def;
    def.format = FormatChoice::of(o.format, o.block);
    const Recipe recipe = a.preset.empty() ? load_recipe(a.recipe) : load_preset(a.preset);
    o.assignment = apply_recipe(recipe, arch, def);
    // A recipe's FP8 KV cache is --kv-cache fp8.
    o.kv_fp8 = o.kv_fp8 || recipe.kv_fp8;
  } else {
    if (targets != 1)
      fail("--auto needs exactly one of --target-bits, --target-size, --fit-memory, --min-speedup");
    if (o.calib.files.empty()) fail("--auto needs calibration data: pass --calib FILE");
    AutoPlanOptions ao;
    ao.sensitivity.calib = o.calib;
    if (a.formats.empty()) {
      ao.sensitivity.formats = parse_format_list("nvfp4,fp8");
      ao.fallback_formats = parse_format_list("mxfp4,int4,int4:channel");
    } else {
      ao.sensitivity.formats = parse_format_list(a.formats);
    }
    // --algo four_over_six: the plan's NVFP4 modules take Four Over Six (module_plan), so they
    // are scored as such.
    if (o.algo == WeightAlgo::four_over_six)
      for (FormatChoice& f : ao.sensitivity.formats)
        if (f.format == Format::nvfp4) f.four_over_six = true;
    // --exclude: those modules only keep; and no format the exporter cannot write for a module.
    std::shared_ptr<const Exporter> exporter = make_exporter(o.export_format);
    const std::vector<std::string> exclude = o.exclude;
    const DType dtype = [&] {
      const CheckpointTensor* t =
          arch.linears.empty() ? nullptr : ck.find(arch.linears[0].weight_name());
      return t ? t->entry->dtype : DType::BF16;
    }();
    auto exported = [dtype](const LinearModule& m, const FormatChoice& f) {
      ExportedLinear l;
      l.module = m.name;
      l.format = *f.format;
      l.rows = m.out_features;
      l.cols = m.in_features;
      l.block = f.block_for(m.in_features);
      l.model_dtype = dtype;
      return l;
    };
    ao.sensitivity.excluded = [exclude](const LinearModule& m) {
      return excluded_by_patterns(m.name, exclude);
    };
    ao.allowed = [exporter, exclude, exported](const LinearModule& m, const FormatChoice& f) {
      if (excluded_by_patterns(m.name, exclude)) return false;
      return exporter->unsupported_reason(exported(m, f)).empty();
    };
    // The budget counts what this export writes, so `qforge inspect` measures the plan's bytes.
    ao.sensitivity.stored_bytes = [exporter, exported](const LinearModule& m, const FormatChoice& f) {
      uint64_t bytes = 0;
      for (const TensorSpec& t : exporter->linear_specs(exported(m, f))) bytes += t.nbytes();
      return bytes;
    };
    // --kv-cache fp8: one F32 scalar each for k and v per attention layer, with its header entry.
    if (o.kv_fp8)
      for (const LayerSpec& l : arch.layers)
        if (l.has_attention) ao.added_fixed_bytes += 2 * (4 + 128);
    ao.sensitivity.threads = o.threads;
    ao.sensitivity.kernels = o.kernels;
    ao.sensitivity.progress = o.progress;
    ao.sensitivity.exact = a.auto_exact;
    ao.sensitivity.experts_per_layer = a.auto_experts == "layer";
    if (a.target_bits > 0) {
      ao.target = {TargetKind::bits, a.target_bits};
    } else if (!a.target_size.empty()) {
      ao.target = {TargetKind::size, double(parse_size(a.target_size))};
    } else if (!a.fit_memory.empty()) {
      if (a.context < 1) fail("--fit-memory needs --context N (tokens of KV cache)");
      // The KV cache is counted in the dtype the engine will hold it in: FP8 with --kv-cache fp8.
      ao.target = {TargetKind::memory, double(parse_size(a.fit_memory)), a.context, a.batch,
                   o.kv_fp8 ? 1 : 2};
    } else {
      if (a.batch > 1 && a.context < 1)
        fail("--min-speedup --batch {} needs --context N: without a KV cache every sequence "
             "shares the step's weight reads and the batch does not change the estimate",
             a.batch);
      ao.target = {TargetKind::speedup, a.min_speedup, a.context, a.batch, o.kv_fp8 ? 1 : 2};
    }
    const AutoPlan p = plan_auto(model, ao);
    if (!quiet && p.formats.size() > ao.sensitivity.formats.size())
      fmt::print(stderr, "qforge: --auto: nvfp4,fp8 cannot reach the target; candidates "
                         "extended with mxfp4,int4,int4:channel\n");
    const AutoPlanSummary s = auto_plan_summary(p);
    // Quantizing takes a while after this: say now what was chosen (the unit table follows in
    // the summary at the end).
    if (!quiet) {
      fmt::print(stderr, "qforge: --auto {}: {}\n", s.target, s.solved);
      fmt::print(stderr, "{}", p.summary);
    }
    if (summary) *summary = s;
    if (report && !a.html.empty()) *report = auto_plan_report(p);
    o.assignment = p.assignment;
  }
  if (!a.save_recipe.empty()) save_recipe(a.save_recipe, *o.assignment, arch, o.kv_fp8);
  return true;
}

}  // namespace qf::cli
