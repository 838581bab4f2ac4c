// The shipped presets (recipes/presets/*.yaml): each parses, says what it is, and resolves on a
// Nemotron-H layout as NVIDIA's recipe does; an unknown name lists them.
#include "plan/presets.h"

#include "core/error.h"
#include "model/architecture.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

Architecture nemotron() {
  return Architecture::from_config(
      {{"model_type", "nemotron_h"}, {"hidden_size", 64}, {"vocab_size", 256},
       {"hybrid_override_pattern", "M*-E"}, {"num_attention_heads", 4},
       {"num_key_value_heads", 2}, {"head_dim", 16}, {"intermediate_size", 96},
       {"mamba_num_heads", 8}, {"mamba_head_dim", 8}, {"ssm_state_size", 16}, {"n_groups", 2},
       {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
       {"moe_shared_expert_intermediate_size", 48}},
      "cfg.json");
}

TEST(Presets, EveryPresetParsesAndDescribesItself) {
  ASSERT_GE(preset_files().size(), 3u);
  for (const PresetFile& p : preset_files()) {
    SCOPED_TRACE(std::string(p.name));
    const Recipe r = load_preset(std::string(p.name));
    EXPECT_FALSE(r.description.empty());
    EXPECT_FALSE(r.rules.empty());
    EXPECT_TRUE(r.kv_fp8);  // every Nemotron recipe has an FP8 KV cache
    const Architecture a = nemotron();
    const Assignment plan = apply_recipe(r, a, ModuleChoice{});
    // Mamba projections FP8 W8A8, attention, the dense MLP and conv kept, experts NVFP4.
    EXPECT_EQ(plan.at("backbone.layers.0.mixer.in_proj").format, FormatChoice::of(Format::fp8));
    EXPECT_EQ(plan.at("backbone.layers.0.mixer.out_proj").activations, ActQuant::fp8);
    EXPECT_TRUE(plan.at("backbone.layers.1.mixer.q_proj").format.is_keep());
    EXPECT_TRUE(plan.at("backbone.layers.2.mixer.up_proj").format.is_keep());
    EXPECT_EQ(plan.at("backbone.layers.3.mixer.experts.5.down_proj").format,
              FormatChoice::of(Format::nvfp4));
  }
  const Assignment lightning =
      apply_recipe(load_preset("nemotron-3.5-lightning-w4a16-nvfp4-4o6"), nemotron(), ModuleChoice{});
  EXPECT_EQ(lightning.at("backbone.layers.3.mixer.experts.0.up_proj").algo, "four_over_six");
  EXPECT_EQ(lightning.at("backbone.layers.3.mixer.experts.0.up_proj").activations, ActQuant::none);
  EXPECT_EQ(lightning.at("lm_head").algo, "four_over_six");
  const Assignment super = apply_recipe(load_preset("nemotron-3-super-nvfp4"), nemotron(), ModuleChoice{});
  EXPECT_EQ(super.at("backbone.layers.3.mixer.experts.0.up_proj").activations, ActQuant::nvfp4);
  EXPECT_EQ(super.at("backbone.layers.3.mixer.shared_experts.up_proj").format,
            FormatChoice::of(Format::fp8));
  EXPECT_TRUE(super.at("lm_head").format.is_keep());
}

TEST(Presets, UnknownNameSuggestsTheClosest) {
  try {
    load_preset("nemotron-3-super-nvfp");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'nemotron-3-super-nvfp4'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace qf
