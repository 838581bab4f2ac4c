// libFuzzer target for calibration files (JSON Lines or plain text) cut into token windows:
// any file either gives windows of exactly seq_len valid ids, or throws qf::Error naming it.
//
// Input: byte 0 picks the file name (.jsonl, .txt) and whether the tokenizer has BOS, byte 1
// the window length, byte 2 the sample count, byte 3 the seed; the rest is the file.
#include "calib/calibration_data.h"
#include "core/error.h"
#include "fuzz_util.h"
#include "io/tokenizer.h"

#include <nlohmann/json.hpp>

namespace {

// A byte-level BPE over GPT-2's byte-to-character map: every byte string encodes, so the
// fuzzer's effort goes into the calibration reader, not into unknown characters.
std::unique_ptr<qf::Tokenizer> byte_tokenizer(bool with_bos) {
  nlohmann::json vocab = nlohmann::json::object();
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + n++);
    std::string utf8;
    if (cp < 0x80) utf8 = char(cp);
    else utf8 = {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    vocab[utf8] = b;
  }
  const nlohmann::json tj = {
      {"added_tokens", {{{"id", 256}, {"content", "<s>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"post_processor", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  const auto dir = qf::fuzz::scratch_dir() / (with_bos ? "tok_bos" : "tok");
  std::filesystem::create_directories(dir);
  qf::fuzz::write_file(dir / "tokenizer.json", tj.dump());
  qf::fuzz::write_file(dir / "tokenizer_config.json",
                       with_bos ? R"({"bos_token": "<s>"})" : R"({"bos_token": null})");
  return qf::Tokenizer::load(dir);
}

const qf::Tokenizer& tokenizer(bool with_bos) {
  static const auto with = byte_tokenizer(true);
  static const auto without = byte_tokenizer(false);
  return with_bos ? *with : *without;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const bool jsonl = data[0] & 1, bos = data[0] & 2;
  const auto& tok = tokenizer(bos);
  const auto file = qf::fuzz::scratch_dir() / (jsonl ? "calib.jsonl" : "calib.txt");
  qf::fuzz::write_file(file, qf::fuzz::as_text(data + 4, size - 4));
  qf::CalibrationOptions o;
  o.files = {file};
  o.seq_len = int64_t(data[1] % 40) - 2;  // a few invalid lengths, mostly short windows
  o.samples = int64_t(data[2] % 20) - 1;
  o.seed = data[3];
  try {
    const auto cd = qf::load_calibration_data(o, tok);
    if (cd.windows.empty() || int64_t(cd.windows.size()) > o.samples) std::abort();
    for (const auto& w : cd.windows) {
      if (int64_t(w.size()) != o.seq_len) std::abort();
      for (int32_t id : w)
        if (id < 0 || id >= tok.vocab_size()) std::abort();
      if (bos && w[0] != tok.bos_id()) std::abort();
    }
  } catch (const qf::Error&) {
  }
  return 0;
}
