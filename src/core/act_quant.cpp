#include "core/act_quant.h"

namespace qf {

std::string_view act_quant_name(ActQuant a) {
  switch (a) {
    case ActQuant::none: return "none";
    case ActQuant::nvfp4: return "nvfp4";
    case ActQuant::fp8: return "fp8";
    case ActQuant::int8: return "int8";
  }
  return "none";
}

}  // namespace qf
