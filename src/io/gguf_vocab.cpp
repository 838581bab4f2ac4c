// Tokenizer files -> GGUF tokenizer metadata (see the header for the mapping and its choices).
#include "io/gguf_vocab.h"

#include "core/error.h"
#include "io/io_util.h"
#include "io/json_file.h"
#include "io/tokenizer.h"

#include <sentencepiece_processor.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

namespace fs = std::filesystem;

namespace qf {

namespace {

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;  // empty for gpt2
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // gpt2 only
  int32_t unk = -1;
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("{}: cannot read", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_byte_piece(const std::string& s) {
  return s.size() == 6 && s.starts_with("<0x") && s.back() == '>' && std::isxdigit(uint8_t(s[3])) &&
         std::isxdigit(uint8_t(s[4]));
}

Vocab sentencepiece_vocab(const fs::path& file) {
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.Load(file.string());
  if (!status.ok()) fail("{}: not a sentencepiece model: {}", file.string(), one_line(status.ToString()));
  Vocab v;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    v.tokens.push_back(sp.IdToPiece(id));
    v.scores.push_back(sp.GetScore(id));
    v.types.push_back(sp.IsUnknown(id)   ? kGgufTokenUnknown
                      : sp.IsControl(id) ? kGgufTokenControl
                      : sp.IsUnused(id)  ? kGgufTokenUnused
                      : sp.IsByte(id)    ? kGgufTokenByte
                                         : kGgufTokenNormal);
  }
  v.unk = sp.unk_id();
  return v;
}

// tokenizer.json's merges: "a b" strings, or [a, b] pairs (tokenizers >= 0.20).
std::vector<std::string> merge_strings(const nlohmann::json& merges, const std::string& label) {
  std::vector<std::string> out;
  if (!merges.is_array()) fail("{}: model.merges is not a list", label);
  for (const auto& m : merges) {
    if (m.is_string()) out.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      out.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else fail("{}: model.merges holds an entry that is neither \"a b\" nor [a, b]", label);
  }
  return out;
}

// The pre-tokenizer regex of a byte-level tokenizer.json (a Split's pattern, or GPT-2's
// built-in one for a ByteLevel with use_regex), or "" when there is none.
std::string split_regex(const nlohmann::json& pre, bool* gpt2_builtin) {
  if (!pre.is_object()) return "";
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel" && pre.value("use_regex", true)) *gpt2_builtin = true;
  if (type == "Split" && pre.contains("pattern") && pre["pattern"].is_object()) {
    const auto& p = pre["pattern"];
    if (p.contains("Regex") && p["Regex"].is_string()) return p["Regex"].get<std::string>();
  }
  if (type == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
    for (const auto& sub : pre["pretokenizers"]) {
      std::string r = split_regex(sub, gpt2_builtin);
      if (!r.empty()) return r;
    }
  return "";
}

// The pre-tokenizer regexes llama.cpp has a name for (src/llama-vocab.cpp's LLAMA_VOCAB_PRE_TYPE
// cases), by their exact text.
std::string pre_name_of(const std::string& regex) {
  static const std::map<std::string, std::string> kKnown = {
      {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
       "llama-bpe"},
      {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
       "qwen2"},
  };
  const auto it = kKnown.find(regex);
  return it == kKnown.end() ? "" : it->second;
}

Vocab tokenizer_json_vocab(const fs::path& file, std::string* model, std::string* pre) {
  const std::string label = file.string();
  const nlohmann::json j = parse_json_text(read_text(file), label);
  if (!j.contains("model") || !j["model"].is_object()) fail("{}: no model object", label);
  const auto& mo = j["model"];
  const std::string type = mo.value("type", "");
  if (type != "BPE")
    fail("{}: model.type '{}': --export gguf writes BPE and sentencepiece tokenizers only", label,
         type);
  if (!mo.contains("vocab") || !mo["vocab"].is_object()) fail("{}: model.vocab is not an object", label);
  std::map<int64_t, std::string> by_id;
  for (const auto& [piece, id] : mo["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0)
      fail("{}: model.vocab: the id of {} is not a non-negative integer", label, quote_name(piece));
    by_id[id.get<int64_t>()] = piece;
  }
  std::map<int64_t, std::pair<std::string, bool>> added;  // id -> (content, special)
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) {
      if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        fail("{}: added_tokens holds an entry without an integer id and a string content", label);
      added[a["id"].get<int64_t>()] = {a["content"].get<std::string>(), a.value("special", false)};
    }
  int64_t n = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
  if (!added.empty()) n = std::max(n, added.rbegin()->first + 1);
  Vocab v;
  v.tokens.resize(size_t(n));
  v.types.assign(size_t(n), kGgufTokenNormal);
  std::vector<bool> seen(size_t(n), false);
  for (const auto& [id, piece] : by_id) v.tokens[size_t(id)] = piece, seen[size_t(id)] = true;
  for (const auto& [id, a] : added) {
    v.tokens[size_t(id)] = a.first;
    seen[size_t(id)] = true;
    v.types[size_t(id)] = a.second ? kGgufTokenControl : kGgufTokenUserDefined;
  }
  for (int64_t id = 0; id < n; ++id)
    if (!seen[size_t(id)]) fail("{}: token id {} is in neither model.vocab nor added_tokens", label, id);
  const std::vector<std::string> merges =
      merge_strings(mo.contains("merges") ? mo["merges"] : nlohmann::json::array(), label);
  const bool byte_fallback = mo.value("byte_fallback", false);
  bool gpt2_builtin = false;
  const std::string regex =
      split_regex(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json(), &gpt2_builtin);
  const std::string normalizer = j.contains("normalizer") ? j["normalizer"].dump() : "";
  const bool metaspace = normalizer.find("\xE2\x96\x81") != std::string::npos ||
                         (j.contains("pre_tokenizer") &&
                          j["pre_tokenizer"].dump().find("Metaspace") != std::string::npos);
  if (byte_fallback && metaspace) {
    // Llama-2 style: sentencepiece's BPE in tokenizer.json form.
    *model = "llama";
    *pre = "default";
    v.scores.assign(size_t(n), -1000.f);
    std::map<std::string, int64_t> id_of;
    for (int64_t id = 0; id < n; ++id) id_of.emplace(v.tokens[size_t(id)], id);
    for (size_t r = 0; r < merges.size(); ++r) {
      const size_t sp = merges[r].find(' ');
      if (sp == std::string::npos) fail("{}: merge {} has no space", label, quote_name(merges[r]));
      const auto it = id_of.find(merges[r].substr(0, sp) + merges[r].substr(sp + 1));
      if (it != id_of.end() && v.scores[size_t(it->second)] == -1000.f)
        v.scores[size_t(it->second)] = -float(r);
    }
    for (int64_t id = 0; id < n; ++id)
      if (v.types[size_t(id)] == kGgufTokenNormal && is_byte_piece(v.tokens[size_t(id)]))
        v.types[size_t(id)] = kGgufTokenByte;
    if (mo.contains("unk_token") && mo["unk_token"].is_string()) {
      const auto it = id_of.find(mo["unk_token"].get<std::string>());
      if (it != id_of.end()) v.unk = int32_t(it->second), v.types[size_t(it->second)] = kGgufTokenUnknown;
    }
    return v;
  }
  if (!byte_fallback && (gpt2_builtin || !regex.empty())) {
    *model = "gpt2";
    if (!regex.empty()) {
      *pre = pre_name_of(regex);
      if (pre->empty())
        fail("{}: pre_tokenizer regex {} has no llama.cpp pre-tokenizer name (llama.cpp would "
             "split text with its \"default\" regex instead)",
             label, quote_name(regex));
    } else {
      *pre = "gpt-2";
    }
    v.merges = merges;
    return v;
  }
  fail("{}: a BPE tokenizer that is neither Llama-2 style (byte_fallback with a metaspace "
       "normalizer) nor byte-level; llama.cpp has no vocabulary type for it",
       label);
}

std::optional<std::string> config_string(const nlohmann::json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

GgufVocabInfo add_gguf_vocab(const fs::path& dir, const Tokenizer& tok, int64_t n_vocab,
                             GgufMetadata& m) {
  GgufVocabInfo info;
  Vocab v;
  if (fs::is_regular_file(dir / "tokenizer.model")) {
    info.source = (dir / "tokenizer.model").string();
    v = sentencepiece_vocab(dir / "tokenizer.model");
    info.model = "llama";
    info.pre = "default";
  } else if (fs::is_regular_file(dir / "tokenizer.json")) {
    info.source = (dir / "tokenizer.json").string();
    v = tokenizer_json_vocab(dir / "tokenizer.json", &info.model, &info.pre);
  } else {
    fail("{}: no tokenizer.model or tokenizer.json: --export gguf embeds the tokenizer",
         dir.string());
  }
  if (int64_t(v.tokens.size()) > n_vocab)
    fail("{}: {} tokens, but the embedding has {} rows", info.source, v.tokens.size(), n_vocab);
  // llama.cpp sizes its vocabulary by the token list and the embedding by the same number.
  for (int64_t id = int64_t(v.tokens.size()); id < n_vocab; ++id) {
    v.tokens.push_back(fmt::format("[PAD{}]", id));
    v.types.push_back(kGgufTokenUnused);
    if (!v.scores.empty()) v.scores.push_back(-1000.f);
    ++info.padded;
  }
  info.tokens = int64_t(v.tokens.size());

  nlohmann::json cfg;
  if (fs::is_regular_file(dir / "tokenizer_config.json"))
    cfg = parse_json_text(read_text(dir / "tokenizer_config.json"),
                          (dir / "tokenizer_config.json").string());
  m.set_string("tokenizer.ggml.model", info.model);
  m.set_string("tokenizer.ggml.pre", info.pre);
  m.set_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) m.set_f32_array("tokenizer.ggml.scores", v.scores);
  m.set_i32_array("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) m.set_string_array("tokenizer.ggml.merges", v.merges);
  if (tok.bos_id() >= 0) m.set_u32("tokenizer.ggml.bos_token_id", uint32_t(tok.bos_id()));
  if (tok.eos_id() >= 0) m.set_u32("tokenizer.ggml.eos_token_id", uint32_t(tok.eos_id()));
  if (v.unk >= 0) m.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
  if (const auto pad = config_string(cfg, "pad_token"))
    if (const int32_t id = tok.token_id(*pad); id >= 0)
      m.set_u32("tokenizer.ggml.padding_token_id", uint32_t(id));
  m.set_bool("tokenizer.ggml.add_bos_token", tok.add_bos_by_default());
  if (cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
    m.set_bool("tokenizer.ggml.add_eos_token", cfg["add_eos_token"].get<bool>());
  if (cfg.is_object() && cfg.contains("chat_template")) {
    const auto& t = cfg["chat_template"];
    if (t.is_string()) {
      m.set_string("tokenizer.chat_template", t.get<std::string>());
    } else if (t.is_array()) {  // named templates: llama.cpp reads "default" under the plain key
      for (const auto& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          m.set_string("tokenizer.chat_template", e["template"].get<std::string>());
    }
  } else if (fs::is_regular_file(dir / "chat_template.jinja")) {
    m.set_string("tokenizer.chat_template", read_text(dir / "chat_template.jinja"));
  }
  return info;
}

}  // namespace qf
