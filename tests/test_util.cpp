#include "test_util.h"

#include "core/numeric.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

#include <cmath>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace qf::test {

fs::path fixtures_dir() {
  const fs::path p = fs::path(QFORGE_SOURCE_DIR).parent_path() / "shared" / "fixtures";
  return fs::exists(p / "models") ? p : fs::path();
}

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() /
          ("qforge-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(path_, ec);
}

CommandResult run_qforge(const std::string& args, const std::string& prefix) {
  ScratchDir io;
  const fs::path out = io / "stdout", err = io / "stderr";
  const std::string cmd = prefix + " '" + std::string(QFORGE_BINARY) + "' " + args + " >'" +
                          out.string() + "' 2>'" + err.string() + "' </dev/null";
  write_file(io / "cmd.sh", cmd + "\n");
  const int status = std::system(("bash '" + (io / "cmd.sh").string() + "'").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

void write_file(const fs::path& path, const std::string& bytes) {
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path model_dir(const std::string& name) { return fixtures_dir() / "models" / name; }

std::string quote(const fs::path& p) { return fmt::format("'{}'", p.string()); }

nlohmann::json eval_kl(const std::string& model, const fs::path& quantized) {
  const auto r = run_qforge("eval kl " + quote(model_dir(model)) + " " + quote(quantized) +
                            " --text " +
                            quote(fixtures_dir() / "corpora" / "tinystories_valid_subset.txt") +
                            " --max-chars 4000 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
}

double eval_kl_mean(const std::string& model, const fs::path& quantized) {
  const auto kl = eval_kl(model, quantized);
  return kl.contains("kl_mean") ? kl["kl_mean"].get<double>() : NAN;
}

std::string shakespeare_calib(int samples, int seq, int seed) {
  return " --calib " + quote(fixtures_dir() / "corpora" / "tinyshakespeare.txt") +
         " --calib-samples " + std::to_string(samples) + " --calib-seq " + std::to_string(seq) +
         " --seed " + std::to_string(seed);
}

std::string byte_level_tokenizer() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int extra = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + extra++);
    }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < bs.size(); ++i) {
    std::string utf8;
    const int c = cs[i];
    if (c < 0x80) {
      utf8 += char(c);
    } else {
      utf8 += char(0xC0 | (c >> 6));
      utf8 += char(0x80 | (c & 0x3F));
    }
    vocab[utf8] = bs[i];
  }
  const nlohmann::json level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                                {"trim_offsets", true}, {"use_regex", true}};
  return nlohmann::json{{"version", "1.0"},
                        {"added_tokens", nlohmann::json::array()},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", level},
                        {"post_processor", nullptr},
                        {"decoder", level},
                        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}}
      .dump();
}

nlohmann::json inspect_json(const fs::path& dir) {
  const auto r = run_qforge("inspect " + quote(dir) + " --json --brief");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
}

std::vector<uint8_t> ggml_golden(const std::string& name) {
  const fs::path path = fs::path(QFORGE_SOURCE_DIR) / "tests/data/ggml" / (name + ".bin");
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<float> ggml_golden_floats(const std::string& name) {
  const auto bytes = ggml_golden(name);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

void copy_conformance_case(const std::filesystem::path& src, const std::filesystem::path& model) {
  std::filesystem::copy(src, model);
  write_file(model / "tokenizer.json", byte_level_tokenizer());
}

void write_f32_copy(const std::filesystem::path& src, const std::filesystem::path& dst) {
  std::filesystem::create_directories(dst);
  std::filesystem::copy_file(src / "config.json", dst / "config.json");
  const SafetensorsFile in = SafetensorsFile::open(src / "model.safetensors");
  std::vector<TensorSpec> specs;
  for (const auto& e : in.tensors()) specs.push_back({e.name, DType::F32, e.shape});
  SafetensorsWriter out(dst / "model.safetensors", specs);
  for (const auto& e : in.tensors()) {
    const TensorView v = in.view(e);
    std::vector<float> f(size_t(v.numel()));
    for (size_t i = 0; i < f.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, v.data + 2 * i, 2);
      f[i] = bf16_to_f32(h);
    }
    out.write(e.name, std::as_bytes(std::span(f)));
  }
  out.finish();
}

}  // namespace qf::test
