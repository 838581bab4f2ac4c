// Weights moved into 2 MB pages (ModelWeights::move_to_huge_pages, what bench and generate do)
// give the same logits, bit for bit, in every stored format: the copies hold exactly the bytes
// the kernels read, other owned parts (scales) stay alive, and releasing the file pages is safe.
#include "engine/model.h"
#include "engine/weights.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace qf {
namespace {

namespace fs = std::filesystem;

std::vector<float> logits_of(const fs::path& model, bool huge) {
  ModelWeights w = ModelWeights::load(model);
  if (huge) w.move_to_huge_pages(/*release_file_pages=*/true, /*min_bytes=*/0);
  ModelOptions opt;
  opt.threads = 2;
  opt.kernels = KernelMode::fast;
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
  for (const std::string f : {"nvfp4", "mxfp4", "fp8", "int4"}) {
    const fs::path out = tmp / f;
    const auto q = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                                    " --format " + f);
    ASSERT_EQ(q.exit_code, 0) << f << ": " << q.err;
    models.push_back(out);
  }
  for (const std::string f : {"q4_0", "q6_k", "bf16"}) {
    const fs::path out = tmp / (f + ".gguf");
    const auto q = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                                    " --export gguf --format " + f);
    ASSERT_EQ(q.exit_code, 0) << f << ": " << q.err;
    models.push_back(out);
  }
  for (const fs::path& m : models) EXPECT_EQ(logits_of(m, false), logits_of(m, true)) << m;
}

}  // namespace
}  // namespace qf
