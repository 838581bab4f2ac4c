// --kv-cache: how the commands that run the model store keys and values (kernels/attention.h).
#include "cli/commands.h"

#include <fmt/format.h>

namespace qf::cli {

void add_kv_cache_option(CLI::App* cmd, std::optional<KvCacheType>& type,
                         KvCacheType unscaled_default) {
  auto* opt = cmd->add_option_function<std::string>(
      "--kv-cache",
      [&type](const std::string& v) {
        type = v == "auto" ? std::nullopt : parse_kv_cache_type(v);
      },
      fmt::format("KV cache storage: f32, bf16, f16, fp8 (E4M3 codes of value / the checkpoint's "
                  "k_scale or v_scale, 1 where it has none) or auto: fp8 when the checkpoint "
                  "carries KV scales, else {}",
                  kv_cache_type_name(unscaled_default)));
  opt->check(name_choice("kv-cache", {"auto", "f32", "bf16", "f16", "fp8"}));
  opt->default_str("auto");
}

}  // namespace qf::cli
