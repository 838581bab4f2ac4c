// Weights moved into 2 MB pages (ModelWeights::move_to_huge_pages, what bench and generate do)
// give the same logits, bit for bit, in every stored format: the copies hold exactly the bytes
// the kernels read, other owned parts (scales) stay alive, and releasing the file pages is safe.
// NVFP4, MXFP4 and INT4 repacked 16 rows at a time (on CPUs with that kernel) give the same bits in
// exact mode (their readers gather the stored layout) and, in fast mode, the int8-activation
// products summed per row in another order: within float rounding.
#include "engine/model.h"
#include "engine/weights.h"
#include "kernels/q4_rows16.h"
#include "kernels/kernels_internal.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {
namespace {

namespace fs = std::filesystem;

std::vector<float> logits_of(const fs::path& model, bool huge, KernelMode mode,
                             bool* repacked = nullptr) {
  ModelWeights w = ModelWeights::load(model);
  if (huge) w.move_to_huge_pages(/*release_file_pages=*/true, /*min_bytes=*/0);
  if (repacked) *repacked = kernels::is_q4_rows16(w.lm_head.w.format) ||
                            kernels::is_q4_rows16(w.layers[0].linears[0].w.format);
  ModelOptions opt;
  opt.threads = 2;
  opt.kernels = mode;
  Model m(std::move(w), opt);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378, 441, 359, 280};
  std::vector<float> logits(ids.size() * size_t(m.vocab_size()));
  m.forward(ids, 0, logits.data(), true);
  return logits;
}

TEST(HugePageWeights, SameLogitsInEveryFormat) {
  QF_REQUIRE_FIXTURES();
  test::ScratchDir tmp;
  const fs::path src = test::model_dir("tinystories-656K-hf");
  std::vector<fs::path> models = {src};
  // INT4 as ModelOpt stores it (row pairs) and as compressed-tensors does (int32 words).
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
           {"nvfp4", "--format nvfp4"},
           {"mxfp4", "--format mxfp4"},
           {"fp8", "--format fp8"},
           {"int4", "--format int4"},
           {"int4-ct", "--format int4 --export compressed-tensors"}}) {
    const fs::path out = tmp / name;
    const auto q =
        test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) + " " + flags);
    ASSERT_EQ(q.exit_code, 0) << name << ": " << q.err;
    models.push_back(out);
  }
  for (const std::string f : {"q4_0", "q6_k", "bf16"}) {
    const fs::path out = tmp / (f + ".gguf");
    const auto q = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                                    " --export gguf --format " + f);
    ASSERT_EQ(q.exit_code, 0) << f << ": " << q.err;
    models.push_back(out);
  }
  for (const fs::path& m : models) {
    bool repacked = false;
    const std::vector<float> moved = logits_of(m, true, KernelMode::fast, &repacked);
    const std::vector<float> stored = logits_of(m, false, KernelMode::fast);
    const std::string name = m.filename().string();
    if ((name == "nvfp4" || name == "mxfp4" || name == "int4" || name == "int4-ct") &&
        kernels::cpu_has_avx512vnni() && kernels::cpu_has_avx512vbmi()) {
      EXPECT_TRUE(repacked) << m << " not repacked on a CPU with the 16-row kernel";
    }
    if (!repacked) {
      EXPECT_EQ(stored, moved) << m;
      continue;
    }
    EXPECT_EQ(logits_of(m, false, KernelMode::exact), logits_of(m, true, KernelMode::exact)) << m;
    ASSERT_EQ(stored.size(), moved.size());
    for (size_t i = 0; i < stored.size(); ++i)
      ASSERT_NEAR(stored[i], moved[i], 1e-4f * (1.f + std::fabs(stored[i]))) << m << " logit " << i;
  }
}

}  // namespace
}  // namespace qf
