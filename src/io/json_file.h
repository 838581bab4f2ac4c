// Reading JSON from untrusted files with bounded nesting, and writing JSON (the way Hugging Face
// tools do: 4-space indentation) and text files safely.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace qf {

// Deeper than any real config, tokenizer, index or recipe (they nest a handful of levels); a
// file of 100 MB of '[' would otherwise take gigabytes to parse.
inline constexpr int kJsonMaxDepth = 64;

// Python's json module writes float infinities and NaN as the bare words Infinity, -Infinity
// and NaN (Hugging Face configs do: Nemotron-H's time_step_limit is [0.0, Infinity]), which
// strict JSON lacks. The readers below accept them and hold each as this string followed by
// the word ("<prefix>Infinity"), so a value read is told apart from a string; `json_number`
// turns one into a double and write_json_file writes it back as the bare word.
inline constexpr std::string_view kPythonFloatPrefix = "\x01python-float:";

// The number a JSON value holds, the Python words included, and transformers 5's
// {"__float__": "Infinity"} (nullopt: not a number).
std::optional<double> json_number(const nlohmann::json& v);
std::optional<double> json_number(const nlohmann::ordered_json& v);

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
