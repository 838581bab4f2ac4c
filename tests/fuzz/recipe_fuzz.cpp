// libFuzzer target for recipe files: parse_recipe and its application to a small Llama must
// either give an assignment or throw qf::Error.
#include "core/error.h"
#include "fuzz_util.h"
#include "model/architecture.h"
#include "plan/recipe.h"

#include <nlohmann/json.hpp>

namespace {

const qf::Architecture& arch() {
  static const qf::Architecture a = qf::Architecture::from_config(
      nlohmann::json::parse(R"({"model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu"})"),
      "fuzz config.json");
  return a;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Through the file, as `quantize --recipe` reads it: load_recipe's own checks (size, nesting,
  // JSON syntax) are part of what is fuzzed.
  const auto file = qf::fuzz::scratch_dir() / "recipe.json";
  qf::fuzz::write_file(file, qf::fuzz::as_text(data, size));
  try {
    const qf::Recipe recipe = qf::load_recipe(file);
    const qf::Assignment a = qf::apply_recipe(recipe, arch(), qf::ModuleChoice{});
    (void)qf::recipe_json(a, arch()).dump();
  } catch (const qf::Error&) {
  }
  return 0;
}
