#include "core/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace qf {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace qf
