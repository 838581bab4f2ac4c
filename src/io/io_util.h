// Helpers shared by the io/ sources (not a public interface): safe quoting of names taken from
// untrusted files, and checked size arithmetic.
#pragma once

#include "core/tensor.h"

#include <cstdint>
#include <exception>
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

}  // namespace qf
