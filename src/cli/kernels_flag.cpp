// --kernels: the one flag that selects exact or fast Linear products in every command that runs
// the model (evaluation and calibration default to exact, bench and generate to fast).
#include "cli/commands.h"

namespace qf::cli {

void add_kernels_option(CLI::App* cmd, KernelMode& mode) {
  auto* opt = cmd->add_option_function<std::string>(
      "--kernels",
      [&mode](const std::string& v) { mode = *parse_kernel_mode(v); },
      "Linear products: exact (float32 activations and accumulation: the checkpoint's own math) "
      "or fast (int8 activations in 4-bit decode products on CPUs with AVX2 or AVX-512 VNNI, and "
      "in 4-bit prefill on CPUs with AVX2 but no AVX-512 VNNI or BF16; BF16 activations in "
      "prefill on CPUs with AVX-512 BF16; see README \"Exact and fast kernels\")");
  opt->check(name_choice("kernels", {"exact", "fast"}));
  opt->default_str(std::string(kernel_mode_name(mode)));
}

}  // namespace qf::cli
