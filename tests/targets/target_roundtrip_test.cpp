// Each target reads back the names it writes: for every target, format and activation mode,
// the tensors the reader describes for a module are the ones the exporter's linear_specs lists,
// and the target table answers the writer's lookups (names, parsing, exporters).
#include "targets/target.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace qf {
namespace {

bool has_spec(const std::vector<TensorSpec>& specs, const std::string& name) {
  return std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == name; });
}

struct Case {
  Format format;
  int block;
  ActQuant act;  // an activation mode the format is exported with
};

TEST(TargetRoundTrip, ReaderNamesWhatTheExporterWrites) {
  const std::string m = "model.layers.2.self_attn.k_proj";
  const Case cases[] = {{Format::nvfp4, 16, ActQuant::none}, {Format::nvfp4, 16, ActQuant::nvfp4},
                        {Format::mxfp4, 32, ActQuant::none}, {Format::fp8, 0, ActQuant::none},
                        {Format::fp8, 0, ActQuant::fp8},     {Format::int4, 32, ActQuant::none},
                        {Format::int8, 0, ActQuant::int8}};
  for (const Target& t : targets()) {
    const auto ex = t.make_exporter();
    const TargetReader& rd = t.reader();
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(t.name) + " " + std::to_string(int(c.format)) + " act " +
                   std::string(act_quant_name(c.act)));
      ExportedLinear l;
      l.module = m;
      l.format = c.format;
      l.rows = 32;
      l.cols = 64;
      l.block = c.block;
      l.act = c.act;
      l.per_tensor = c.act == ActQuant::fp8;
      l.kv_scale = 'k';
      const auto specs = ex->linear_specs(l);
      QuantScheme s;
      s.format = c.format;
      s.act = c.act;
      const StoredLinear st = rd.stored_linear(m, s);
      EXPECT_EQ(st.weight, specs.at(0).name);
      EXPECT_EQ(st.weight_scale, specs.at(1).name);
      EXPECT_EQ(st.global_scale.empty(), c.format != Format::nvfp4);
      if (!st.global_scale.empty()) {
        EXPECT_EQ(st.global_scale, specs.at(2).name);
      }
      EXPECT_EQ(st.input_scale.empty(), c.act == ActQuant::none);
      if (!st.input_scale.empty()) {
        EXPECT_TRUE(has_spec(specs, st.input_scale)) << st.input_scale;
      }
      EXPECT_TRUE(has_spec(specs, rd.kv_scale_name(m, 'k')));
      // Every tensor the exporter writes for the weight is one the inspector counts.
      const auto leaves = companion_leaves();
      const auto packed = packed_weight_leaves();
      for (const TensorSpec& spec : specs) {
        const std::string leaf = spec.name.substr(spec.name.rfind('.') + 1);
        if (spec.name == st.weight || leaf == "k_scale") continue;
        EXPECT_TRUE(std::find(leaves.begin(), leaves.end(), leaf) != leaves.end()) << spec.name;
      }
      if (st.weight != m + ".weight") {
        const std::string leaf = st.weight.substr(m.size() + 1);
        EXPECT_TRUE(std::find(packed.begin(), packed.end(), leaf) != packed.end()) << st.weight;
      }
    }
  }
}

TEST(TargetRoundTrip, TableAnswersTheWriterLookups) {
  for (const Target& t : targets()) {
    EXPECT_EQ(export_format_name(t.format), t.name);
    EXPECT_EQ(parse_export_format(t.name), t.format);
    EXPECT_EQ(make_exporter(t.format)->kind(), t.format);
    EXPECT_EQ(t.reader().name(), t.name);
  }
  EXPECT_FALSE(parse_export_format("gguf").has_value());
}

}  // namespace
}  // namespace qf
