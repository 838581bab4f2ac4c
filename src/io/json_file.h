// Writing JSON files the way Hugging Face tools do (4-space indentation), safely.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>

namespace qf {

// Writes `json` with 4-space indentation (as Python's json.dump(indent=4)) to a temporary name
// and renames it over `path`. Throws qf::Error naming the file if writing fails.
void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json);

}  // namespace qf
