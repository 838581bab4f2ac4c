// Helpers shared by the tests: fixture paths, scratch directories, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf::test {

// ../shared/fixtures beside the source tree, or empty if absent (a user's clone).
std::filesystem::path fixtures_dir();

// Skips the current test with a message when the fixtures are absent.
#define QF_REQUIRE_FIXTURES()                                                          \
  do {                                                                                 \
    if (::qf::test::fixtures_dir().empty())                                            \
      GTEST_SKIP() << "../shared/fixtures not found next to the source tree; skipping"; \
  } while (0)

// A fresh, empty scratch directory, removed when the object dies.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the built qforge binary with `args` (a shell-quoted string), capturing both streams.
// `prefix` is prepended to the shell command line (for example "ulimit -f 100;").
CommandResult run_qforge(const std::string& args, const std::string& prefix = "");

// Writes bytes to a file (creating directories).
void write_file(const std::filesystem::path& path, const std::string& bytes);
std::string read_file(const std::filesystem::path& path);

// ---- end-to-end helpers (fixture models through the CLI) ----
// fixtures/models/<name>.
std::filesystem::path model_dir(const std::string& name);
// `p` in single quotes, for a run_qforge command line.
std::string quote(const std::filesystem::path& p);
// `qforge eval kl` of fixture model `model` against `quantized` on the first 4000 characters
// of tinystories_valid_subset.txt, parsed; an empty object (and a test failure) if it fails.
nlohmann::json eval_kl(const std::string& model, const std::filesystem::path& quantized);
// Its kl_mean; NaN (and a test failure) when the evaluation fails.
double eval_kl_mean(const std::string& model, const std::filesystem::path& quantized);
// " --calib <fixtures>/corpora/tinyshakespeare.txt --calib-samples N --calib-seq S --seed K":
// the calibration flags of the end-to-end tests.
std::string shakespeare_calib(int samples, int seq, int seed);
// tests/data/ggml/NAME.bin (golden vectors made by ggml itself): its bytes, or as float32.
std::vector<uint8_t> ggml_golden(const std::string& name);
std::vector<float> ggml_golden_floats(const std::string& name);
// A tokenizer.json whose 256 tokens are the bytes (GPT-2's byte-to-unicode alphabet, no
// merges): text in and out for the vocab-256 conformance models.
std::string byte_level_tokenizer();
// A copy of a conformance case directory at `model`, with byte_level_tokenizer() beside it
// (calibration and evaluation need text).
void copy_conformance_case(const std::filesystem::path& src, const std::filesystem::path& model);
// A copy of the checkpoint at `src` (config.json + one model.safetensors of BF16 tensors) with
// every tensor widened to F32, at `dst`.
void write_f32_copy(const std::filesystem::path& src, const std::filesystem::path& dst);
// `qforge inspect DIR --json --brief`, parsed; empty (and a test failure) if it fails.
nlohmann::json inspect_json(const std::filesystem::path& dir);

}  // namespace qf::test
