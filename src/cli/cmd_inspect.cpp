// `qforge inspect`: what is in a checkpoint (tensors, dtypes, sizes, quantization config).
#include "cli/commands.h"
#include "core/progress.h"
#include "io/gguf_file.h"
#include "targets/checkpoint_inspector.h"
#include "targets/gguf_inspector.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <vector>

namespace qf::cli {
namespace {

int print_gguf(const std::string& path, bool json, bool brief) {
  const GgufInspectReport r = inspect_gguf(path);
  if (json) {
    nlohmann::ordered_json j;
    j["path"] = r.path.string();
    j["format"] = "gguf";
    j["version"] = r.version;
    j["architecture"] = r.architecture;
    j["file_bytes"] = r.file_bytes;
    j["tensor_bytes"] = r.tensor_bytes;
    j["matrix_weights"] = r.matrix_weights;
    j["bits_per_matrix_weight"] = r.bits_per_matrix_weight();
    j["metadata"] = r.metadata;
    j["tensors"] = nlohmann::ordered_json::array();
    if (!brief)
      for (const auto& t : r.tensors)
        j["tensors"].push_back(
            {{"name", t.name}, {"type", t.type}, {"shape", t.shape}, {"bytes", t.bytes}});
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  if (!brief) {
    fmt::print("{:<44} {}\n", "metadata", "value");
    for (const auto& [key, value] : r.metadata.items()) {
      std::string v = value.is_string() ? value.get<std::string>() : value.dump();
      if (v.size() > 100) v = v.substr(0, 97) + "...";
      fmt::print("{:<44} {}\n", key, v);
    }
    fmt::print("\n{:<44} {:<8} {:<16} {:>12}\n", "tensor", "type", "shape", "bytes");
    for (const auto& t : r.tensors)
      fmt::print("{:<44} {:<8} {:<16} {:>12}\n", t.name, t.type, shape_str(t.shape), t.bytes);
    fmt::print("\n");
  }
  fmt::print("{:<28} {}\n", "file", r.path.string());
  fmt::print("{:<28} GGUF v{}\n", "format", r.version);
  fmt::print("{:<28} {}\n", "architecture", r.architecture.empty() ? "(none)" : r.architecture);
  fmt::print("{:<28} {}\n", "size on disk", human_bytes(double(r.file_bytes)));
  fmt::print("{:<28} {}\n", "tensors", r.tensors.size());
  fmt::print("{:<28} {:.3f}\n", "bits per matrix weight", r.bits_per_matrix_weight());
  return 0;
}

}  // namespace

void register_inspect(CLI::App& app, Action& run) {
  struct Args {
    std::string dir;
    bool json = false, brief = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Show a checkpoint's tensors (dtype, shape, bytes), its quantization config and "
                 "the bits each quantized weight costs, counting its scales; or a GGUF file's "
                 "metadata and tensors (ggml types).");
  cmd->add_option("model", args->dir, "Model directory, or a .gguf file")->required();
  cmd->add_flag("--json", args->json, "Print JSON on stdout");
  cmd->add_flag("--brief", args->brief, "Omit the per-tensor list");
  cmd->callback([args, &run] {
    run = [args] {
      if (is_gguf_file(args->dir)) return print_gguf(args->dir, args->json, args->brief);
      const InspectReport r = inspect_checkpoint(args->dir);
      if (args->json) {
        nlohmann::ordered_json j;
        j["path"] = r.dir.string();
        j["model_type"] = r.model_type;
        j["architecture"] = r.architecture;
        j["shards"] = r.shards;
        j["total_bytes"] = r.total_bytes;
        j["tensor_bytes"] = r.tensor_bytes;
        j["quant_algo"] = r.quant_algo.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.quant_algo);
        j["quantization_config"] = nlohmann::ordered_json::parse(r.quantization_config.dump());
        j["quantized_modules"] = r.quantized_modules;
        j["quantized_weights"] = r.quantized_weights;
        j["quantized_bytes"] = r.quantized_bytes;
        j["bits_per_quantized_weight"] = r.bits_per_quantized_weight();
        j["linear_weights"] = r.linear_weights;
        j["linear_bytes"] = r.linear_bytes;
        j["bits_per_linear_weight"] = r.bits_per_linear_weight();
        j["module_schemes"] = r.module_schemes;
        j["tensors"] = nlohmann::ordered_json::array();
        if (!args->brief)
          for (const auto& t : r.tensors)
            j["tensors"].push_back({{"name", t.name},
                                    {"dtype", dtype_name(t.dtype)},
                                    {"shape", t.shape},
                                    {"bytes", t.bytes}});
        fmt::print("{}\n", j.dump(2));
        return 0;
      }
      if (!args->brief) {
        fmt::print("{:<56} {:<8} {:<16} {:>12}\n", "tensor", "dtype", "shape", "bytes");
        for (const auto& t : r.tensors)
          fmt::print("{:<56} {:<8} {:<16} {:>12}\n", t.name, dtype_name(t.dtype),
                     shape_str(t.shape), t.bytes);
        fmt::print("\n");
      }
      fmt::print("{:<28} {}\n", "checkpoint", r.dir.string());
      fmt::print("{:<28} {}\n", "model type", r.model_type);
      fmt::print("{:<28} {}\n", "architecture", r.architecture);
      fmt::print("{:<28} {} in {} shard(s)\n", "size on disk", human_bytes(double(r.total_bytes)),
                 r.shards);
      fmt::print("{:<28} {}\n", "tensors", r.tensors.size());
      fmt::print("{:<28} {}\n", "quantization", r.quant_algo.empty() ? "none" : r.quant_algo);
      if (r.quantized_modules > 0) {
        fmt::print("{:<28} {}\n", "quantized modules", r.quantized_modules);
        fmt::print("{:<28} {}\n", "quantized weights", r.quantized_weights);
        fmt::print("{:<28} {:.3f}\n", "bits per quantized weight", r.bits_per_quantized_weight());
        // Mixed checkpoints: how many modules each scheme holds (--json lists every module's).
        std::map<std::string, std::vector<std::string>> by_scheme;
        for (const auto& [module, scheme] : r.module_schemes) by_scheme[scheme].push_back(module);
        if (by_scheme.size() > 1)
          for (const auto& [scheme, list] : by_scheme)
            fmt::print("{:<28} {} modules\n", "  " + scheme, list.size());
      }
      return 0;
    };
  });
}

}  // namespace qf::cli
