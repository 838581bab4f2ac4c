#include "model/expert_tensors.h"

#include "core/error.h"

#include <fmt/format.h>

namespace qf {
namespace {

// gpt-oss (hub BF16 layout, GptOssExperts): `<block>experts.gate_up_proj` [E, H, 2I] and
// `down_proj` [E, I, H] are used as x @ W[e], so expert e's Linear weights [2I, H] / [H, I]
// are the transposes of its contiguous slices: they become transposed parts (read_tensor
// copies one expert at a time). The output rows of gate_up_proj stay interleaved (gate, up,
// ...) as on disk, and the biases [E, 2I] / [E, H] split into per-expert `.bias` views.
void split_gpt_oss_experts(Checkpoint& ck, const Architecture& a, const LayerSpec& layer,
                           const std::string& block) {
  const MoeSpec& moe = layer.moe;
  const std::string base = block + "experts.";
  const std::string names[4] = {base + "gate_up_proj", base + "gate_up_proj_bias",
                                base + "down_proj", base + "down_proj_bias"};
  const CheckpointTensor* found[4];
  int present = 0;
  for (int i = 0; i < 4; ++i) present += (found[i] = ck.find(names[i])) != nullptr;
  if (present == 0) {
    if (const CheckpointTensor* mx = ck.find(base + "gate_up_proj_blocks"))
      fail("{}: '{}' holds MXFP4 experts (the original gpt-oss release); qforge reads the BF16 "
           "layout ('{}') only", mx->file->path().string(), mx->name, names[0]);
    return;
  }
  for (int i = 0; i < 4; ++i)
    if (!found[i]) {
      const CheckpointTensor* any = found[0] ? found[0] : found[1] ? found[1] : found[2] ? found[2] : found[3];
      fail("{}: '{}' is stored without '{}'", any->file->path().string(), any->name, names[i]);
    }
  const std::string file = found[0]->file->path().string();
  const LinearModule& first = a.linears[layer.linears[size_t(moe.experts[0][1])]];
  if (ck.find(first.weight_name()))
    fail("{}: layer {} stores its experts both fused ('{}') and one by one ('{}')", file,
         first.layer, names[0], first.weight_name());
  const int64_t e = moe.num_experts, inter = moe.expert_intermediate, h = a.hidden_size;
  const Shape want[4] = {{e, h, 2 * inter}, {e, 2 * inter}, {e, inter, h}, {e, h}};
  const char* what[4] = {"num_experts, hidden, 2 x intermediate; used as x @ W",
                         "num_experts, 2 x intermediate", "num_experts, intermediate, hidden; used as x @ W",
                         "num_experts, hidden"};
  for (int i = 0; i < 4; ++i)
    if (found[i]->entry->shape != want[i])
      fail("{}: tensor '{}' is {}, expected {} ({})", found[i]->file->path().string(), names[i],
           shape_str(found[i]->entry->shape), shape_str(want[i]), what[i]);
  std::vector<Checkpoint::Part> parts[4];
  for (int64_t x = 0; x < e; ++x) {
    const auto& slots = moe.experts[size_t(x)];
    const std::string gu = a.linears[layer.linears[size_t(slots[1])]].name;
    const std::string dn = a.linears[layer.linears[size_t(slots[2])]].name;
    parts[0].push_back({gu + ".weight", {2 * inter, h}, true});
    parts[1].push_back({gu + ".bias", {2 * inter}});
    parts[2].push_back({dn + ".weight", {h, inter}, true});
    parts[3].push_back({dn + ".bias", {h}});
  }
  for (int i = 0; i < 4; ++i) ck.split_tensor(names[i], parts[i]);
}

}  // namespace

void split_fused_experts(Checkpoint& ck, const Architecture& a) {
  for (const LayerSpec& layer : a.layers) {
    if (!layer.is_moe) continue;
    const MoeSpec& moe = layer.moe;
    // The block prefix: the router is "<block>gate" (gpt-oss: "<block>router").
    const std::string block = moe.router.substr(0, moe.router.rfind('.') + 1);
    if (moe.gate_up_interleaved) {
      split_gpt_oss_experts(ck, a, layer, block);
      continue;
    }
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
