#include "pipeline/output_writer.h"

#include "algo/mse.h"
#include "algo/round_to_nearest.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "io/shard_layout.h"
#include "io/tokenizer_gguf_export.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

namespace qf {
namespace fs = std::filesystem;

uint64_t OutputItem::nbytes() const {
  uint64_t n = 0;
  for (const auto& s : specs) n += s.nbytes();
  return n;
}

OutputLayout plan_output(const SourceModel& source, const ModulePlan& plan,
                         const Exporter& exporter, uint64_t max_shard_bytes) {
  const Checkpoint& ckpt = *source.checkpoint;
  const Architecture& arch = source.arch;
  const CheckpointTensor* head_src = plan.head_src;
  const bool head_tied = plan.head_tied;
  OutputLayout layout;

  // A tied embedding stored once under the head's name (an __metadata__ alias gives the
  // embedding's) is written under the embedding's name with no alias, as transformers, ModelOpt
  // and llm-compressor save tied weights.
  const bool rename_tied =
      arch.tie_word_embeddings && !head_src && ckpt.aliases().count(arch.embed_name) &&
      ckpt.aliases().at(arch.embed_name) == arch.head_name;
  auto copied_name = [&](const CheckpointTensor& t) {
    return rename_tied && t.name == arch.head_name ? arch.embed_name : t.name;
  };

  // gpt-oss experts: the stack (and expert) of each expert weight and bias when the target
  // writes them fused; the gate_up tensors to split into gate / up when it writes them one
  // Linear each.
  std::map<std::string, std::pair<size_t, bool>> in_stack;  // name -> (stack, is bias)
  for (size_t s = 0; s < plan.stacks.size(); ++s)
    for (size_t li : plan.stacks[s].linears) {
      in_stack[arch.linears[li].weight_name()] = {s, false};
      in_stack[arch.linears[li].name + ".bias"] = {s, true};
    }
  std::set<std::string> split_gate_up;
  if (!exporter.fuses_experts())
    for (size_t i = 0; i < arch.linears.size(); ++i)
      if (plan.exported[i].fused_expert == FusedExpert::gate_up) {
        split_gate_up.insert(arch.linears[i].name + ".bias");
        if (!plan.quantized(i)) split_gate_up.insert(arch.linears[i].weight_name());
      }
  std::set<std::pair<size_t, bool>> stacks_done;
  // Unquantized k_proj / v_proj that carry the FP8 KV-cache scales: weight name -> Linear.
  std::map<std::string, size_t> kv_kept;
  for (size_t i = 0; i < arch.linears.size(); ++i)
    if (plan.exported[i].kv_scale && !plan.quantized(i)) kv_kept[arch.linears[i].weight_name()] = i;

  // The output tensors in input order, then cut into shards.
  std::vector<OutputItem>& items = layout.items;
  for (const auto& t : ckpt.tensors()) {
    OutputItem item;
    item.source = &t;
    if (plan.dropped.count(t.name)) continue;
    if (auto st = in_stack.find(t.name); st != in_stack.end()) {
      if (!stacks_done.insert(st->second).second) continue;  // written with its stack
      const auto& [s, bias] = st->second;
      const ModulePlan::ExpertStack& stack = plan.stacks[s];
      const ExportedLinear& first = plan.exported[stack.linears[0]];
      item.stack = int(s);
      item.stack_bias = bias;
      item.stack_quantized = !bias && plan.quantized(stack.linears[0]);
      for (size_t li : stack.linears) {
        const std::string name = bias ? arch.linears[li].name + ".bias" : arch.linears[li].weight_name();
        const CheckpointTensor* part = ckpt.find(name);
        if (!part) fail("{}: tensor '{}' is missing", source.dir.string(), name);
        item.parts.push_back(part);
      }
      std::vector<ExportedLinear> experts;
      for (size_t li : stack.linears) experts.push_back(plan.exported[li]);
      const int64_t e = int64_t(stack.linears.size());
      if (bias)
        item.specs = {{stack.name + "_bias", t.entry->dtype, {e, first.rows}}};
      else if (item.stack_quantized)
        item.specs = exporter.fused_expert_specs(stack.name, experts);
      else
        item.specs = {{stack.name, t.entry->dtype, {e, first.cols, first.rows}}};
      items.push_back(std::move(item));
      continue;
    }
    if (split_gate_up.count(t.name)) {
      // "...experts.N.gate_up_proj.bias" -> "...experts.N.gate_proj.bias" / "...up_proj.bias".
      const std::string module = t.name.substr(0, t.name.rfind('.'));
      const std::string leaf = t.name.substr(t.name.rfind('.'));
      const std::string prefix = module.substr(0, module.rfind('.') + 1);
      Shape half = t.entry->shape;
      half[0] /= 2;
      item.deinterleave = true;
      item.specs = {{prefix + "gate_proj" + leaf, t.entry->dtype, half},
                    {prefix + "up_proj" + leaf, t.entry->dtype, half}};
      items.push_back(std::move(item));
      continue;
    }
    if (auto it = plan.linear_by_weight.find(t.name); it != plan.linear_by_weight.end()) {
      item.linear = it->second;
      item.specs = exporter.linear_specs(plan.exported[size_t(it->second)]);
    } else if (head_src && !head_tied && t.name == arch.head_name) {
      item.head = true;
      item.specs = exporter.linear_specs(plan.head);
    } else {
      item.specs = {{copied_name(t), t.entry->dtype, t.entry->shape}};
      if (auto kv = kv_kept.find(t.name); kv != kv_kept.end()) {
        item.kv_linear = int(kv->second);
        item.specs.push_back(exporter.kv_scale_spec(plan.exported[kv->second]));
      }
    }
    items.push_back(std::move(item));
    if (head_src && head_tied && t.entry == head_src->entry) {
      OutputItem h;  // the quantized copy of the tied embedding, right after it
      h.source = &t;
      h.head = true;
      h.specs = exporter.linear_specs(plan.head);
      items.push_back(std::move(h));
    }
  }
  std::vector<uint64_t> item_bytes;
  for (const auto& item : items) item_bytes.push_back(item.nbytes());
  layout.total_bytes = std::accumulate(item_bytes.begin(), item_bytes.end(), uint64_t(0));
  const auto shards = plan_shards(item_bytes, max_shard_bytes);

  for (size_t s = 0; s < shards.size(); ++s) {
    OutputShard shard;
    shard.file_name = shard_file_name(s, shards.size());
    shard.items = shards[s];
    std::set<std::string> names;
    for (size_t i : shards[s])
      for (const auto& spec : items[i].specs) {
        shard.specs.push_back(spec);
        names.insert(spec.name);
        layout.weight_map[spec.name] = shard.file_name;
      }
    // Keep __metadata__ aliases whose stored tensor lands in this shard.
    shard.metadata = {{"format", "pt"}};
    for (const auto& [alias, stored] : ckpt.aliases())
      if (names.count(stored) && !(head_src && alias == arch.head_name) &&
          !(rename_tied && alias == arch.embed_name)) {
        shard.metadata[alias] = stored;
        layout.weight_map[alias] = shard.file_name;
      }
    layout.shards.push_back(std::move(shard));
  }
  return layout;
}

namespace {

// Whether every code of q has magnitude zero (sign bits aside): the layer dequantizes to zero.
bool all_codes_zero(const QuantizedTensor& q) {
  uint8_t magnitude = 0xFF;  // int4 / int8: one two's complement code per byte
  if (q.format == Format::nvfp4 || q.format == Format::mxfp4) magnitude = 0x77;  // two E2M1
  else if (q.format == Format::fp8) magnitude = 0x7F;
  for (const uint8_t c : q.codes)
    if (c & magnitude) return false;
  return !q.codes.empty();
}

// One stack of gpt-oss experts (OutputItem::stack): quantized with one tensor scale (the scale
// group's) and handed to the exporter whole, or float in the hub's transposed layout, or biases.
void write_stack(const OutputItem& item, const ModulePlan& plan, CalibrationOutcome& calibration,
                 LinearQuantizer& quantizer, const Exporter& exporter,
                 const Architecture& arch, const fs::path& model_dir,
                 SafetensorsWriter& writer, QuantizeReport& report) {
  const ModulePlan::ExpertStack& stack = plan.stacks[size_t(item.stack)];
  if (item.stack_quantized) {
    std::vector<ExportedLinear> experts;
    std::vector<QuantizedTensor> qs;
    for (size_t li : stack.linears) {
      experts.push_back(plan.exported[li]);
      std::optional<Precomputed> p = calibration.take(li);
      qs.push_back(p ? std::move(p->q) : quantizer.data_free(li));
      report.quantized_weights += experts.back().rows * experts.back().cols;
    }
    LinearExtras extras;
    if (experts[0].act != ActQuant::none)  // the max over the layer's experts already
      extras.input_scale =
          calibration.input_scale(stack.linears[0], arch, experts[0].act, model_dir);
    const auto data = exporter.fused_expert_data(experts, qs, extras);
    for (size_t k = 0; k < data.size(); ++k) {
      writer.write(item.specs[k].name, data[k]);
      report.quantized_bytes += data[k].size();
    }
    return;
  }
  std::vector<std::byte> out(size_t(item.specs[0].nbytes()));
  size_t at = 0;
  for (const CheckpointTensor* p : item.parts) {
    const TensorData d = read_tensor(*p);
    const TensorView& v = d.view;
    if (item.stack_bias) {
      std::memcpy(out.data() + at, v.data, v.nbytes);
    } else {
      // [out, in] back to the hub's [in, out] (x @ W).
      const int64_t rows = v.shape[0], cols = v.shape[1];
      const size_t el = dtype_size(v.dtype);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          std::memcpy(out.data() + at + size_t(c * rows + r) * el, v.data + size_t(r * cols + c) * el, el);
    }
    at += v.nbytes;
  }
  writer.write(item.specs[0].name, out);
  ++report.tensors_copied;
}

}  // namespace

void write_output(const SourceModel& source, const ModulePlan& plan, CalibrationOutcome& calibration,
                  LinearQuantizer& quantizer, const QuantizeOptions& options,
                  const Exporter& exporter, ThreadPool& pool, const fs::path& staging_dir,
                  QuantizeReport& report) {
  const fs::path& model_dir = source.dir;
  const Checkpoint& ckpt = *source.checkpoint;
  const Architecture& arch = source.arch;
  const CheckpointTensor* head_src = plan.head_src;
  const bool head_tied = plan.head_tied;
  const ExportedLinear& head = plan.head;
  const OutputLayout layout = plan_output(source, plan, exporter, options.max_shard_bytes);
  const std::vector<OutputItem>& items = layout.items;

  report.bytes_in += source.input_bytes();
  // Data-free algorithms quantize as they write; after calibration the results are ready.
  Progress progress(calibration.precomputed.empty() ? "quantize+write" : "write",
                    ProgressUnit::bytes, double(ckpt.tensor_bytes()), options.progress);

  for (const OutputShard& shard : layout.shards) {
    const std::string& file_name = shard.file_name;
    SafetensorsWriter writer(staging_dir / file_name, shard.specs, shard.metadata);
    for (size_t i : shard.items) {
      const OutputItem& item = items[i];
      const CheckpointTensor& t = *item.source;
      const TensorView view = t.file->view(*t.entry);
      if (item.stack >= 0) {
        write_stack(item, plan, calibration, quantizer, exporter, arch, model_dir, writer,
                    report);
        for (const CheckpointTensor* p : item.parts) {
          p->file->release(*p->entry);
          progress.advance(double(p->entry->end - p->entry->begin));
        }
        continue;
      }
      if (item.deinterleave) {
        // Even rows (gate) then odd rows (up) of the [out, ...] tensor.
        const TensorData data = read_tensor(t);
        const TensorView& v = data.view;
        const size_t row = v.nbytes / size_t(v.shape[0]);
        for (int parity = 0; parity < 2; ++parity) {
          std::vector<std::byte> half(v.nbytes / 2);
          for (int64_t r = 0; r < v.shape[0] / 2; ++r)
            std::memcpy(half.data() + size_t(r) * row, v.data + size_t(2 * r + parity) * row, row);
          writer.write(item.specs[size_t(parity)].name, half);
        }
        ++report.tensors_copied;
        t.file->release(*t.entry);
        progress.advance(view.nbytes);
        continue;
      }
      if (item.head) {
        // Weight-only: mse searches and four_over_six chooses block scales as for the other
        // Linears, every other algo is max.
        const WeightRows w = weight_rows(view);
        const AmaxResult a = weight_amax(w, pool);
        if (a.nonfinite > 0)
          fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name,
               a.nonfinite);
        const RtnOptions rtn{head.format, head.block, exporter.scale_dtype(head),
                             exporter.numerics()};
        const QuantizedTensor q =
            (plan.modes.four_over_six || plan.head_four_over_six) && head.format == Format::nvfp4
                ? quantizer.four_over_six(w, a.amax)
            : options.algo != WeightAlgo::mse ? quantize_rtn(w, rtn, a.amax, pool)
            : head.format == Format::nvfp4
                ? quantize_mse(w, rtn, MseOptions{}, pool,
                               nvfp4_mse_global_amax(w, a.amax, MseOptions{}, pool))
                : quantize_mse(w, rtn, MseOptions{}, pool);
        const auto data = exporter.linear_data(head, q);
        for (size_t k = 0; k < data.size(); ++k) {
          writer.write(item.specs[k].name, data[k]);
          report.quantized_bytes += data[k].size();
        }
        report.quantized_weights += head.rows * head.cols;
        t.file->release(*t.entry);
        if (!head_tied) progress.advance(view.nbytes);  // a tied source was counted once
        continue;
      }
      std::optional<std::vector<float>> replaced;
      if (item.linear < 0 && options.replace_float)
        replaced = options.replace_float(item.specs[0].name);
      if (replaced) {
        // Trained values (tune --embedding-lr), in the tensor's dtype.
        if (!is_quantizable_float(view.dtype) ||
            replaced->size() != view.nbytes / dtype_size(view.dtype))
          fail("{}: tensor '{}': {} replacement values for {} elements of {}",
               t.file->path().string(), t.name, replaced->size(),
               view.nbytes / dtype_size(view.dtype), dtype_name(view.dtype));
        if (count_nonfinite(DType::F32, replaced->data(), replaced->size() * sizeof(float)) > 0)
          fail("tensor '{}': the trained values hold NaN or Inf", item.specs[0].name);
        writer.write(item.specs[0].name, scales_to_bytes(*replaced, view.dtype));
        ++report.tensors_copied;
      } else if (item.linear < 0 && calibration.norm_override.count(t.name)) {
        // A norm that absorbed AWQ / SmoothQuant scales, in its own dtype.
        const auto bytes = scales_to_bytes(calibration.norm_override[t.name], t.entry->dtype);
        writer.write(item.specs[0].name, bytes);
        ++report.tensors_copied;
      } else if (item.linear < 0) {
        // Large tensors (embeddings) are streamed so their pages never all stay resident; the
        // NaN/Inf check reads each chunk as it goes by. An expert weight stored transposed
        // (gpt-oss) is written as the [out, in] copy read_tensor makes (its pages are released
        // whole below).
        const TensorData data = read_tensor(t);
        const TensorView& out = data.view;
        uint64_t nonfinite = 0;
        writer.write(item.specs[0].name, {out.data, out.nbytes}, [&](size_t offset, size_t length) {
          nonfinite += count_nonfinite(out.dtype, out.data + offset, length);
          if (!data.owned) t.file->release(*t.entry, offset, length);
        });
        if (nonfinite > 0) {
          const std::string what = fmt::format("{}: tensor '{}' has {} NaN or Inf values",
                                                t.file->path().string(), t.name, nonfinite);
          if (!options.allow_nonfinite)
            fail("{} (--allow-nonfinite copies such unquantized tensors as they are)", what);
          report.warnings.push_back(what + ", copied as it is (--allow-nonfinite)");
        }
        ++report.tensors_copied;
        if (item.kv_linear >= 0) {
          const ExportedLinear& l = plan.exported[size_t(item.kv_linear)];
          const auto& kv = calibration.kv_amax[size_t(arch.linears[size_t(item.kv_linear)].layer)];
          writer.write(item.specs[1].name,
                       exporter.kv_scale_data(l, div_by_constant(l.kv_scale == 'k' ? kv.first
                                                                                  : kv.second,
                                                                 448.0f)));
        }
      } else {
        const size_t li = size_t(item.linear);
        const ExportedLinear& l = plan.exported[li];
        QuantizedTensor q;
        LinearExtras extras;
        if (std::optional<Precomputed> p = calibration.take(li)) {
          q = std::move(p->q);
          extras.pre_quant_scale = std::move(p->pre_quant_scale);
        } else if (!options.replace_linear) {
          q = quantizer.data_free(li);
        }
        if (options.replace_linear) {
          if (std::optional<QuantizedTensor> r = options.replace_linear(li)) q = std::move(*r);
          else if (q.codes.empty()) q = quantizer.data_free(li);
        }
        if (options.on_linear) options.on_linear(li, q);
        if (all_codes_zero(q))
          report.warnings.push_back(fmt::format(
              "{}: every weight quantizes to zero in {} (all zero, or too small for the format's "
              "scales): the layer's output will be zero",
              plan.exported[li].module, format_info(l.format).name));
        if (l.act != ActQuant::none)
          extras.input_scale = calibration.input_scale(li, arch, l.act, model_dir);
        if (l.pre_quant_scale && extras.pre_quant_scale.empty())
          extras.pre_quant_scale.assign(size_t(l.cols), 1.f);  // AWQ fell back to max
        if (l.kv_scale) {
          const auto& kv = calibration.kv_amax[size_t(arch.linears[li].layer)];
          extras.kv_scale = div_by_constant(l.kv_scale == 'k' ? kv.first : kv.second, 448.0f);
        }
        const auto data = exporter.linear_data(l, q, extras);
        for (size_t k = 0; k < data.size(); ++k) {
          writer.write(item.specs[k].name, data[k]);
          report.quantized_bytes += data[k].size();
        }
        report.quantized_weights += l.rows * l.cols;
      }
      t.file->release(*t.entry);
      progress.advance(view.nbytes);
    }
    writer.finish();
    report.bytes_out += fs::file_size(staging_dir / file_name);
  }
  progress.finish();
  report.shards = int(layout.shards.size());

  if (layout.shards.size() > 1) write_shard_index(staging_dir, layout.total_bytes, layout.weight_map);

  // config.json as read at open (key order kept), not re-read: it must describe these weights.
  nlohmann::ordered_json config = ckpt.ordered_config();
  // lm_head is its own (quantized) tensor: engines must not tie it to the embedding.
  if (head_src) config["tie_word_embeddings"] = false;
  QuantizationSummary summary{options.format, plan.block, plan.excluded_names};
  summary.act = options.activations;
  summary.per_tensor = plan.modes.per_tensor;
  summary.awq = plan.modes.awq;
  summary.kv_fp8 = options.kv_fp8;
  if (options.assignment || plan.int4_channel) {
    // One format: the single-format config as usual; several: the mixed-precision config.
    // INT4 per channel counts as one format even where in_features (its block) differ.
    // A module's scheme is its format, block and input quantization (a recipe's W4A16 and
    // W4A4 NVFP4 modules are two schemes).
    std::set<std::tuple<Format, int, ActQuant>> used;
    bool all_channel = true;
    auto add = [&](const ExportedLinear& l) {
      used.insert({l.format, l.block, l.act});
      summary.mixed.push_back({l.module, l.format, l.block, l.cols, l.act, l.per_tensor});
      all_channel = all_channel && l.format == Format::int4 && l.block == l.cols;
    };
    for (size_t i = 0; i < arch.linears.size(); ++i)
      if (plan.quantized(i)) add(plan.exported[i]);
    if (head_src && options.assignment) add(head);
    summary.channel = !used.empty() && all_channel;
    if (used.size() <= 1) summary.mixed.clear();
    if (used.size() == 1) {
      summary.format = std::get<0>(*used.begin());
      summary.block = std::get<1>(*used.begin());
      summary.act = std::get<2>(*used.begin());
      summary.per_tensor = summary.act == ActQuant::fp8;
    }
    if (options.assignment)
      report.format = used.size() > 1 && !summary.channel ? "mixed"
                      : used.empty() ? "none"
                                     : std::string(format_info(summary.format).name);
  }
  config["quantization_config"] = exporter.quantization_config(summary);
  write_json_file(staging_dir / "config.json", config);
  exporter.write_extra_files(summary, staging_dir);
  auto copy = [&](const fs::path& from, const std::string& name) {
    std::error_code ec;
    fs::copy_file(from, staging_dir / name, ec);
    if (ec) fail("{}: cannot copy to the output: {}", from.string(), ec.message());
  };
  for (const auto& name : ckpt.extra_files()) copy(model_dir / name, name);
  // --tokenizer for a model without one: the output should be usable on its own.
  if (!source.tokenizer_dir.empty() && !Tokenizer::present(model_dir)) {
    const auto& extra = ckpt.extra_files();
    for (const std::string& name : Tokenizer::files_in(source.tokenizer_dir))
      if (std::find(extra.begin(), extra.end(), name) == extra.end())
        copy(source.tokenizer_dir / name, name);
  }
  // A GGUF input's tokenizer is metadata: written as tokenizer.json + tokenizer_config.json
  // that encode as it does; one qforge cannot express is said, not silently left out.
  if (source.gguf && source.tokenizer_dir.empty()) {
    try {
      write_hf_tokenizer_files(*source.gguf, staging_dir);
    } catch (const Error& e) {
      report.warnings.push_back(fmt::format(
          "{}; no tokenizer files are written (--tokenizer DIR, the original model's directory, "
          "copies them)", e.what()));
    }
  }
}

}  // namespace qf
