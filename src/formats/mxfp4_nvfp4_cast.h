// MXFP4 -> NVFP4 without a round trip through float (gpt-oss's MXFP4 release quantized to
// NVFP4). A block of 32 MXFP4 values is two NVFP4 blocks of 16 holding the same E2M1 codes; its
// E8M0 scale 2^(e - 127) must become E4M3 block scale x tensor scale. With the tensor scale 2^k
// the block scale is the power of two 2^(e - 127 - k), which E4M3 holds exactly for exponents
// -9 (subnormal) to 8: a tensor (or a group sharing one tensor scale) whose block exponents span
// at most 18 binades is cast exactly. k puts the largest block at 2^8, so no block overflows;
// a block more than 17 binades below it is requantized from its MXFP4 values by the NVFP4 rule
// (formats/nvfp4.h) with that tensor scale, and counted.
#pragma once

#include "formats/quantized_tensor.h"

#include <cstdint>

namespace qf {

class ThreadPool;

// The largest E8M0 code among the blocks of `scales` [rows, cols/32] whose codes `packed`
// [rows, cols/2] are not all zero (a zero block is exact at any scale); -1 when every block is
// zero. Throws qf::Error for code 255 (NaN) in such a block.
int mxfp4_max_scale_code(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols);

// The NVFP4 tensor-scale exponent k for a group whose largest block code is `max_code` (as
// above; -1 gives 0).
int mxfp4_cast_exponent(int max_code);

struct Mxfp4CastStats {
  int64_t blocks = 0;   // MXFP4 blocks of 32
  int64_t inexact = 0;  // requantized blocks whose values changed
};

// The NVFP4 tensor (global scale 2^k) for MXFP4 codes and scales of a [rows, cols] weight
// (cols % 32 == 0). Exact blocks keep their codes; others are requantized (see above). Adds to
// `stats`. The bytes do not depend on the pool's thread count.
QuantizedTensor mxfp4_to_nvfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                               int64_t cols, int k, ThreadPool& pool, Mxfp4CastStats& stats);

}  // namespace qf
