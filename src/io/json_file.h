// Writing JSON files the way Hugging Face tools do (4-space indentation), safely; and the
// nesting limit of JSON read from untrusted files.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace qf {

// Writes `json` with 4-space indentation (as Python's json.dump(indent=4)) to a temporary name
// and renames it over `path`. Throws qf::Error naming the file if writing fails.
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json);

// Deepest nesting of arrays and objects accepted in JSON read from files. The parser does not
// recurse, but copying, comparing and dumping a document do: a file of a million '[' (found by
// quant_config_fuzz through config.json) overflowed the stack. Real configs and tokenizers nest
// fewer than ten levels.
inline constexpr size_t kMaxJsonDepth = 256;

// Throws qf::Error "LABEL: JSON nested deeper than 256 levels" when `text` nests arrays and
// objects deeper than kMaxJsonDepth (brackets inside strings do not count). Call before parsing.
void require_json_depth(std::string_view text, const std::string& label);

}  // namespace qf
