// Byte helpers shared by the ggml block codecs (not a public interface): blocks are packed
// little-endian structs, read and written byte by byte so no alignment is assumed.
#pragma once

#include "core/numeric.h"

#include <cstdint>

namespace qf {

inline uint16_t ggml_load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline void ggml_store_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
// ggml stores block scales as IEEE fp16, rounded to nearest even (GGML_FP32_TO_FP16).
inline void ggml_store_f16(uint8_t* p, float v) { ggml_store_u16(p, f32_to_f16(v)); }
inline float ggml_load_f16(const uint8_t* p) { return f16_to_f32(ggml_load_u16(p)); }

}  // namespace qf
