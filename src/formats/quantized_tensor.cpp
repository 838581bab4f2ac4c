#include "formats/quantized_tensor.h"

#include "core/error.h"

#include <algorithm>

namespace qf {

QuantizedTensor every_other_row(const QuantizedTensor& q, int64_t first) {
  if (q.rows <= 0 || first < 0 || first > 1)
    fail("every_other_row: {} rows, first row {}", q.rows, first);
  QuantizedTensor out = q;
  out.rows = (q.rows - first + 1) / 2;
  auto pick = [&](const auto& from, auto& to) {
    if (from.empty()) return;
    const size_t per_row = from.size() / size_t(q.rows);
    if (per_row * size_t(q.rows) != from.size() || per_row == 0) return;  // one per tensor
    to.assign(size_t(out.rows) * per_row, {});
    for (int64_t r = 0; r < out.rows; ++r)
      std::copy_n(from.begin() + int64_t(size_t(first + 2 * r) * per_row), per_row,
                  to.begin() + int64_t(size_t(r) * per_row));
  };
  pick(q.codes, out.codes);
  pick(q.block_scales, out.block_scales);
  pick(q.scales, out.scales);
  return out;
}

}  // namespace qf
