#include "io/synthetic_tokenizer.h"

#include "core/error.h"
#include "io/json_file.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

namespace qf {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n, so
// every byte is a visible character in the vocabulary.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    out[b] = utf8(printable ? b : next++);
  }
  return out;
}

nlohmann::json added_token(int id, const char* content) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

}  // namespace

void write_synthetic_tokenizer(const std::filesystem::path& dir, int64_t vocab_size) {
  if (vocab_size < 259 || vocab_size > 1'000'000)
    fail("{}: a synthetic tokenizer needs a vocabulary of 259 to 1000000 ids, not {}",
         dir.string(), vocab_size);
  const std::vector<std::string> bytes = byte_symbols();
  // std::map objects: ordered_json looks keys up linearly, quadratic for a 128k vocabulary.
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) vocab[bytes[size_t(b)]] = 3 + b;

  // Breadth first: " x" and "xy" pairs, then each of those plus a letter, and so on; each new
  // token is an existing one plus a letter, so every merge joins two tokens already present.
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  std::vector<std::string> level;
  for (char c : letters) level.push_back(bytes[' '] + std::string(1, c));
  for (char a : letters)
    for (char b : letters) level.push_back(std::string(1, a) + std::string(1, b));
  nlohmann::json merges = nlohmann::json::array();
  int64_t id = 259;
  // The pair that forms each level-2 token: (space or first letter, second letter).
  auto split_two = [&](const std::string& t) {
    return t.starts_with(bytes[' ']) ? std::pair{bytes[' '], t.substr(bytes[' '].size())}
                                     : std::pair{t.substr(0, 1), t.substr(1)};
  };
  for (const std::string& t : level) {
    if (id == vocab_size) break;
    const auto [a, b] = split_two(t);
    merges.push_back({a, b});
    vocab[t] = id++;
  }
  while (id < vocab_size) {
    std::vector<std::string> next;
    for (const std::string& prefix : level)
      for (char c : letters) {
        if (id == vocab_size) break;
        const std::string t = prefix + c;
        merges.push_back({prefix, std::string(1, c)});
        vocab[t] = id++;
        next.push_back(t);
      }
    level = std::move(next);
  }

  nlohmann::json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = {added_token(0, "<unk>"), added_token(1, "<s>"), added_token(2, "</s>")};
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                          {"trim_offsets", true}, {"use_regex", true}};
  const nlohmann::json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", {bos, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos,
                {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  tok["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                    {"use_regex", true}};
  tok["model"] = {{"type", "BPE"},           {"dropout", nullptr},
                  {"unk_token", nullptr},    {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                  {"byte_fallback", false},  {"ignore_merges", false},
                  {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  const std::filesystem::path file = dir / "tokenizer.json";
  std::ofstream out(file, std::ios::binary);
  out << tok.dump(2) << '\n';
  out.close();
  if (!out) fail("{}: write failed", file.string());

  nlohmann::ordered_json config;
  config["add_bos_token"] = true;
  config["add_eos_token"] = false;
  config["bos_token"] = "<s>";
  config["eos_token"] = "</s>";
  config["unk_token"] = "<unk>";
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = 131072;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  write_json_file(dir / "tokenizer_config.json", config);
}

}  // namespace qf
