// The engine against transformers on tiny random models of every supported family and config
// variant (tests/data/conformance, made by scripts/conformance/generate.sh): logits at the
// stored positions and the perplexity of one 256-token window, with the weights as stored
// (BF16) and converted to F32.
#include "core/error.h"
#include "core/numeric.h"
#include "engine/model.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "kernels/linear.h"
#include "model/architecture.h"
#include "test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace qf {
namespace {

namespace fs = std::filesystem;

fs::path conformance_dir() { return fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance"; }

std::vector<std::string> cases() {
  std::vector<std::string> out;
  if (!fs::exists(conformance_dir())) return out;
  for (const auto& e : fs::directory_iterator(conformance_dir()))
    if (fs::exists(e.path() / "reference.json")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

template <typename T>
std::vector<T> tensor(const SafetensorsFile& f, const std::string& name) {
  const SafetensorsEntry* e = f.find(name);
  if (!e) throw std::runtime_error("reference tensor missing: " + name);
  const TensorView v = f.view(*e);
  std::vector<T> out(size_t(v.numel()));
  std::memcpy(out.data(), v.data, out.size() * sizeof(T));
  return out;
}

struct Result {
  double ppl = 0;
  double max_logit_diff = 0;
  std::vector<float> logits;  // [T, vocab]
};

// The case's window through the engine: one forward over all tokens (prefill: attention over
// the window, Mamba's chunked scan), or with `decode` one token per call (the KV cache,
// Mamba's recurrence).
Result run_case(const fs::path& model_dir, const fs::path& case_dir, KernelMode kernels,
                bool decode = false) {
  const SafetensorsFile ref = SafetensorsFile::open(case_dir / "reference.safetensors");
  const auto ids = tensor<int32_t>(ref, "input_ids");
  const auto positions = tensor<int32_t>(ref, "positions");
  const auto logits_ref = tensor<float>(ref, "logits");
  ModelOptions mo;
  mo.threads = 2;
  mo.kernels = kernels;
  auto model = Model::load(model_dir, mo);
  const int64_t T = int64_t(ids.size()), V = model->vocab_size();
  Result r;
  std::vector<float>& logits = r.logits;
  logits.resize(size_t(T * V));
  if (decode) {
    for (int64_t t = 0; t < T; ++t)
      model->forward(std::span(ids).subspan(size_t(t), 1), t, logits.data() + t * V, false);
  } else {
    model->forward(ids, 0, logits.data(), true);
  }
  double nll = 0;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const float* row = logits.data() + t * V;
    const float mx = *std::max_element(row, row + V);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(row[v]) - double(mx));
    nll += -(double(row[ids[size_t(t + 1)]]) - double(mx) - std::log(s));
  }
  r.ppl = std::exp(nll / double(T - 1));
  for (size_t p = 0; p < positions.size(); ++p)
    for (int64_t v = 0; v < V; ++v)
      r.max_logit_diff = std::max(r.max_logit_diff,
                                  std::fabs(double(logits[size_t(positions[p] * V + v)]) -
                                            double(logits_ref[p * size_t(V) + size_t(v)])));
  return r;
}

// The RoPE inverse frequencies and cos/sin factor transformers used in the reference forward
// (after its dynamic / LongRoPE update for T tokens): bit for bit, except that torch's float32
// pow (SLEEF, within 1 ulp) can differ from the C library's by one ulp for a base that is not
// an integer (dynamic NTK rescales the base).
TEST(ConformanceRope, InverseFrequenciesAreTransformersBits) {
  for (const std::string& name : cases()) {
    SCOPED_TRACE(name);
    const fs::path dir = conformance_dir() / name;
    std::ifstream cf(dir / "config.json");
    // A case that does not parse fails alone; the other cases are still checked.
    Architecture a;
    try {
      a = Architecture::from_config(nlohmann::json::parse(cf), name);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    const SafetensorsFile ref = SafetensorsFile::open(dir / "reference.safetensors");
    const int64_t T = int64_t(tensor<int32_t>(ref, "input_ids").size());
    const bool per_type = ref.find("rope_inv_freq_full_attention") != nullptr;
    if (a.ropes.empty()) {  // no positional encoding (Nemotron-H): transformers has none either
      EXPECT_EQ(ref.find("rope_inv_freq"), nullptr);
      continue;
    }
    for (size_t r = 0; r < (per_type ? 2u : 1u); ++r) {
      const std::string suffix = per_type ? (r == 0 ? "_full_attention" : "_sliding_attention") : "";
      const auto want = tensor<float>(ref, "rope_inv_freq" + suffix);
      const auto scaling = tensor<float>(ref, "rope_attention_scaling" + suffix);
      const auto got = a.ropes[r].inv_freq(T);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        int32_t a_bits, b_bits;
        std::memcpy(&a_bits, &got[i], 4);
        std::memcpy(&b_bits, &want[i], 4);
        if (a.ropes[r].type == RopeType::dynamic)
          EXPECT_LE(std::abs(a_bits - b_bits), 1) << "inv_freq[" << i << "]";
        else
          EXPECT_EQ(got[i], want[i]) << "inv_freq[" << i << "]";
      }
      EXPECT_EQ(float(a.ropes[r].attention_factor), scaling.at(0));
    }
  }
}

double reference_ppl(const fs::path& case_dir) {
  std::ifstream f(case_dir / "reference.json");
  return nlohmann::json::parse(f).at("ppl").get<double>();
}

class Conformance : public ::testing::TestWithParam<std::string> {};

// F32 weights: the exact float path. PPL within 1e-5 relative, logits within 1e-4.
TEST_P(Conformance, F32MatchesTransformers) {
  const fs::path dir = conformance_dir() / GetParam();
  test::ScratchDir scratch;
  test::write_f32_copy(dir, scratch.path());
  const Result r = run_case(scratch.path(), dir, KernelMode::exact);
  const double want = reference_ppl(dir);
  RecordProperty("ppl_rel_diff", fmt::format("{:.3g}", std::fabs(r.ppl / want - 1)));
  RecordProperty("max_logit_diff", fmt::format("{:.3g}", r.max_logit_diff));
  std::printf("[conformance] %-22s F32  ppl %.6f ref %.6f rel %.2e max|dlogit| %.2e\n",
              GetParam().c_str(), r.ppl, want, std::fabs(r.ppl / want - 1), r.max_logit_diff);
  EXPECT_LE(std::fabs(r.ppl / want - 1), 1e-5);
  EXPECT_LE(r.max_logit_diff, 1e-4);
}

// Tokens whose router margin (the k-th best expert's score minus the next one's) is below 1e-3
// in the reference forward (reference.json router_near_ties, MoE cases).
int64_t near_tied_routes(const fs::path& case_dir) {
  std::ifstream f(case_dir / "reference.json");
  const auto j = nlohmann::json::parse(f);
  int64_t n = 0;
  if (j.contains("router_near_ties"))
    for (const auto& [layer, counts] : j["router_near_ties"].items())
      n += counts.value("margin<0.001", int64_t(0));
  return n;
}

// Token-by-token decode (F32, exact kernels) against transformers and against the engine's own
// full-sequence forward: for Nemotron-H the recurrence against the chunked scan.
TEST_P(Conformance, DecodeMatchesTransformersAndPrefill) {
  const fs::path dir = conformance_dir() / GetParam();
  {
    const Architecture a =
        Architecture::from_config(nlohmann::json::parse(std::ifstream(dir / "config.json")), "c");
    const int64_t T = int64_t(
        tensor<int32_t>(SafetensorsFile::open(dir / "reference.safetensors"), "input_ids").size());
    for (const RopeSpec& r : a.ropes)
      if (r.inv_freq(1) != r.inv_freq(T))
        GTEST_SKIP() << "RoPE frequencies depend on the length of each call (dynamic NTK, "
                        "LongRoPE): decode rotates early keys differently, as transformers does";
  }
  const test::ScratchDir f32_dir;
  test::write_f32_copy(dir, f32_dir.path());
  const Result prefill = run_case(f32_dir.path(), dir, KernelMode::exact);
  const Result decode = run_case(f32_dir.path(), dir, KernelMode::exact, /*decode=*/true);
  const double want = reference_ppl(dir);
  double diff = 0;
  for (size_t i = 0; i < prefill.logits.size(); ++i)
    diff = std::max(diff, std::fabs(double(prefill.logits[i]) - double(decode.logits[i])));
  std::printf("[conformance] %-22s F32 decode ppl rel %.2e max|dlogit| %.2e vs prefill %.2e\n",
              GetParam().c_str(), std::fabs(decode.ppl / want - 1), decode.max_logit_diff, diff);
  EXPECT_LE(std::fabs(decode.ppl / want - 1), 1e-5);
  EXPECT_LE(decode.max_logit_diff, 1e-4);
  EXPECT_LE(diff, 1e-4);
}

// BF16 weights as stored: the default (fast) kernels round prefill activations to BF16, so
// PPL within 1e-3; the precise kernels compute the same float math as F32. An MoE case whose
// routers have near-tied tokens may route a few of them differently on BF16 activations (a
// discrete flip, not an accumulation of rounding: deepseek_v3_q_direct flips 4 of 512 routes
// with the AVX512-BF16 kernel's sums, 2.0e-3, and 3 others with the AMX kernel's, 3.5e-3:
// which tokens flip decides), so there the fast bound is 5e-3; the exact kernels are held to
// 1e-5 everywhere. A hybrid case routes downstream of Mamba layers, whose in_proj output feeds
// exp(dt A): nemotron_h moves 6.0e-3 (5.8e-4 with in_proj exact, nemotron_h_latent then 4.7e-3:
// again which routes flip), so a hybrid MoE case with near ties is held to 1e-2.
TEST_P(Conformance, Bf16MatchesTransformers) {
  const fs::path dir = conformance_dir() / GetParam();
  const double want = reference_ppl(dir);
  const bool hybrid = std::ifstream(dir / "config.json").good() &&
                      nlohmann::json::parse(std::ifstream(dir / "config.json"))
                              .value("model_type", "") == "nemotron_h";
  const double fast_bound = near_tied_routes(dir) > 0 ? (hybrid ? 1e-2 : 5e-3) : 1e-3;
  const Result fast = run_case(dir, dir, KernelMode::fast);
  std::printf("[conformance] %-22s BF16 ppl %.6f ref %.6f rel %.2e max|dlogit| %.2e\n",
              GetParam().c_str(), fast.ppl, want, std::fabs(fast.ppl / want - 1),
              fast.max_logit_diff);
  EXPECT_LE(std::fabs(fast.ppl / want - 1), fast_bound);
  const Result exact = run_case(dir, dir, KernelMode::exact);
  std::printf("[conformance] %-22s BF16 exact ppl %.6f rel %.2e max|dlogit| %.2e\n",
              GetParam().c_str(), exact.ppl, std::fabs(exact.ppl / want - 1), exact.max_logit_diff);
  EXPECT_LE(std::fabs(exact.ppl / want - 1), 1e-5);
  EXPECT_LE(exact.max_logit_diff, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Families, Conformance, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);

}  // namespace
}  // namespace qf
