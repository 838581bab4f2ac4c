#include "model/expert_tensors.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace qf {
namespace {

// gpt-oss keeps its experts fused, in one of two layouts (GptOssExperts; integrations/mxfp4.py):
//  - BF16 (hub conversions, transformers' save_pretrained): `<block>experts.gate_up_proj`
//    [E, H, 2I] and `down_proj` [E, I, H], used as x @ W[e], so expert e's Linear weights
//    [2I, H] / [H, I] are the transposes of its contiguous slices: they become transposed parts
//    (read_tensor copies one expert at a time);
//  - MXFP4 (the original release): `gate_up_proj_blocks` [E, 2I, H/32, 16] + `_scales`
//    [E, 2I, H/32], `down_proj_blocks` [E, H, I/32, 16] + `_scales` [E, H, I/32], already
//    [out, in] per expert: views `experts.N.<proj>.weight` [out, in/2] and `.weight_scale`
//    [out, in/32] of qforge's MXFP4 layout (targets/gpt_oss_mxfp4.cpp reads them).
// Both: the output rows of gate_up_proj stay interleaved (gate, up, ...) as on disk, and the
// biases [E, 2I] / [E, H] split into per-expert `.bias` views.
void split_gpt_oss_experts(Checkpoint& ck, const Architecture& a, const LayerSpec& layer,
                           const std::string& block) {
  const MoeSpec& moe = layer.moe;
  const std::string base = block + "experts.";
  const int64_t e = moe.num_experts, inter = moe.expert_intermediate, h = a.hidden_size;
  // One stored tensor: its name, the shape it must have (and what that means), the per-expert
  // part it becomes (leaf after the module name, 0: gate_up, 1: down) and that part's shape.
  struct Fused {
    std::string name;
    Shape want;
    const char* meaning;
    int proj;
    const char* leaf;
    Shape part;
    bool transposed;
    DType dtype = DType::F32;  // required dtype; F32 here: any (float, checked by the readers)
  };
  const bool mxfp4 = ck.find(base + "gate_up_proj_blocks") || ck.find(base + "down_proj_blocks");
  const bool modelopt =
      ck.find(base + "gate_up_proj_weight_scale") || ck.find(base + "down_proj_weight_scale");
  if (const CheckpointTensor* f = ck.find(base + "gate_up_proj"); mxfp4 && f)
    fail("{}: '{}' stores the experts in float and '{}' in MXFP4; keep one layout",
         f->file->path().string(), f->name, base + "gate_up_proj_blocks");
  // ModelOpt's FP8 per-tensor export: the [E, in, out] weight in E4M3 with one F32 scale [].
  const CheckpointTensor* scale = ck.find(base + "gate_up_proj_weight_scale");
  if (!scale) scale = ck.find(base + "down_proj_weight_scale");
  const bool modelopt_fp8 = modelopt && scale->entry->shape.size() <= 1;
  std::vector<Fused> fused;
  if (modelopt_fp8) {
    fused = {{base + "gate_up_proj", {e, h, 2 * inter},
              "num_experts, hidden, 2 x intermediate: FP8 codes", 0, "weight", {2 * inter, h}, true,
              DType::F8_E4M3},
             {base + "gate_up_proj_bias", {e, 2 * inter}, "num_experts, 2 x intermediate", 0, "bias",
              {2 * inter}, false},
             {base + "down_proj", {e, inter, h}, "num_experts, intermediate, hidden: FP8 codes", 1,
              "weight", {h, inter}, true, DType::F8_E4M3},
             {base + "down_proj_bias", {e, h}, "num_experts, hidden", 1, "bias", {h}, false}};
  } else if (modelopt) {
    // ModelOpt's NVFP4 export of GptOssExperts (_QuantGptOssExperts: the [E, in, out] weight
    // transposed, quantized, transposed back; modelopt-nvfp4.md §3.2): codes [E, in/2, out] and
    // E4M3 block scales [E, in/16, out], i.e. each expert's [out, in/2] / [out, in/16] stored
    // transposed; one weight_scale_2 (and input_scale) for all experts, shared below.
    for (const auto& [what, dim] : {std::pair{"hidden", h}, std::pair{"intermediate", inter}})
      if (dim % 16 != 0)
        fail("{}: tensor '{}' holds NVFP4 experts, which need the {} size ({}) to be a multiple "
             "of 16", ck.dir().string(), base + "gate_up_proj_weight_scale", what, dim);
    fused = {{base + "gate_up_proj", {e, h / 2, 2 * inter},
              "num_experts, hidden / 2, 2 x intermediate: NVFP4 codes", 0, "weight",
              {2 * inter, h / 2}, true, DType::U8},
             {base + "gate_up_proj_weight_scale", {e, h / 16, 2 * inter},
              "num_experts, hidden / 16, 2 x intermediate", 0, "weight_scale", {2 * inter, h / 16},
              true, DType::F8_E4M3},
             {base + "gate_up_proj_bias", {e, 2 * inter}, "num_experts, 2 x intermediate", 0, "bias",
              {2 * inter}, false},
             {base + "down_proj", {e, inter / 2, h},
              "num_experts, intermediate / 2, hidden: NVFP4 codes", 1, "weight", {h, inter / 2},
              true, DType::U8},
             {base + "down_proj_weight_scale", {e, inter / 16, h},
              "num_experts, intermediate / 16, hidden", 1, "weight_scale", {h, inter / 16}, true,
              DType::F8_E4M3},
             {base + "down_proj_bias", {e, h}, "num_experts, hidden", 1, "bias", {h}, false}};
  } else if (!mxfp4) {
    fused = {{base + "gate_up_proj", {e, h, 2 * inter},
              "num_experts, hidden, 2 x intermediate; used as x @ W", 0, "weight", {2 * inter, h}, true},
             {base + "gate_up_proj_bias", {e, 2 * inter}, "num_experts, 2 x intermediate", 0, "bias",
              {2 * inter}, false},
             {base + "down_proj", {e, inter, h}, "num_experts, intermediate, hidden; used as x @ W",
              1, "weight", {h, inter}, true},
             {base + "down_proj_bias", {e, h}, "num_experts, hidden", 1, "bias", {h}, false}};
  } else {
    for (const auto& [what, dim] : {std::pair{"hidden", h}, std::pair{"intermediate", inter}})
      if (dim % 32 != 0) {
        const CheckpointTensor* t = ck.find(base + "gate_up_proj_blocks");
        if (!t) t = ck.find(base + "down_proj_blocks");
        fail("{}: tensor '{}' holds MXFP4 experts, which need the {} size ({}) to be a multiple "
             "of 32", t->file->path().string(), t->name, what, dim);
      }
    fused = {{base + "gate_up_proj_blocks", {e, 2 * inter, h / 32, 16},
              "num_experts, 2 x intermediate, hidden / 32, 16 bytes", 0, "weight", {2 * inter, h / 2}, false},
             {base + "gate_up_proj_scales", {e, 2 * inter, h / 32},
              "num_experts, 2 x intermediate, hidden / 32", 0, "weight_scale", {2 * inter, h / 32}, false},
             {base + "gate_up_proj_bias", {e, 2 * inter}, "num_experts, 2 x intermediate", 0, "bias",
              {2 * inter}, false},
             {base + "down_proj_blocks", {e, h, inter / 32, 16},
              "num_experts, hidden, intermediate / 32, 16 bytes", 1, "weight", {h, inter / 2}, false},
             {base + "down_proj_scales", {e, h, inter / 32}, "num_experts, hidden, intermediate / 32",
              1, "weight_scale", {h, inter / 32}, false},
             {base + "down_proj_bias", {e, h}, "num_experts, hidden", 1, "bias", {h}, false}};
  }
  std::vector<const CheckpointTensor*> found;
  for (const Fused& f : fused) found.push_back(ck.find(f.name));
  const auto any = std::find_if(found.begin(), found.end(), [](auto* t) { return t != nullptr; });
  if (any == found.end()) return;  // stored one by one (an export), or missing: the loaders say
  for (size_t i = 0; i < fused.size(); ++i)
    if (!found[i])
      fail("{}: '{}' is stored without '{}'", (*any)->file->path().string(), (*any)->name,
           fused[i].name);
  const std::string file = found[0]->file->path().string();
  const LinearModule& first = a.linears[layer.linears[size_t(moe.experts[0][1])]];
  if (ck.find(first.weight_name()))
    fail("{}: layer {} stores its experts both fused ('{}') and one by one ('{}')", file,
         first.layer, fused[0].name, first.weight_name());
  for (size_t i = 0; i < fused.size(); ++i) {
    const Fused& f = fused[i];
    const SafetensorsEntry& stored = *found[i]->entry;
    if (stored.shape != f.want)
      fail("{}: tensor '{}' is {}, expected {} ({})", found[i]->file->path().string(), f.name,
           shape_str(stored.shape), shape_str(f.want), f.meaning);
    if (f.dtype != DType::F32 && stored.dtype != f.dtype)
      fail("{}: tensor '{}' is {}, expected {}", found[i]->file->path().string(), f.name,
           dtype_name(stored.dtype), dtype_name(f.dtype));
    const bool codes = f.leaf != std::string_view("bias") && mxfp4;
    if (codes && stored.dtype != DType::U8)
      fail("{}: tensor '{}' is {}, expected U8 (MXFP4 {})", found[i]->file->path().string(),
           f.name, dtype_name(stored.dtype), f.leaf == std::string_view("weight") ? "codes" : "E8M0 scales");
  }
  // Every tensor checked before any is split (a split moves the others: `found` goes stale).
  for (const Fused& f : fused) {
    std::vector<Checkpoint::Part> parts;
    for (int64_t x = 0; x < e; ++x) {
      const auto& slots = moe.experts[size_t(x)];
      const std::string& module = a.linears[layer.linears[size_t(slots[size_t(1 + f.proj)])]].name;
      parts.push_back({module + "." + f.leaf, f.part, f.transposed});
    }
    ck.split_tensor(f.name, parts);
  }
  if (!modelopt) return;
  for (int proj = 0; proj < 2; ++proj) {
    const std::string attr = base + (proj == 0 ? "gate_up_proj" : "down_proj");
    for (const char* leaf : {modelopt_fp8 ? "weight_scale" : "weight_scale_2", "input_scale"}) {
      const std::string name = attr + "_" + leaf;
      if (!ck.find(name)) {
        if (leaf == std::string_view("input_scale")) continue;  // weight-only
        fail("{}: '{}' is stored without '{}'", file, attr, name);
      }
      std::vector<std::string> names;
      for (int64_t x = 0; x < e; ++x)
        names.push_back(
            a.linears[layer.linears[size_t(moe.experts[size_t(x)][size_t(1 + proj)])]].name + "." +
            leaf);
      ck.share_tensor(name, names);
    }
  }
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

Architecture checkpoint_architecture(const Checkpoint& ck, const std::string& label) {
  Architecture a = Architecture::from_config(ck.config(), label);
  for (const LayerSpec& layer : a.layers) {
    if (!layer.is_moe || !layer.moe.gate_up_interleaved) continue;
    const std::string block = layer.moe.router.substr(0, layer.moe.router.rfind('.') + 1);
    const std::string linearised = block + "experts.0.gate_proj.";
    for (const CheckpointTensor& t : ck.tensors())
      if (t.name.compare(0, linearised.size(), linearised) == 0) {
        ArchitectureOptions o;
        o.gpt_oss_split_gate_up = true;
        return Architecture::from_config(ck.config(), label, o);
      }
    break;  // every gpt-oss layer is stored alike
  }
  return a;
}

std::shared_ptr<const Checkpoint> open_model_checkpoint(const std::filesystem::path& dir) {
  auto ck = std::make_shared<Checkpoint>(Checkpoint::open(dir));
  Architecture a;
  try {
    a = checkpoint_architecture(*ck, dir.string() + "/config.json");
  } catch (const Error&) {
    return ck;
  }
  if (a.has_moe()) split_fused_experts(*ck, a);
  return ck;
}

}  // namespace qf
