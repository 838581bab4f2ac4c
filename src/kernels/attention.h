// Causal attention of one query group over a KV cache whose entries are stored as F32, BF16,
// F16 or FP8: the key/value storage conversions and the SIMD score / softmax / weighted-sum
// loops (runtime dispatch). The engine runs one group per (token, KV head), so a key or value
// row is read once for all the query heads that share it (grouped-query attention).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace qf {

class ThreadPool;

// How a KV cache stores keys and values.
//  f32:  exact (4 bytes per value).
//  bf16, f16: rounded to nearest even (2 bytes); f16 is llama.cpp's default cache type.
//  fp8:  E4M3 codes of value / scale, saturating at +-448 (1 byte): the checkpoint's
//        k_scale / v_scale where it has them (ModelOpt, compressed-tensors), else 1 (vLLM's
//        default when none is given). Reads back as code * scale, which is exactly what
//        fake-quantizing with that scale gives.
enum class KvCacheType : uint8_t { f32, bf16, f16, fp8 };
std::string_view kv_cache_type_name(KvCacheType t);
std::optional<KvCacheType> parse_kv_cache_type(std::string_view name);
int kv_cache_type_bytes(KvCacheType t);

namespace kernels {

// Keys are stored transposed in tiles of kKeyTile positions, so scores are vectors over
// positions (no horizontal sums): channel c of position p lies at element
// (p / kKeyTile) * head_dim * kKeyTile + c * kKeyTile + p % kKeyTile of a KV head's keys.
// Values stay rows [position, v_head_dim] (the weighted sum is a vector over channels).
inline constexpr int64_t kKeyTile = 16;

// Writes x[0, n) to dst (n values of `type`): f32 copied, bf16/f16 rounded to nearest even,
// fp8 the saturating E4M3 code of x / scale (scale > 0; ignored by the other types).
void kv_store(KvCacheType type, const float* x, int64_t n, float scale, void* dst);
// Reads n values of `type` back as float32 (fp8: code * scale).
void kv_load(KvCacheType type, const void* src, int64_t n, float scale, float* y);

// One query group: `heads` query heads [heads, head_dim] at `q` attending to the keys and values
// of one KV head at positions [begin, end), writing [heads, v_head_dim] to `out`.
struct AttentionGroup {
  const float* q = nullptr;
  int64_t heads = 1, head_dim = 0, v_head_dim = 0;
  KvCacheType type = KvCacheType::f32;
  // The KV head's keys (tile 0) and the elements between consecutive tiles (at least
  // head_dim * kKeyTile); its value at position 0 and the elements between positions.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
  float k_scale = 1.f, v_scale = 1.f;  // fp8 only
  int64_t begin = 0, end = 0;          // end > begin
  float scale = 1.f;                   // multiplies q.k
  float softcap = 0.f;                 // > 0: scores become tanh(s / softcap) * softcap
  const float* sinks = nullptr;        // [heads] gpt-oss sink logits, or none
  // llama.cpp without flash attention: queries and probabilities rounded to F16 before their
  // products (ggml converts the second operand of an F16 matrix product to F16).
  bool f16_queries_and_probs = false;
  float* out = nullptr;
  // One part of a longer range split across tasks (flash-decoding): when set, `out` gets the
  // unnormalised sum_p exp(s_p - m) v_p, part_max[h] = m (the part's largest score) and
  // part_sum[h] = sum_p exp(s_p - m); sinks are left to combine_attention_parts. Not with
  // f16_queries_and_probs (its rounding needs the whole range's probabilities).
  float* part_max = nullptr;
  float* part_sum = nullptr;
};

// Scores s = scale * q.k (soft-capped), softmax over the positions (with the head's sink when
// given), out = sum_p softmax_p * v_p. Uses a per-thread scratch of about heads * (end - begin)
// floats.
void attend(const AttentionGroup& g);

// Merges `parts` partial results of attend (outs [parts, heads * v_head_dim], maxes and sums
// [parts, heads], in position order) into the normalised out [heads, v_head_dim], with the
// heads' sinks when given.
void combine_attention_parts(int64_t parts, int64_t heads, int64_t v_head_dim, const float* outs,
                             const float* maxes, const float* sums, const float* sinks,
                             float* out);

// Prefill attention on AMX-BF16 tiles (attention_prefill_bf16_amx.cpp), flash-attention style:
// the query tokens of one sequence (consecutive positions), every KV head, over a BF16 cache in
// the layout above. Each KV head's keys and values are laid out as tile operands once per call,
// then fixed blocks of query tokens per KV head run as pool tasks: a block's query heads are
// stacked token-major as the rows of the tiles' A operand (GQA: a key tile is multiplied once
// for all the heads that share it); per block of keys, the scores come from AMX products, the
// online softmax runs in float32 SIMD, and the probabilities, rounded to BF16, multiply the
// values on AMX again. Queries and probabilities are rounded to BF16 (the cache already is), so
// results differ from attend() by that rounding (relative ~2^-9 per product term); both sums
// stay in float32. A block's result depends on the block alone, so the outputs are the same bits
// at any thread count.
struct PrefillAttention {
  // Token t's query heads, [kv_heads * heads, head_dim] (KV head h's `heads` heads together),
  // at q + t * q_stride.
  const float* q = nullptr;
  int64_t q_stride = 0;
  // Query heads per KV head (GQA ratio).
  int64_t tokens = 0, kv_heads = 1, heads = 1, head_dim = 0, v_head_dim = 0;
  // Each KV head's BF16 keys and values (KvCache::keys / values), as in AttentionGroup
  // (k_stride >= head_dim * kKeyTile).
  std::span<const uint16_t* const> k, v;
  int64_t k_stride = 0, v_stride = 0;
  // Token t is at position `position` + t and sees the keys [begin, position + t + 1), begin = 0
  // or, with a sliding window, max(0, position + t + 1 - window). The cache holds them all.
  int64_t position = 0;
  int64_t window = 0;
  float scale = 1.f;             // multiplies q.k
  const float* sinks = nullptr;  // [kv_heads * heads] gpt-oss sink logits, or none
  // Token t's heads' outputs, [kv_heads * heads, v_head_dim], at out + t * out_stride.
  float* out = nullptr;
  int64_t out_stride = 0;
};

// Whether attend_prefill_amx runs here for these head sizes: the CPU has AMX-BF16 and the OS
// grants it (not with QFORGE_NO_AMX=1 nor QFORGE_NO_AMX_ATTENTION=1), and both sizes are whole
// 32-element tile chunks.
bool prefill_attention_amx_fits(int64_t head_dim, int64_t v_head_dim);
// Writes every token's outputs, on `pool` (null: the calling thread). Uses a grow-only buffer
// of the calling thread for the laid-out keys and values (kv_heads x about (2 x positions seen +
// 128) x head_dim x 2 bytes). Only where prefill_attention_amx_fits.
void attend_prefill_amx(const PrefillAttention& a, ThreadPool* pool);

}  // namespace kernels
}  // namespace qf
