// How a Linear's input is quantized before the product: the mode a checkpoint declares, which
// the targets write and read and the engine simulates (engine/activation_quant.h). Kept here,
// below every folder that names it, so that targets/ need not include engine/.
#pragma once

#include <cstdint>
#include <string_view>

namespace qf {

enum class ActQuant : uint8_t {
  none,
  nvfp4,  // dynamic E4M3 scale per 16 elements under the static global 1/input_scale (§6.1)
  fp8,    // static per-tensor E4M3: e4m3(x / input_scale) * input_scale
  int8,   // static per-tensor INT8: clamp(rne(x / input_scale), -128, 127) * input_scale
};

// "none", "nvfp4", "fp8", "int8" (the spelling of --activations).
std::string_view act_quant_name(ActQuant a);

}  // namespace qf
