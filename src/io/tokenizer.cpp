// Tokenizer::load: finds a model directory's tokenizer files and applies BOS/EOS from its
// configs.
#include "io/tokenizer.h"

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/gguf_file.h"
#include "io/io_util.h"
#include "io/tokenizer_internal.h"

#include <optional>

namespace qf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A config file's JSON object, or null when the file does not exist.
json read_optional_config(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return json();
  json j = read_json_file(path);
  if (!j.is_object()) fail("{}: not a JSON object", path.string());
  return j;
}

// tokenizer_config.json's bos_token / eos_token: absent (nullopt), null (an empty optional),
// a string, or {"content": string}.
std::optional<std::optional<std::string>> token_setting(const json& config, const char* key,
                                                        const fs::path& file) {
  if (!config.is_object()) return std::nullopt;
  const auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  fail("{}: \"{}\" is neither a string, an object with \"content\", nor null", file.string(), key);
}

// config.json / generation_config.json's bos_token_id / eos_token_id (the first of a list).
std::optional<int64_t> id_setting(const json& config, const char* key, const fs::path& file) {
  if (!config.is_object()) return std::nullopt;
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  const json* v = &*it;
  if (v->is_array()) {
    if (v->empty()) return std::nullopt;
    v = &(*v)[0];
  }
  if (!v->is_number_integer())
    fail("{}: \"{}\" is not an integer or a list of integers", file.string(), key);
  return v->get<int64_t>();
}

// The id of one special token: tokenizer_config.json decides when it names the token (or
// null); else the first of config.json / generation_config.json that holds an id in range;
// else the tokenizer file's own.
int32_t resolve_special(const tok::TokenizerBase& t, int32_t fallback, const char* token_key,
                        const char* id_key, const fs::path& dir, const json& tokenizer_config,
                        const json& config, const json& generation_config) {
  if (const auto s = token_setting(tokenizer_config, token_key, dir / "tokenizer_config.json")) {
    if (!s->has_value()) return -1;
    if (const int32_t id = t.token_id(**s); id >= 0) return id;
  }
  for (const auto& [cfg, name] : {std::pair{&config, "config.json"},
                                  std::pair{&generation_config, "generation_config.json"}})
    if (const auto id = id_setting(*cfg, id_key, dir / name); id && *id >= 0 && *id < t.vocab_size())
      return static_cast<int32_t>(*id);
  return fallback;
}

// tokenizer_config.json's added_tokens_decoder: {"id": {"content": ...}, ...}.
std::vector<tok::AddedToken> config_added_tokens(const json& tokenizer_config, const fs::path& file) {
  std::vector<tok::AddedToken> out;
  if (!tokenizer_config.is_object()) return out;
  const auto it = tokenizer_config.find("added_tokens_decoder");
  if (it == tokenizer_config.end() || it->is_null()) return out;
  if (!it->is_object()) fail("{}: added_tokens_decoder is not an object", file.string());
  for (const auto& [key, value] : it->items()) {
    char* end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > tok::kMaxTokenId)
      fail("{}: added_tokens_decoder key {} is not a token id (0 to {})", file.string(),
           quote_name(key), tok::kMaxTokenId);
    out.push_back(tok::parse_added_token(value, static_cast<int32_t>(id), file.string()));
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const fs::path& dir, const json* parsed_config) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("{}: not found", dir.string());
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory", dir.string());
  const fs::path tc_file = dir / "tokenizer_config.json";
  const json tokenizer_config = read_optional_config(tc_file);
  const json config = parsed_config ? *parsed_config : read_optional_config(dir / "config.json");
  const json generation_config = read_optional_config(dir / "generation_config.json");

  std::unique_ptr<tok::TokenizerBase> t;
  const bool has_vocab = fs::exists(dir / "vocab.json", ec);
  const bool has_merges = fs::exists(dir / "merges.txt", ec);
  if (fs::exists(dir / "tokenizer.json", ec)) {
    t = tok::load_hf_json(dir / "tokenizer.json");
  } else if (fs::exists(dir / "tokenizer.model", ec)) {
    t = tok::load_sentencepiece(dir / "tokenizer.model");
  } else if (has_vocab && has_merges) {
    t = tok::load_vocab_merges(dir / "vocab.json", dir / "merges.txt",
                               config_added_tokens(tokenizer_config, tc_file));
  } else if (has_vocab || has_merges) {
    fail("{}: {} without {}", dir.string(), has_vocab ? "vocab.json" : "merges.txt",
         has_vocab ? "merges.txt" : "vocab.json");
  } else {
    fail("{}: no tokenizer (tokenizer.json, tokenizer.model, or vocab.json + merges.txt)",
         dir.string());
  }

  const int32_t bos = resolve_special(*t, t->bos_id(), "bos_token", "bos_token_id", dir,
                                      tokenizer_config, config, generation_config);
  const int32_t eos = resolve_special(*t, t->eos_id(), "eos_token", "eos_token_id", dir,
                                      tokenizer_config, config, generation_config);
  bool add_bos = t->add_bos_setting();
  if (tokenizer_config.is_object()) {
    if (const auto it = tokenizer_config.find("add_bos_token"); it != tokenizer_config.end()) {
      if (!it->is_boolean()) fail("{}: add_bos_token is not a boolean", tc_file.string());
      add_bos = it->get<bool>();
    }
  }
  t->set_specials(bos, eos, add_bos);
  return t;
}

}  // namespace qf

namespace qf {

std::unique_ptr<Tokenizer> Tokenizer::load_for_model(const fs::path& model_dir,
                                                     const fs::path& tokenizer_dir,
                                                     const json* model_config) {
  if (tokenizer_dir.empty() && is_gguf_file(model_dir)) return load_gguf(model_dir);
  if (is_gguf_file(tokenizer_dir)) return load_gguf(tokenizer_dir);
  if (tokenizer_dir.empty()) return load(model_dir, model_config);
  std::error_code ec;
  if (fs::exists(tokenizer_dir / "config.json", ec)) return load(tokenizer_dir);
  // A bare tokenizer folder: the model's own config supplies bos_token_id / eos_token_id.
  const json config = model_config ? *model_config : read_optional_config(model_dir / "config.json");
  return load(tokenizer_dir, &config);
}

std::unique_ptr<Tokenizer> Tokenizer::load_gguf(const fs::path& file) {
  const GgufFile f = GgufFile::open(file);
  return tok::load_gguf_tokenizer(f);
}

bool Tokenizer::present(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "tokenizer.json", ec) || fs::exists(dir / "tokenizer.model", ec) ||
         (fs::exists(dir / "vocab.json", ec) && fs::exists(dir / "merges.txt", ec));
}

std::vector<std::string> Tokenizer::files_in(const fs::path& dir) {
  static constexpr const char* kFiles[] = {
      "tokenizer.json",          "tokenizer.model",  "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json", "vocab.json",
      "merges.txt",              "chat_template.jinja"};
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* f : kFiles)
    if (fs::is_regular_file(dir / f, ec)) out.emplace_back(f);
  return out;
}

}  // namespace qf
