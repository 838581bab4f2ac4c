#include "model/expert_tensors.h"

#include "core/error.h"

#include <fmt/format.h>

namespace qf {

void split_fused_experts(Checkpoint& ck, const Architecture& a) {
  for (const LayerSpec& layer : a.layers) {
    if (!layer.is_moe) continue;
    const MoeSpec& moe = layer.moe;
    // The block prefix: the router is "<block>gate".
    const std::string block = moe.router.substr(0, moe.router.size() - 4);
    std::vector<std::string> blocks = {block};
    if (const size_t at = block.find("block_sparse_moe."); at != std::string::npos)
      blocks.push_back(block.substr(0, at) + "mlp.");
    for (const std::string& b : blocks) {
      const std::string gate_up = b + "experts.gate_up_proj", down = b + "experts.down_proj";
      const CheckpointTensor* gu = ck.find(gate_up);
      const CheckpointTensor* dn = ck.find(down);
      if (!gu && !dn) continue;
      const std::string file = (gu ? gu : dn)->file->path().string();
      if (!gu || !dn)
        fail("{}: '{}' is stored without '{}'", file, gu ? gate_up : down, gu ? down : gate_up);
      const LinearModule& first = a.linears[layer.linears[size_t(moe.experts[0][0])]];
      if (ck.find(first.weight_name()))
        fail("{}: layer {} stores its experts both fused ('{}') and one by one ('{}')", file,
             first.layer, gate_up, first.weight_name());
      const int64_t e = moe.num_experts, inter = moe.expert_intermediate, h = a.hidden_size;
      const Shape want_gu{e, 2 * inter, h}, want_dn{e, h, inter};
      if (gu->entry->shape != want_gu)
        fail("{}: tensor '{}' is {}, expected {} (num_experts, 2 x moe intermediate, hidden)",
             file, gate_up, shape_str(gu->entry->shape), shape_str(want_gu));
      if (dn->entry->shape != want_dn)
        fail("{}: tensor '{}' is {}, expected {} (num_experts, hidden, moe intermediate)",
             dn->file->path().string(), down, shape_str(dn->entry->shape), shape_str(want_dn));
      std::vector<Checkpoint::Part> gu_parts, dn_parts;
      for (int64_t x = 0; x < e; ++x) {
        const auto& slots = moe.experts[size_t(x)];
        auto name = [&](int r) { return a.linears[layer.linears[size_t(slots[size_t(r)])]].weight_name(); };
        gu_parts.push_back({name(0), {inter, h}});
        gu_parts.push_back({name(1), {inter, h}});
        dn_parts.push_back({name(2), {h, inter}});
      }
      ck.split_tensor(gate_up, gu_parts);
      ck.split_tensor(down, dn_parts);
    }
  }
}

std::shared_ptr<const Checkpoint> open_model_checkpoint(const std::filesystem::path& dir) {
  auto ck = std::make_shared<Checkpoint>(Checkpoint::open(dir));
  Architecture a;
  try {
    a = Architecture::from_config(ck->config(), dir.string() + "/config.json");
  } catch (const Error&) {
    return ck;
  }
  if (a.has_moe()) split_fused_experts(*ck, a);
  return ck;
}

}  // namespace qf
