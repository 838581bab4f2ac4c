#include "engine/moe_topk_softmax.h"

#include "kernels/ops.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace qf {

void route_topk_softmax(const float* logits, int64_t num_experts, int64_t k, int* experts,
                        float* weights) {
  std::vector<int> order(static_cast<size_t>(num_experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int x, int y) {
    return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
  });
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = order[size_t(j)];
    weights[j] = logits[order[size_t(j)]];
  }
  softmax(weights, k);
}

}  // namespace qf
