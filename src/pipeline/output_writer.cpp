#include "pipeline/output_writer.h"

#include "algo/mse.h"
#include "algo/round_to_nearest.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "io/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

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

  // The output tensors in input order, then cut into shards.
  std::vector<OutputItem>& items = layout.items;
  for (const auto& t : ckpt.tensors()) {
    OutputItem item;
    item.source = &t;
    if (auto it = plan.linear_by_weight.find(t.name); it != plan.linear_by_weight.end()) {
      item.linear = it->second;
      item.specs = exporter.linear_specs(plan.exported[size_t(it->second)]);
    } else if (head_src && !head_tied && t.name == arch.head_name) {
      item.head = true;
      item.specs = exporter.linear_specs(plan.head);
    } else {
      item.specs = {{copied_name(t), t.entry->dtype, t.entry->shape}};
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

  for (const auto& s : ckpt.shards()) report.bytes_in += s->file_size();
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
      if (item.head) {
        // Weight-only: mse searches as for the other Linears, every other algo is max.
        const WeightRows w = weight_rows(view);
        const AmaxResult a = weight_amax(w, pool);
        if (a.nonfinite > 0)
          fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name,
               a.nonfinite);
        const RtnOptions rtn{head.format, head.block, exporter.scale_dtype(head),
                             exporter.numerics()};
        const QuantizedTensor q =
            options.algo != WeightAlgo::mse ? quantize_rtn(w, rtn, a.amax, pool)
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
      if (item.linear < 0 && calibration.norm_override.count(t.name)) {
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
      } else {
        const size_t li = size_t(item.linear);
        const ExportedLinear& l = plan.exported[li];
        QuantizedTensor q;
        LinearExtras extras;
        if (std::optional<Precomputed> p = calibration.take(li)) {
          q = std::move(p->q);
          extras.pre_quant_scale = std::move(p->pre_quant_scale);
        } else {
          q = quantizer.max_or_mse(li);
        }
        if (all_codes_zero(q))
          report.warnings.push_back(fmt::format(
              "{}: every weight quantizes to zero in {} (all zero, or too small for the format's "
              "scales): the layer's output will be zero",
              plan.exported[li].module, format_info(l.format).name));
        if (l.act != ActQuant::none)
          extras.input_scale = calibration.input_scale(li, arch, options.activations, model_dir);
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
    std::set<std::pair<Format, int>> used;
    bool all_channel = true;
    for (size_t i = 0; i < arch.linears.size(); ++i)
      if (plan.quantized(i)) {
        const ExportedLinear& l = plan.exported[i];
        used.insert({l.format, l.block});
        summary.mixed.push_back({arch.linears[i].name, l.format, l.block, l.cols});
        all_channel = all_channel && l.format == Format::int4 && l.block == l.cols;
      }
    summary.channel = !used.empty() && all_channel;
    if (used.size() <= 1) summary.mixed.clear();
    if (used.size() == 1) {
      summary.format = used.begin()->first;
      summary.block = used.begin()->second;
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
}

}  // namespace qf
