// gpt-oss routing (GptOssTopKRouter, Routing::topk_softmax): the top k of a token's router
// logits (router bias included), weighted by a softmax over those k logits only. Kept apart
// from the softmax-first routers in model.cpp so that each family's routing reads alone.
#pragma once

#include <cstdint>

namespace qf {

// experts[0, k) = the indices of the k largest logits[0, num_experts), largest first, ties to
// the lower index (torch.topk on CPU); weights[0, k) = softmax of those k logits.
void route_topk_softmax(const float* logits, int64_t num_experts, int64_t k, int* experts,
                        float* weights);

}  // namespace qf
