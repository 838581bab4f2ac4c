// `qforge quantize --export gguf` on the fixture Llamas: the file read back by qforge's GGUF
// reader has llama.cpp's metadata, names, shapes and types, and tensor bytes equal to ggml's
// reference quantizer on the (q/k-permuted) weights; unsupported families and tokenizers fail
// before anything is written.
#include "core/convert.h"
#include "formats/ggml_quants.h"
#include "formats/ggml_types.h"
#include "formats/nvfp4.h"
#include "formats/weight_rows.h"
#include "io/checkpoint.h"
#include "io/gguf_file.h"
#include "model/gguf_llama_layout.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

namespace qf {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string name;
  int64_t dim, ff, layers, heads, kv_heads, vocab;
  std::string tokenizer_model;
  int64_t byte_tokens;  // <0xXX> pieces (TinyStories-656K's byte fallback has none in its vocab)
};

const Fixture kFixtures[] = {
    {"stories260K-hf", 64, 172, 5, 8, 4, 512, "llama", 256},
    {"tinystories-656K-hf", 128, 384, 2, 8, 4, 2048, "llama", 0},
};

std::vector<float> source_floats(const fs::path& dir, const std::string& name) {
  const Checkpoint ck = Checkpoint::open(dir);
  const CheckpointTensor* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  const TensorData d = read_tensor(*t);
  std::vector<float> x(size_t(d.view.numel()));
  convert_to_f32(d.view.dtype, d.view.data, x.data(), x.size());
  return x;
}

// Exports `fx` as `format` and checks the file against the source model.
void check_export(const Fixture& fx, const std::string& format) {
  SCOPED_TRACE(fx.name + " " + format);
  const fs::path dir = test::model_dir(fx.name);
  test::ScratchDir tmp;
  const fs::path out = tmp.path() / "model.gguf";
  const auto r = test::run_qforge("quantize " + test::quote(dir) + " -o " + test::quote(out) +
                                  " --export gguf --format " + format + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const GgufFile f = GgufFile::open(out);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("general.quantization_version"), 2u);
  EXPECT_EQ(f.get_u32("general.alignment"), 32u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), uint32_t(fx.dim));
  EXPECT_EQ(f.get_u32("llama.feed_forward_length"), uint32_t(fx.ff));
  EXPECT_EQ(f.get_u32("llama.block_count"), uint32_t(fx.layers));
  EXPECT_EQ(f.get_u32("llama.attention.head_count"), uint32_t(fx.heads));
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), uint32_t(fx.kv_heads));
  EXPECT_EQ(f.get_u32("llama.rope.dimension_count"), uint32_t(fx.dim / fx.heads));
  EXPECT_EQ(f.get_f32("llama.rope.freq_base"), 10000.f);
  EXPECT_GT(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 0.f);
  EXPECT_GT(f.get_u32("llama.context_length"), 0u);
  EXPECT_EQ(f.get_u32("llama.vocab_size"), uint32_t(fx.vocab));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), fx.tokenizer_model);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens").size(), size_t(fx.vocab));
  EXPECT_EQ(f.get_f32_array("tokenizer.ggml.scores").size(), size_t(fx.vocab));
  const auto types = f.get_i32_array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), size_t(fx.vocab));
  EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(types[1], 3);  // BOS is a control token
  EXPECT_EQ(std::count(types.begin(), types.end(), 6), fx.byte_tokens);

  // Tied embeddings: no output tensor; norms F32; names and shapes as llama.cpp expects.
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  const auto* embd = f.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->ne, (std::vector<int64_t>{fx.dim, fx.vocab}));
  ASSERT_NE(f.find_tensor("output_norm.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("output_norm.weight")->type, GgmlType::F32);
  const int64_t hd = fx.dim / fx.heads;
  for (int64_t l = 0; l < fx.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_norm", "ffn_norm"}) {
      const auto* t = f.find_tensor(b + n + ".weight");
      ASSERT_NE(t, nullptr) << b + n;
      EXPECT_EQ(t->type, GgmlType::F32);
      EXPECT_EQ(t->ne, (std::vector<int64_t>{fx.dim}));
    }
    const std::pair<const char*, std::vector<int64_t>> mats[] = {
        {"attn_q", {fx.dim, fx.heads * hd}},   {"attn_k", {fx.dim, fx.kv_heads * hd}},
        {"attn_v", {fx.dim, fx.kv_heads * hd}}, {"attn_output", {fx.heads * hd, fx.dim}},
        {"ffn_gate", {fx.dim, fx.ff}},          {"ffn_up", {fx.dim, fx.ff}},
        {"ffn_down", {fx.ff, fx.dim}}};
    for (const auto& [n, ne] : mats) {
      const auto* t = f.find_tensor(b + n + ".weight");
      ASSERT_NE(t, nullptr) << b + n;
      EXPECT_EQ(t->ne, ne) << b + n;
      EXPECT_EQ(ne[0] % ggml_type_info(t->type).block_size, 0) << b + n;
    }
  }

  // Bytes: blk.0.attn_k is the permuted k_proj through ggml's reference quantizer (NVFP4:
  // qforge's two-level quantizer, whose values ggml's blocks times .scale reproduce).
  const auto* k = f.find_tensor("blk.0.attn_k.weight");
  std::vector<float> w = source_floats(dir, "model.layers.0.self_attn.k_proj.weight");
  gguf_permute_qk_rows(w.data(), fx.kv_heads, hd, fx.dim);
  const GgmlTypeInfo& info = ggml_type_info(k->type);
  const auto view = f.view(*k);
  if (k->type == GgmlType::NVFP4) {
    const auto* s = f.find_tensor("blk.0.attn_k.scale");
    ASSERT_NE(s, nullptr);
    float g = 0;
    std::memcpy(&g, f.view(*s).data.data(), 4);
    std::vector<float> y(w.size()), ref(w.size());
    info.dequantize(reinterpret_cast<const uint8_t*>(view.data.data()), y.data(), int64_t(y.size()));
    const int64_t rows = int64_t(w.size()) / fx.dim;
    std::vector<uint8_t> packed(w.size() / 2), scales(w.size() / 16);
    nvfp4_quantize_reference({w.data(), DType::F32, rows, fx.dim, {}}, g, packed.data(), scales.data());
    nvfp4_dequantize(packed.data(), scales.data(), g, rows, fx.dim, ref.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i] * g, ref[i]) << i;
  } else {
    std::vector<uint8_t> expect(view.data.size());
    info.quantize(w.data(), expect.data(), int64_t(w.size()));
    EXPECT_EQ(0, std::memcmp(expect.data(), view.data.data(), expect.size()));
  }
}

class GgufExportE2E : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufExportE2E, BothFixturesReadBack) {
  if (test::fixtures_dir().empty()) GTEST_SKIP() << "fixtures absent (../shared/fixtures)";
  for (const Fixture& fx : kFixtures) check_export(fx, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Types, GgufExportE2E,
                         ::testing::Values("f32", "f16", "q8_0", "q4_0", "q4_k_m", "q6_k",
                                           "mxfp4", "nvfp4"));

// The fixture's own llama.cpp GGUF of stories260K (converted from llama2.c, whose q/k rows were
// never in rotate-half order) is what an F32 export must reproduce: every tensor both hold, and
// the vocabulary, bit for bit. This pins the q/k permutation against a file llama.cpp wrote.
TEST(GgufExportE2E, F32ExportEqualsTheFixturesLlamaCppGguf) {
  if (test::fixtures_dir().empty()) GTEST_SKIP() << "fixtures absent (../shared/fixtures)";
  test::ScratchDir tmp;
  const fs::path out = tmp.path() / "m.gguf";
  const auto r = test::run_qforge("quantize " + test::quote(test::model_dir("stories260K-hf")) +
                                  " -o " + test::quote(out) + " --export gguf --format f32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile ours = GgufFile::open(out);
  const GgufFile ref =
      GgufFile::open(test::model_dir("stories260K-llama2c") / "stories260K.gguf");
  int compared = 0;
  for (const GgufTensorInfo& t : ours.tensors()) {
    const GgufTensorInfo* u = ref.find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.ne, u->ne) << t.name;
    const auto a = ours.view(t).data, b = ref.view(*u).data;
    ASSERT_EQ(a.size(), b.size()) << t.name;
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, 47);
  EXPECT_EQ(ours.get_string_array("tokenizer.ggml.tokens"),
            ref.get_string_array("tokenizer.ggml.tokens"));
  EXPECT_EQ(ours.get_f32_array("tokenizer.ggml.scores"), ref.get_f32_array("tokenizer.ggml.scores"));
  EXPECT_EQ(ours.get_i32_array("tokenizer.ggml.token_type"),
            ref.get_i32_array("tokenizer.ggml.token_type"));
}

TEST(GgufExportE2E, Q4KMTypesFollowLlamaQuantize) {
  if (test::fixtures_dir().empty()) GTEST_SKIP() << "fixtures absent (../shared/fixtures)";
  test::ScratchDir tmp;
  const fs::path out = tmp.path() / "m.gguf";
  const auto r = test::run_qforge("quantize " + test::quote(test::model_dir("stories260K-hf")) +
                                  " -o " + test::quote(out) + " --export gguf --format q4_k_m");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f = GgufFile::open(out);
  EXPECT_EQ(f.get_u32("general.file_type"), 15u);
  // Rows of 64 / 172: no Q4_K fits; tied output -> Q8_0; ffn_down (172) -> F16.
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.1.attn_q.weight")->type, GgmlType::Q8_0);
  EXPECT_NE(r.out.find("not a multiple"), std::string::npos) << r.out;
}

// The fixtures' rows (64, 128, 172, 384) are too short for the 256-element k-quants, so a
// synthetic Llama of 256-wide rows (`qforge synth --shape tiny`, byte-level BPE tokenizer)
// exercises Q4_K / Q5_K / Q6_K, the Q4_K_M mix and the gpt2 vocabulary.
TEST(GgufExportE2E, KQuantsOnASyntheticLlama) {
  test::ScratchDir tmp;
  const fs::path dir = tmp.path() / "tiny";
  ASSERT_EQ(test::run_qforge("synth --shape tiny -q -o " + test::quote(dir)).exit_code, 0);
  for (const std::string format : {"q4_k", "q5_k", "q6_k", "q4_k_m"}) {
    SCOPED_TRACE(format);
    const fs::path out = tmp.path() / (format + ".gguf");
    const auto r = test::run_qforge("quantize " + test::quote(dir) + " -o " + test::quote(out) +
                                    " --export gguf --format " + format);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const GgufFile f = GgufFile::open(out);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
    EXPECT_FALSE(f.get_string_array("tokenizer.ggml.merges").empty());
    const GgmlType base = format == "q5_k" ? GgmlType::Q5_K
                          : format == "q6_k" ? GgmlType::Q6_K
                                             : GgmlType::Q4_K;
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, base);
    if (format == "q4_k_m") {  // 2 layers: use_more_bits is true for layer 1 only; tied output
      EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::Q6_K);
      EXPECT_EQ(f.find_tensor("blk.0.attn_v.weight")->type, GgmlType::Q4_K);
      EXPECT_EQ(f.find_tensor("blk.1.attn_v.weight")->type, GgmlType::Q6_K);
      EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->type, GgmlType::Q6_K);
      EXPECT_EQ(f.get_u32("general.file_type"), 15u);
    }
    for (const auto& [gguf_name, hf_name, heads] :
         {std::tuple<std::string, std::string, int64_t>{"blk.0.attn_q.weight",
                                                        "model.layers.0.self_attn.q_proj.weight", 4},
          {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight", 0}}) {
      const GgufTensorInfo* t = f.find_tensor(gguf_name);
      std::vector<float> w = source_floats(dir, hf_name);
      if (heads) gguf_permute_qk_rows(w.data(), heads, 64, t->ne[0]);
      const auto view = f.view(*t);
      std::vector<uint8_t> expect(view.data.size());
      ggml_type_info(t->type).quantize(w.data(), expect.data(), int64_t(w.size()));
      EXPECT_EQ(0, std::memcmp(expect.data(), view.data.data(), expect.size())) << gguf_name;
    }
  }
}

TEST(GgufExportE2E, RefusesOtherFamiliesAndTokenizersBeforeWriting) {
  if (test::fixtures_dir().empty()) GTEST_SKIP() << "fixtures absent (../shared/fixtures)";
  test::ScratchDir tmp;
  const fs::path src = test::model_dir("tinystories-656K-hf");
  const fs::path dir = tmp.path() / "model";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dir / e.path().filename());
  fs::permissions(dir / "config.json", fs::perms::owner_write, fs::perm_options::add);
  nlohmann::json cfg = nlohmann::json::parse(test::read_file(src / "config.json"));
  cfg["model_type"] = "mistral";
  test::write_file(dir / "config.json", cfg.dump());
  const fs::path out = tmp.path() / "x.gguf";
  auto r = test::run_qforge("quantize " + test::quote(dir) + " -o " + test::quote(out) +
                            " --export gguf --format q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("model_type 'mistral'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  cfg["model_type"] = "llama";
  test::write_file(dir / "config.json", cfg.dump());
  nlohmann::json tok = nlohmann::json::parse(test::read_file(src / "tokenizer.json"));
  tok["model"]["byte_fallback"] = false;
  tok["normalizer"] = nullptr;
  fs::permissions(dir / "tokenizer.json", fs::perms::owner_write, fs::perm_options::add);
  test::write_file(dir / "tokenizer.json", tok.dump());
  r = test::run_qforge("quantize " + test::quote(dir) + " -o " + test::quote(out) +
                       " --export gguf --format q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  // An existing file is kept unless --force.
  test::write_file(out, "not a gguf");
  r = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                       " --export gguf --format q8_0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("exists (--force replaces it)"), std::string::npos) << r.err;
  EXPECT_EQ(test::read_file(out), "not a gguf");
  r = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                       " --export gguf --format q8_0 --force");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(GgufFile::open(out).get_u32("general.file_type"), 7u);

  r = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                       " --format q4_k_m");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs --export gguf"), std::string::npos) << r.err;
}

// Llama 3.1+ RoPE scaling (the conformance model's llama3 rope_scaling, checked against
// transformers elsewhere): written as convert_hf_to_gguf does, the F32 `rope_freqs.weight`
// divisors (1 for short wavelengths, `factor` for long ones, the blend between), and read back
// as those divisors: the GGUF gives the safetensors model's logits. (llama-perplexity on such a
// file agrees with `eval ppl --protocol llama.cpp` to 4e-5: scripts/interop notes.)
TEST(GgufExportE2E, Llama3RopeWritesAndReadsRopeFreqs) {
  const fs::path src = fs::path(QFORGE_SOURCE_DIR) / "tests/data/conformance/llama3_v4";
  if (!fs::exists(src)) GTEST_SKIP() << "conformance data missing";
  test::ScratchDir tmp;
  const fs::path dir = tmp.path() / "model";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dir / f);
  test::write_file(dir / "tokenizer.json", test::byte_level_tokenizer());
  const fs::path out = tmp.path() / "l3.gguf";
  const auto r = test::run_qforge("quantize " + test::quote(dir) + " -o " + test::quote(out) +
                                  " --export gguf --format f32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f = GgufFile::open(out);
  const GgufTensorInfo* t = f.find_tensor("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->ne, (std::vector<int64_t>{8}));  // head_dim 16
  std::vector<float> factors(8);
  std::memcpy(factors.data(), f.view(*t).data.data(), sizeof(float) * 8);
  // theta 500000, factor 8, original context 64: wavelength 2 pi < 16 -> 1; 32.4 -> blended;
  // the rest are longer than 64 -> 8.
  EXPECT_EQ(factors[0], 1.f);
  EXPECT_GT(factors[1], 2.4f);
  EXPECT_LT(factors[1], 2.5f);
  for (int i = 2; i < 8; ++i) EXPECT_EQ(factors[size_t(i)], 8.f) << i;
  const auto kl = test::run_qforge("eval kl " + test::quote(dir) + " " + test::quote(out) +
                                   " --text " + test::quote(fs::path(QFORGE_SOURCE_DIR) / "README.md") +
                                   " --max-chars 3000 --json");
  ASSERT_EQ(kl.exit_code, 0) << kl.err;
  EXPECT_LT(nlohmann::json::parse(kl.out)["kl_mean"].get<double>(), 1e-9) << kl.out;
}

// --threads changes nothing in the bytes; --scale-division reaches NVFP4's tensor scale (the
// .scale tensor is what ModelOpt's GPU or CPU division gives); --max-shard-size is refused, since
// the export is one file.
TEST(GgufExportE2E, ThreadsScaleDivisionAndShardFlags) {
  if (test::fixtures_dir().empty()) GTEST_SKIP() << "fixtures absent (../shared/fixtures)";
  test::ScratchDir tmp;
  const fs::path src = test::model_dir("stories260K-hf");
  auto run = [&](const std::string& name, const std::string& flags) {
    const fs::path out = tmp.path() / name;
    const auto r = test::run_qforge("quantize " + test::quote(src) + " -o " + test::quote(out) +
                                    " --export gguf " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return test::read_file(out);
  };
  EXPECT_EQ(run("one.gguf", "--format q4_0 --threads 1"), run("two.gguf", "--format q4_0 --threads 2"));

  // The two divisions give different bytes on this model (some tensor scale is one ulp apart).
  EXPECT_NE(run("gpu.gguf", "--format nvfp4 --scale-division gpu"),
            run("cpu.gguf", "--format nvfp4 --scale-division cpu"));
  for (const std::string division : {"gpu", "cpu"}) {
    SCOPED_TRACE(division);
    const GgufFile f = GgufFile::open(tmp.path() / (division + ".gguf"));
    const GgufTensorInfo* t = f.find_tensor("blk.0.attn_q.scale");
    ASSERT_NE(t, nullptr);
    float stored;
    std::memcpy(&stored, f.view(*t).data.data(), 4);
    const std::vector<float> w = source_floats(src, "model.layers.0.self_attn.q_proj.weight");
    float amax = 0.f;
    for (float v : w) amax = std::max(amax, std::fabs(v));
    set_constant_division(division == "cpu" ? ConstantDivision::cpu : ConstantDivision::gpu);
    EXPECT_EQ(stored, nvfp4_global_scale(amax));
  }
  set_constant_division(ConstantDivision::gpu);

  const auto r = test::run_qforge("quantize " + test::quote(src) + " -o " +
                                  test::quote(tmp.path() / "s.gguf") +
                                  " --export gguf --format q8_0 --max-shard-size 1MB");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--max-shard-size does not apply"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qf
