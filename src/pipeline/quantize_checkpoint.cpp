#include "pipeline/quantize_checkpoint.h"

#include "algo/round_to_nearest.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/staged_directory.h"
#include "model/architecture.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace qf {
namespace {

// One tensor of the output, in file order: either copied from the input or produced by
// quantizing a Linear (which yields several output tensors).
struct OutputItem {
  const CheckpointTensor* source = nullptr;
  int linear = -1;  // index into Architecture::linears when quantized
  std::vector<TensorSpec> specs;
  uint64_t nbytes() const {
    uint64_t n = 0;
    for (const auto& s : specs) n += s.nbytes();
    return n;
  }
};

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

bool same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

WeightRows weight_rows(const TensorView& v) {
  return WeightRows{v.data, v.dtype, v.rows(), v.cols()};
}

std::string shard_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

}  // namespace

QuantizeReport quantize_checkpoint(const fs::path& model_dir, const fs::path& out_dir,
                                   const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (same_path(model_dir, out_dir)) fail("{}: output directory is the input directory", out_dir.string());

  const Checkpoint ckpt = Checkpoint::open(model_dir);
  const Architecture arch =
      Architecture::from_config(ckpt.config(), (model_dir / "config.json").string());
  const auto exporter = make_exporter(options.export_format);
  const FormatInfo& info = format_info(options.format);
  const int block = (options.format == Format::int4 && options.block > 0) ? options.block : info.block;
  if (options.block > 0 && options.format != Format::int4)
    fail("--group-size applies to int4 only ({} has a fixed block of {})", info.name, info.block);

  QuantizeReport report;
  report.output = out_dir;
  report.format = std::string(info.name);
  report.export_format = std::string(export_format_name(options.export_format));

  // Decide, per Linear, whether it is quantized.
  std::vector<std::string> reason(arch.linears.size());
  std::vector<ExportedLinear> exported(arch.linears.size());
  std::vector<const CheckpointTensor*> weights(arch.linears.size());
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    const LinearModule& m = arch.linears[i];
    const CheckpointTensor* t = ckpt.find(m.weight_name());
    if (!t) fail("{}: tensor '{}' is missing", model_dir.string(), m.weight_name());
    const SafetensorsEntry& e = *t->entry;
    if (e.shape != Shape{m.out_features, m.in_features})
      fail("{}: tensor '{}' has shape {} but config.json implies [{}, {}]", t->file->path().string(),
           m.weight_name(), shape_str(e.shape), m.out_features, m.in_features);
    if (!is_quantizable_float(e.dtype))
      fail("{}: tensor '{}' has dtype {}; quantization needs F32, F16 or BF16 weights",
           t->file->path().string(), m.weight_name(), dtype_name(e.dtype));
    weights[i] = t;
    exported[i] = {m.name, options.format, m.out_features, m.in_features, block, e.dtype};
    std::string pattern;
    if (matches_any(m.name, options.exclude, &pattern)) {
      reason[i] = fmt::format("excluded by --exclude '{}'", pattern);
    } else if (m.in_features % block != 0) {
      reason[i] = fmt::format("in_features {} is not a multiple of the {} block of {}",
                              m.in_features, info.name, block);
    } else if (auto why = exporter->unsupported_reason(exported[i]); !why.empty()) {
      reason[i] = why;
    }
  }
  // Engines fuse q/k/v and gate/up: a group is quantized entirely or not at all.
  for (const auto& group : arch.fused_groups) {
    auto excluded_member = std::find_if(group.begin(), group.end(),
                                        [&](size_t i) { return !reason[i].empty(); });
    if (excluded_member == group.end()) continue;
    for (size_t i : group)
      if (reason[i].empty())
        reason[i] = fmt::format("fused with {}, which is not quantized",
                                arch.linears[*excluded_member].name);
  }
  std::map<std::string, int> linear_by_weight;
  std::vector<std::string> excluded_names = Architecture::never_quantized_modules();
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    if (reason[i].empty()) {
      linear_by_weight[arch.linears[i].weight_name()] = int(i);
      continue;
    }
    report.excluded.push_back({arch.linears[i].name, reason[i]});
    excluded_names.push_back(arch.linears[i].name);
  }
  std::sort(excluded_names.begin(), excluded_names.end());
  report.modules_excluded = int(report.excluded.size());
  report.modules_quantized = int(linear_by_weight.size());
  if (report.modules_quantized == 0)
    report.warnings.push_back(fmt::format("no Linear module can be quantized to {}", info.name));

  // Plan the output tensors in input order, then cut them into shards.
  std::vector<OutputItem> items;
  for (const auto& t : ckpt.tensors()) {
    OutputItem item;
    item.source = &t;
    if (auto it = linear_by_weight.find(t.name); it != linear_by_weight.end()) {
      item.linear = it->second;
      item.specs = exporter->linear_specs(exported[size_t(it->second)]);
    } else {
      item.specs = {{t.name, t.entry->dtype, t.entry->shape}};
    }
    items.push_back(std::move(item));
  }
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const uint64_t n = items[i].nbytes();
    if (!shards.back().empty() && shard_bytes + n > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += n;
  }

  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::hardware_threads());
  StagedDirectory staged(out_dir, options.force);
  for (const auto& s : ckpt.shards()) report.bytes_in += s->file_size();
  Progress progress("quantize", ckpt.tensor_bytes(), options.progress);

  // Fused groups share the NVFP4 tensor scale: the largest amax over the group.
  std::map<int, float> group_amax;
  auto tensor_amax = [&](size_t linear) {
    const CheckpointTensor& t = *weights[linear];
    const AmaxResult r = weight_amax(weight_rows(t.file->view(*t.entry)), pool);
    if (r.nonfinite > 0)
      fail("{}: tensor '{}' has {} NaN or Inf values", t.file->path().string(), t.name, r.nonfinite);
    return r.amax;
  };
  auto amax_for = [&](size_t linear) {
    const int g = arch.linears[linear].group;
    if (g < 0) return tensor_amax(linear);
    if (auto it = group_amax.find(g); it != group_amax.end()) return it->second;
    float a = 0.f;
    for (size_t member : arch.fused_groups[size_t(g)]) a = std::max(a, tensor_amax(member));
    group_amax[g] = a;
    return a;
  };

  std::map<std::string, std::string> weight_map;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file_name = shard_name(s, shards.size());
    std::vector<TensorSpec> specs;
    std::set<std::string> names;
    for (size_t i : shards[s])
      for (const auto& spec : items[i].specs) {
        specs.push_back(spec);
        names.insert(spec.name);
        weight_map[spec.name] = file_name;
      }
    // Keep __metadata__ aliases whose stored tensor lands in this shard.
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    for (const auto& [alias, stored] : ckpt.aliases())
      if (names.count(stored)) {
        metadata[alias] = stored;
        weight_map[alias] = file_name;
      }
    SafetensorsWriter writer(staged.path() / file_name, specs, metadata);
    for (size_t i : shards[s]) {
      const OutputItem& item = items[i];
      const CheckpointTensor& t = *item.source;
      const TensorView view = t.file->view(*t.entry);
      if (item.linear < 0) {
        // Large tensors (embeddings) are streamed so their pages never all stay resident.
        writer.write(t.name, {view.data, view.nbytes}, [&](size_t offset, size_t length) {
          t.file->release(*t.entry, offset, length);
        });
        ++report.tensors_copied;
      } else {
        const ExportedLinear& l = exported[size_t(item.linear)];
        const float amax = amax_for(size_t(item.linear));
        RtnOptions rtn{options.format, block, exporter->scale_dtype(l)};
        const QuantizedTensor q = quantize_rtn(weight_rows(view), rtn, amax, pool);
        const auto data = exporter->linear_data(l, q);
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
    report.bytes_out += fs::file_size(staged.path() / file_name);
  }
  progress.finish();
  report.shards = int(shards.size());

  if (shards.size() > 1) {
    uint64_t total = 0;
    for (const auto& item : items) total += item.nbytes();
    nlohmann::ordered_json index;
    index["metadata"]["total_size"] = total;
    index["weight_map"] = weight_map;
    write_json_file(staged.path() / "model.safetensors.index.json", index);
  }

  // config.json keeps the input's key order (already validated by Checkpoint::open).
  std::ifstream config_file(model_dir / "config.json");
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_file);
  const QuantizationSummary summary{options.format, block, excluded_names};
  config["quantization_config"] = exporter->quantization_config(summary);
  write_json_file(staged.path() / "config.json", config);
  exporter->write_extra_files(summary, staged.path());
  for (const auto& name : ckpt.extra_files()) {
    std::error_code ec;
    fs::copy_file(model_dir / name, staged.path() / name, ec);
    if (ec) fail("{}: cannot copy to the output: {}", (model_dir / name).string(), ec.message());
  }
  staged.commit();

  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.peak_rss_bytes = peak_rss_bytes();
  for (const auto& e : report.excluded)
    if (e.reason.find("not a multiple") != std::string::npos)
      report.warnings.push_back(fmt::format("{} left unquantized: {}", e.name, e.reason));
  return report;
}

}  // namespace qf
