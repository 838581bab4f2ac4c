// Reading JSON from untrusted files with bounded nesting, and writing JSON (the way Hugging Face
// tools do: 4-space indentation) and text files safely.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace qf {

// Deeper than any real config, tokenizer, index or recipe (they nest a handful of levels); a
// file of 100 MB of '[' would otherwise take gigabytes to parse.
inline constexpr int kJsonMaxDepth = 64;

// Parses `text`. Throws qf::Error "<label>: invalid JSON: <reason>" (one line), or
// "<label>: JSON nests deeper than <max_depth> levels", before building anything that deep.
nlohmann::json parse_json_text(std::string_view text, const std::string& label,
                               int max_depth = kJsonMaxDepth);
nlohmann::ordered_json parse_ordered_json_text(std::string_view text, const std::string& label,
                                               int max_depth = kJsonMaxDepth);

// Writes text to path through a temporary name and a rename, so the path never holds a partial
// file. Throws qf::Error naming the file.
void write_text_file(const std::string& path, const std::string& text);

// Writes `json` with 4-space indentation (as Python's json.dump(indent=4)) to a temporary name
// and renames it over `path`. Throws qf::Error naming the file if writing fails.
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json);

}  // namespace qf
