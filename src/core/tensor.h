// A non-owning view of a tensor's bytes (usually inside a memory-mapped file).
#pragma once

#include "core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace qf {

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
std::string shape_str(const Shape& shape);  // "[4096, 14336]"

struct TensorView {
  DType dtype = DType::F32;
  Shape shape;
  const std::byte* data = nullptr;  // not owned; row-major, little-endian
  size_t nbytes = 0;

  int64_t numel() const { return shape_numel(shape); }
  // Rows and columns of a 2-D view; a 1-D tensor is one row.
  int64_t rows() const { return shape.size() >= 2 ? numel() / shape.back() : 1; }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

}  // namespace qf
