// Decision units, candidate formats and their exact stored bytes.
#include "plan/candidates.h"

#include "core/error.h"

#include "plan_test_util.h"

#include <gtest/gtest.h>

namespace qf {
namespace {

TEST(PlanCandidates, StoredBytesFollowTheExporters) {
  const int64_t n = 96, k = 256;
  const uint64_t nk = uint64_t(n * k);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::of(Format::nvfp4), n, k, DType::BF16), nk / 2 + nk / 16 + 4);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::of(Format::mxfp4), n, k, DType::BF16), nk / 2 + nk / 32);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::of(Format::fp8), n, k, DType::BF16), nk + 4 * 96);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::of(Format::int4), n, k, DType::BF16), nk / 2 + 4 * nk / 128);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::of(Format::int4, 64), n, k, DType::BF16), nk / 2 + 4 * nk / 64);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::keep(), n, k, DType::BF16), nk * 2);
  EXPECT_EQ(linear_stored_bytes(FormatChoice::keep(), n, k, DType::F32), nk * 4);
  EXPECT_THROW(linear_stored_bytes(FormatChoice::of(Format::int4), n, 96, DType::BF16), Error);
}

TEST(PlanCandidates, ParseChoices) {
  EXPECT_EQ(*parse_format_choice("keep"), FormatChoice::keep());
  EXPECT_EQ(*parse_format_choice("NVFP4"), FormatChoice::of(Format::nvfp4));
  EXPECT_EQ(*parse_format_choice("int4:64"), FormatChoice::of(Format::int4, 64));
  EXPECT_EQ(*parse_format_choice("int4:128"), FormatChoice::of(Format::int4));
  EXPECT_EQ(FormatChoice::of(Format::int4, 64).name(), "int4:64");
  EXPECT_EQ(FormatChoice::of(Format::int4, 128).name(), "int4");
  EXPECT_FALSE(parse_format_choice("fp8:64"));
  EXPECT_FALSE(parse_format_choice("int4:x"));
  EXPECT_FALSE(parse_format_choice("int5"));
  EXPECT_EQ(*parse_format_choice("nvfp4:4o6"), FormatChoice::nvfp4_four_over_six());
  EXPECT_EQ(FormatChoice::nvfp4_four_over_six().name(), "nvfp4:4o6");
  EXPECT_FALSE(parse_format_choice("mxfp4:4o6"));
}

TEST(PlanCandidates, FourOverSixIsAnNvfp4CandidateOfTheSameBytes) {
  const Architecture arch = test::tiny_llama(1);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4), FormatChoice::nvfp4_four_over_six()};
  const auto units = decision_units(arch, o);
  for (const DecisionUnit& u : units) {
    ASSERT_EQ(u.candidates.size(), 3u);  // nvfp4, nvfp4:4o6, keep
    EXPECT_EQ(u.candidates[0].bytes, u.candidates[1].bytes);
    EXPECT_EQ(u.find(FormatChoice::nvfp4_four_over_six()), 1);
  }
  // The assignment says nvfp4 + algo four_over_six for the 4/6 choice.
  const Assignment a = assignment_from_choices(arch, units, {1, 0, 1, 2});
  const ModuleChoice q = a.at("model.layers.0.self_attn.q_proj");
  EXPECT_EQ(q.format, FormatChoice::of(Format::nvfp4));
  EXPECT_EQ(q.algo, "four_over_six");
  EXPECT_EQ(a.at("model.layers.0.self_attn.o_proj").algo, "max");
  EXPECT_EQ(a.at("model.layers.0.mlp.up_proj").algo, "four_over_six");
  EXPECT_TRUE(a.at("model.layers.0.mlp.down_proj").format.is_keep());
}

TEST(PlanCandidates, UnitsFollowFusedGroupsAndBlocks) {
  // hidden 64: int4 (block 128) cannot take q/k/v/o or gate/up; down_proj (in 128) can.
  const Architecture arch = test::tiny_llama(2, 64, 128);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4), FormatChoice::of(Format::int4),
               FormatChoice::of(Format::nvfp4)};
  const std::vector<DecisionUnit> units = decision_units(arch, o);
  ASSERT_EQ(units.size(), 8u);  // per layer: qkv, o, gate+up, down
  EXPECT_EQ(units[0].name, "model.layers.0.self_attn.q_proj+k_proj+v_proj");
  EXPECT_EQ(units[0].linears.size(), 3u);
  EXPECT_EQ(units[1].name, "model.layers.0.self_attn.o_proj");
  EXPECT_EQ(units[2].name, "model.layers.0.mlp.gate_proj+up_proj");
  EXPECT_EQ(units[3].name, "model.layers.0.mlp.down_proj");
  EXPECT_EQ(units[4].layer, 1);
  ASSERT_EQ(units[0].candidates.size(), 2u);  // nvfp4 (once), keep
  EXPECT_EQ(units[0].candidates[0].choice, FormatChoice::of(Format::nvfp4));
  EXPECT_TRUE(units[0].candidates[1].choice.is_keep());
  ASSERT_EQ(units[3].candidates.size(), 3u);  // nvfp4, int4, keep
  EXPECT_EQ(units[3].candidates[1].choice, FormatChoice::of(Format::int4));
  // q/k/v: 64x64 + 32x64 + 32x64 weights (2 kv heads of 16).
  EXPECT_EQ(units[0].numel, uint64_t(64 * 64 + 2 * 32 * 64));
  EXPECT_EQ(units[0].candidates[1].bytes, units[0].numel * 2);
  EXPECT_EQ(units[0].candidates[0].bytes,
            linear_stored_bytes(FormatChoice::of(Format::nvfp4), 64, 64, DType::BF16) +
                2 * linear_stored_bytes(FormatChoice::of(Format::nvfp4), 32, 64, DType::BF16));
  EXPECT_EQ(units[0].find(FormatChoice::keep()), 1);
  EXPECT_EQ(units[0].find(FormatChoice::of(Format::fp8)), -1);
}

TEST(PlanCandidates, Int4PerChannelWhereNoGroupFits) {
  const FormatChoice ch = *parse_format_choice("int4:channel");
  EXPECT_TRUE(ch.is_channel());
  EXPECT_EQ(ch.name(), "int4:channel");
  EXPECT_EQ(ch.block_for(172), 172);
  EXPECT_TRUE(choice_fits(ch, 172));
  EXPECT_EQ(linear_stored_bytes(ch, 64, 172, DType::F32), uint64_t(64 * 172 / 2 + 4 * 64));
  // hidden 64, intermediate 172 (stories260K): group 128 fits nothing, so every unit takes
  // int4 per channel, stored with its concrete block (the unit's in_features).
  const Architecture arch = test::tiny_llama(1, 64, 172);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::int4), ch};
  const auto units = decision_units(arch, o);
  ASSERT_EQ(units.size(), 4u);
  ASSERT_EQ(units[0].candidates.size(), 2u);  // int4:64, keep
  EXPECT_EQ(units[0].candidates[0].choice, FormatChoice::of(Format::int4, 64));
  EXPECT_EQ(units[3].candidates[0].choice, FormatChoice::of(Format::int4, 172));
  EXPECT_EQ(units[3].candidates[0].choice.name(), "int4:172");
  // hidden 128: group 128 fits q/k/v, so no per-channel duplicate is added there.
  const auto units128 = decision_units(test::tiny_llama(1, 128, 172), o);
  ASSERT_EQ(units128[0].candidates.size(), 2u);
  EXPECT_EQ(units128[0].candidates[0].choice, FormatChoice::of(Format::int4));
  EXPECT_EQ(units128[3].candidates[0].choice, FormatChoice::of(Format::int4, 172));
}

TEST(PlanCandidates, ExcludedGroupOnlyKeeps) {
  const Architecture arch = test::tiny_llama(1);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::fp8)};
  o.excluded = [](const LinearModule& m) { return m.role == LinearRole::k_proj; };
  const auto units = decision_units(arch, o);
  ASSERT_EQ(units[0].candidates.size(), 1u);
  EXPECT_TRUE(units[0].candidates[0].choice.is_keep());
  EXPECT_EQ(units[1].candidates.size(), 2u);
}

TEST(PlanCandidates, AssignmentFromChoicesAndBytes) {
  const Architecture arch = test::tiny_llama(1);
  CandidateOptions o;
  o.formats = {FormatChoice::of(Format::nvfp4)};
  const auto units = decision_units(arch, o);
  const Assignment a = assignment_from_choices(arch, units, {0, 1, 0, 1}, "mse");
  EXPECT_EQ(a.modules.size(), arch.linears.size());
  EXPECT_EQ(a.at("model.layers.0.self_attn.k_proj").format, FormatChoice::of(Format::nvfp4));
  EXPECT_EQ(a.at("model.layers.0.self_attn.k_proj").algo, "mse");
  EXPECT_TRUE(a.at("model.layers.0.self_attn.o_proj").format.is_keep());
  uint64_t expect = 0;
  for (size_t u = 0; u < units.size(); ++u) expect += units[u].candidates[u % 2].bytes;
  EXPECT_EQ(assignment_bytes(arch, a, DType::BF16), expect);
}

}  // namespace
}  // namespace qf
