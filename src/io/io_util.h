// Helpers shared by the io/ sources (not a public interface): safe quoting of names taken from
// untrusted files, checked size arithmetic, and the stdio steps of the streaming writers.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace qf {

// 'name' with control bytes escaped and long names cut, so an error message stays one line.
std::string quote_name(std::string_view s);
// `s` with control characters replaced by spaces.
std::string one_line(std::string_view s);
// The reason and position from a nlohmann::json exception, without its "[json.exception...] "
// prefix: "parse error at line 3, column 5: syntax error while parsing ...".
std::string json_error_reason(const std::exception& e);

// Byte size of a tensor, or nullopt if a dimension is negative or the count overflows int64.
std::optional<uint64_t> checked_nbytes(const Shape& shape, DType dtype);

// Writes all n bytes to f; throws "<path>: write failed: <reason>" (a short write that sets no
// errno is EIO).
void fwrite_all(std::FILE* f, const void* data, size_t n, const std::filesystem::path& path);
// Flushes, fsyncs (where the file can be synced: not pipes or character devices) and closes f,
// which is closed whatever happens; throws "<path>: write failed: <reason>".
void close_synced(std::FILE* f, const std::filesystem::path& path);

}  // namespace qf
