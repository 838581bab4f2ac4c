// GGUF tokenizer metadata -> tokenizer.json + tokenizer_config.json (see the header). The files
// are checked by reading them back with qforge's Hugging Face loader against llama.cpp's test
// vectors and the GGUF tokenizer itself (tests/io/tokenizer_conformance_test.cpp).
#include "io/tokenizer_gguf_export.h"

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_vocab.h"
#include "io/io_util.h"
#include "io/json_file.h"
#include "io/tokenizer_internal.h"
#include "io/tokenizer_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

namespace qf {

namespace {

using ojson = nlohmann::ordered_json;
constexpr std::string_view kMetaSpace = "\xE2\x96\x81";

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  std::unordered_map<std::string, int32_t> ids;
};

GgufVocab read_vocab(const GgufFile& f, const std::string& label) {
  GgufVocab v;
  for (std::string_view t : f.get_string_array("tokenizer.ggml.tokens")) v.tokens.emplace_back(t);
  const size_t n = v.tokens.size();
  v.types.assign(n, kGgufTokenNormal);
  if (f.find("tokenizer.ggml.token_type")) {
    const std::vector<int32_t> t = f.get_i32_array("tokenizer.ggml.token_type");
    std::copy_n(t.begin(), std::min(n, t.size()), v.types.begin());
  }
  v.scores.assign(n, 0.f);
  if (f.find("tokenizer.ggml.scores")) {
    const std::vector<float> s = f.get_f32_array("tokenizer.ggml.scores");
    std::copy_n(s.begin(), std::min(n, s.size()), v.scores.begin());
  }
  for (size_t id = 0; id < n; ++id) {
    if (v.tokens[id].empty()) v.tokens[id] = fmt::format("[EMPTY_{}]", id);
    if (!v.ids.emplace(v.tokens[id], int32_t(id)).second)
      fail("{}: token {} ({}) appears twice in tokenizer.ggml.tokens", label, id,
           quote_name(v.tokens[id]));
  }
  return v;
}

int32_t special_id(const GgufFile& f, const char* key, size_t n) {
  if (!f.find(key)) return -1;
  const uint32_t id = f.get_u32(key);
  return id < n ? int32_t(id) : -1;
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// transformers' SentencePieceExtractor: for every token, each split into two tokens is a merge
// scored by the whole token; highest score first, then longer left and right parts, then (a
// stable sort) the order of the token ids.
ojson spm_merges(const GgufVocab& v) {
  struct Merge {
    int32_t left, right;
    float score;
    size_t left_len, right_len;
  };
  std::vector<Merge> merges, local;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& t = v.tokens[id];
    local.clear();
    for (size_t b = 1; b < t.size(); ++b) {
      if ((static_cast<unsigned char>(t[b]) & 0xC0) == 0x80) continue;  // inside a character
      const auto l = v.ids.find(t.substr(0, b)), r = v.ids.find(t.substr(b));
      if (l != v.ids.end() && r != v.ids.end())
        local.push_back({l->second, r->second, v.scores[id], code_points(l->first),
                         code_points(r->first)});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_len != b.left_len) return a.left_len > b.left_len;
    return a.right_len > b.right_len;
  });
  ojson out = ojson::array();
  for (const Merge& m : merges)
    out.push_back(ojson::array({v.tokens[size_t(m.left)], v.tokens[size_t(m.right)]}));
  return out;
}

}  // namespace

std::string write_hf_tokenizer_files(const GgufFile& f, const std::filesystem::path& dir) {
  const std::string label = f.path().string();
  // Everything io/tokenizer_gguf would refuse is refused here the same way.
  const std::unique_ptr<tok::TokenizerBase> reference = tok::load_gguf_tokenizer(f);
  const std::string model(f.get_string("tokenizer.ggml.model"));
  const GgufVocab v = read_vocab(f, label);
  const size_t n = v.tokens.size();
  const bool spm = model == "llama";
  const int32_t bos = reference->bos_id(), eos = reference->eos_id();
  const int32_t unk = special_id(f, "tokenizer.ggml.unknown_token_id", n);
  const int32_t pad = special_id(f, "tokenizer.ggml.padding_token_id", n);
  const bool add_bos = reference->add_bos_by_default();

  ojson added = ojson::array();
  for (size_t id = 0; id < n; ++id) {
    const int32_t t = v.types[id];
    if (t != kGgufTokenControl && t != kGgufTokenUserDefined && t != kGgufTokenUnknown) continue;
    added.push_back({{"id", id}, {"content", v.tokens[id]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", t != kGgufTokenUserDefined}});
  }
  ojson vocab = ojson::object();
  for (size_t id = 0; id < n; ++id) vocab[v.tokens[id]] = id;

  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  ojson bpe = {{"type", "BPE"}, {"dropout", nullptr}};
  if (spm) {
    const bool prefix = f.find("tokenizer.ggml.add_space_prefix")
                            ? f.get_bool("tokenizer.ggml.add_space_prefix") : true;
    ojson norms = ojson::array();
    if (prefix) norms.push_back({{"type", "Prepend"}, {"prepend", std::string(kMetaSpace)}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kMetaSpace)}});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
    j["pre_tokenizer"] = nullptr;
    ojson decoders = ojson::array();
    decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", std::string(kMetaSpace)}}}, {"content", " "}});
    decoders.push_back({{"type", "ByteFallback"}});
    decoders.push_back({{"type", "Fuse"}});
    if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    bpe["unk_token"] = unk >= 0 ? ojson(v.tokens[size_t(unk)]) : ojson(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    bpe["ignore_merges"] = false;
    bpe["vocab"] = vocab;
    bpe["merges"] = spm_merges(v);
  } else {
    const tok::GgufPreTokenizer* pre =
        tok::gguf_pre_tokenizer(std::string(f.get_string("tokenizer.ggml.pre")));
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", std::string(pre->regex)}}}, {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
           {"use_regex", false}}}}};
    j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
                    {"use_regex", true}};
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["ignore_merges"] = pre->ignore_merges;
    bpe["vocab"] = vocab;
    ojson merges = ojson::array();
    for (std::string_view m : f.get_string_array("tokenizer.ggml.merges")) merges.push_back(std::string(m));
    bpe["merges"] = merges;
  }
  if (add_bos) {
    const std::string& b = v.tokens[size_t(bos)];
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", b}, {"type_id", 1}}}},
                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{b, {{"id", b}, {"ids", ojson::array({bos})}, {"tokens", ojson::array({b})}}}}}};
  } else {
    j["post_processor"] = nullptr;
  }
  j["model"] = bpe;

  ojson cfg;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  cfg["add_bos_token"] = add_bos;
  cfg["add_eos_token"] =
      f.find("tokenizer.ggml.add_eos_token") ? f.get_bool("tokenizer.ggml.add_eos_token") : false;
  cfg["bos_token"] = bos >= 0 ? ojson(v.tokens[size_t(bos)]) : ojson(nullptr);
  cfg["eos_token"] = eos >= 0 ? ojson(v.tokens[size_t(eos)]) : ojson(nullptr);
  if (unk >= 0) cfg["unk_token"] = v.tokens[size_t(unk)];
  if (pad >= 0) cfg["pad_token"] = v.tokens[size_t(pad)];
  cfg["clean_up_tokenization_spaces"] = false;
  if (f.find("tokenizer.chat_template"))
    cfg["chat_template"] = std::string(f.get_string("tokenizer.chat_template"));

  write_json_file(dir / "tokenizer.json", j);
  write_json_file(dir / "tokenizer_config.json", cfg);
  return fmt::format("{}, {} tokens", model, n);
}

}  // namespace qf
