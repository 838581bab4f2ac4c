#include "pipeline/distill_start.h"

#include "core/error.h"
#include "engine/model.h"
#include "io/checkpoint.h"
#include "pipeline/module_plan.h"
#include "pipeline/source_model.h"
#include "targets/exporter.h"

#include <cstring>
#include <optional>

namespace qf {
namespace fs = std::filesystem;

namespace {

// Per layer the static input scales of `q`'s quantized Linears for activation mode `mode`; 0
// where the export keeps the Linear (and so its input) unquantized.
std::vector<BlockActQuant> input_scales(const Model& q, ActQuant mode) {
  std::vector<BlockActQuant> act;
  const Architecture& arch = q.arch();
  for (int64_t l = 0; l < arch.num_layers; ++l) {
    const LayerSpec& spec = arch.layers[size_t(l)];
    const LayerWeights& lw = q.weights().layers[size_t(l)];
    auto scale = [&](LinearRole r) {
      const EngineLinear& L = lw.linears[size_t(spec.slot_of(r))];
      return L.act == mode ? L.input_scale : 0.f;
    };
    BlockActQuant a;
    a.mode = mode;
    a.attn_in = scale(LinearRole::q_proj);
    a.o_in = scale(LinearRole::o_proj);
    a.mlp_in = scale(LinearRole::gate_proj);
    a.down_in = scale(LinearRole::down_proj);
    act.push_back(a);
  }
  return act;
}

std::optional<Format> format_of(WeightFormat f) {
  switch (f) {
    case WeightFormat::nvfp4: return Format::nvfp4;
    case WeightFormat::mxfp4: return Format::mxfp4;
    default: return std::nullopt;
  }
}

bool is_float(WeightFormat f) {
  return f == WeightFormat::f32 || f == WeightFormat::f16 || f == WeightFormat::bf16;
}

}  // namespace

DistillStart quantize_start(const SourceModel& model, const fs::path& out_dir,
                            const QuantizeOptions& options) {
  DistillStart start;
  QuantizeOptions qo = options;
  qo.on_linear = [&](size_t li, const QuantizedTensor& q) { start.tensors[li] = q; };
  qo.force = true;
  const fs::path scratch = (out_dir.has_parent_path() ? out_dir.parent_path() : fs::path(".")) /
                           (".qforge-tune-init-" + out_dir.filename().string());
  fs::remove_all(scratch);
  // Removed however this ends (a failed load below must not leave it behind).
  struct RemoveScratch {
    const fs::path& dir;
    ~RemoveScratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove_scratch{scratch};
  quantize_checkpoint(model, scratch, qo);
  // W4A4 / W8A8: read back as the engine reads them (the final export calibrates the same way,
  // so it writes the same scales), so the student computes what the engine will.
  if (options.activations != ActQuant::none) {
    ModelOptions so;
    so.threads = options.threads;
    so.max_seq = 2;
    start.act = input_scales(*Model::load(scratch, so), options.activations);
  }
  return start;
}

DistillStart read_start(const SourceModel& model, const fs::path& quant,
                        const QuantizeOptions& options) {
  const std::string q_name = quant.string();
  if (options.format != Format::nvfp4 && options.format != Format::mxfp4)
    fail("tune --from: --format {} is not supported (NVFP4 and MXFP4 checkpoints are read)",
         format_info(options.format).name);
  ModelOptions so;
  so.threads = options.threads;
  so.max_seq = 2;
  const auto checkpoint = std::make_shared<const Checkpoint>(Checkpoint::open(quant));
  const std::unique_ptr<Model> q = Model::load(checkpoint, so);
  const Architecture& a = model.arch;
  const Architecture& qa = q->arch();
  if (qa.num_layers != a.num_layers || qa.hidden_size != a.hidden_size || qa.vocab_size != a.vocab_size ||
      qa.linears.size() != a.linears.size())
    fail("{}: not a quantization of {} ({} layers, hidden {}, vocabulary {}; the base has {}, "
         "{}, {})",
         q_name, model.dir.string(), qa.num_layers, qa.hidden_size, qa.vocab_size, a.num_layers,
         a.hidden_size, a.vocab_size);
  const std::unique_ptr<Exporter> exporter = make_exporter(options.export_format);
  const ModulePlan plan = plan_modules(model, options, *exporter);

  DistillStart start;
  for (size_t li = 0; li < a.linears.size(); ++li) {
    const LinearModule& m = a.linears[li];
    const EngineLinear& L =
        q->weights().layers[size_t(m.layer)].linears[size_t(qa.layers[size_t(m.layer)].slot_of(m.role))];
    const LinearWeight& w = L.w;
    if (w.rows != m.out_features || w.cols != m.in_features)
      fail("{}: {} is [{}, {}], the base's [{}, {}]", q_name, m.name, w.rows, w.cols,
           m.out_features, m.in_features);
    const bool quantized = !is_float(w.format);
    if (quantized != plan.quantized(li))
      fail("{}: {} is {} there but {} here; pass the --exclude the checkpoint was made with",
           q_name, m.name, quantized ? weight_format_name(w.format) : "unquantized",
           plan.quantized(li) ? "quantized" : "unquantized (" + plan.reason[li] + ")");
    if (!quantized) continue;
    const std::optional<Format> f = format_of(w.format);
    if (!f || *f != options.format)
      fail("{}: {} is {}, not --format {}", q_name, m.name, weight_format_name(w.format),
           format_info(options.format).name);
    if (!L.pre_scale.empty())
      fail("{}: {} has input pre-scales (AWQ / SmoothQuant); tune needs plain Linears", q_name,
           m.name);
    if (L.act != options.activations)
      fail("{}: {} quantizes its input as {}, but --activations is {}", q_name, m.name,
           act_quant_name(L.act), act_quant_name(options.activations));
    const ExportedLinear& e = plan.exported[li];
    QuantizedTensor t;
    t.format = *f;
    t.rows = w.rows;
    t.cols = w.cols;
    t.block = weight_block(w);
    t.scale_dtype = exporter->scale_dtype(e);
    t.codes.resize(size_t(w.rows * w.cols / 2));
    std::memcpy(t.codes.data(), w.data, t.codes.size());
    t.block_scales.assign(w.block_scales, w.block_scales + w.rows * w.cols / t.block);
    t.global_scale = w.global_scale;
    // compressed-tensors stores 1 / global_scale, which the engine inverts: the stored value is
    // kept so the export writes it back unchanged (its inverse need not round-trip).
    if (t.format == Format::nvfp4 && options.export_format == ExportFormat::compressed_tensors)
      if (const CheckpointTensor* g = checkpoint->find(m.name + ".weight_global_scale")) {
        const TensorData d = read_tensor(*g);
        if (d.view.dtype == DType::F32 && d.view.numel() == 1)
          std::memcpy(&t.global_scale_reciprocal, d.view.data, 4);
      }
    start.tensors[li] = std::move(t);
  }
  if (start.tensors.empty()) fail("{}: no Linear of the decoder is quantized", q_name);
  if (options.activations != ActQuant::none) start.act = input_scales(*q, options.activations);
  return start;
}

}  // namespace qf
