// Decision units, candidate formats and their stored sizes.
#include "plan/candidates.h"

#include "core/error.h"
#include "formats/int4.h"

#include <algorithm>
#include <charconv>

namespace qf {

int FormatChoice::effective_block() const {
  if (!format) return 0;
  if (is_channel()) return kInt4ChannelGroup;
  return block > 0 ? block : format_info(*format).block;
}

bool FormatChoice::is_channel() const {
  return format && format_info(*format).block_rule == BlockRule::free && block == kInt4ChannelGroup;
}

int FormatChoice::block_for(int64_t in_features) const {
  return is_channel() ? int(in_features) : effective_block();
}

std::string FormatChoice::name() const {
  if (!format) return "keep";
  const FormatInfo& info = format_info(*format);
  if (is_channel()) return std::string(info.name) + ":channel";
  if (four_over_six) return std::string(info.name) + ":4o6";
  if (info.block_rule == BlockRule::free && effective_block() != info.block)
    return std::string(info.name) + ":" + std::to_string(effective_block());
  return std::string(info.name);
}

std::optional<FormatChoice> parse_format_choice(std::string_view text) {
  if (text == "keep") return FormatChoice::keep();
  const size_t colon = text.find(':');
  const std::optional<Format> f = parse_format(text.substr(0, colon));
  // INT8 is W8A8 (SmoothQuant, activation scales from calibration); plans are weight-only.
  if (!f || !format_info(*f).weight_only) return std::nullopt;
  if (colon == std::string_view::npos) return FormatChoice::of(*f);
  const std::string_view option = text.substr(colon + 1);
  if (*f == Format::nvfp4 && (option == "4o6" || option == "four_over_six"))
    return FormatChoice::nvfp4_four_over_six();
  // Only a format with a free block (INT4's group size) takes ":G".
  if (format_info(*f).block_rule != BlockRule::free) return std::nullopt;
  const std::string_view digits = text.substr(colon + 1);
  if (digits == "channel") return FormatChoice::of(*f, kInt4ChannelGroup);
  int g = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), g);
  if (ec != std::errc() || end != digits.data() + digits.size() || g <= 0 || g % 2 != 0)
    return std::nullopt;
  return FormatChoice::of(*f, g);
}

std::vector<std::string> format_choice_names(bool with_keep) {
  std::vector<std::string> out;
  for (const FormatInfo& f : all_formats())
    if (f.weight_only) out.emplace_back(f.name);
  for (const FormatInfo& f : all_formats())
    if (f.weight_only && f.block_rule == BlockRule::free)
      for (const char* g : {":32", ":64", ":128", ":channel"}) out.push_back(std::string(f.name) + g);
  out.push_back(FormatChoice::nvfp4_four_over_six().name());
  if (with_keep) out.emplace_back("keep");
  return out;
}

bool choice_fits(const FormatChoice& choice, int64_t in_features) {
  if (choice.is_keep()) return true;
  const int b = choice.block_for(in_features);
  return in_features > 0 && (b <= 1 || in_features % b == 0);
}

uint64_t linear_stored_bytes(const FormatChoice& choice, int64_t out, int64_t in, DType original) {
  if (out <= 0 || in <= 0) fail("stored bytes of an empty [{}, {}] Linear", out, in);
  if (!choice_fits(choice, in))
    fail("{} cannot store a Linear with {} inputs (not a multiple of its block of {})",
         choice.name(), in, choice.effective_block());
  const uint64_t n = uint64_t(out) * uint64_t(in);
  if (choice.is_keep()) return n * dtype_size(original);
  return format_stored_bytes(*choice.format, n,
                             uint64_t(scale_span(*choice.format, choice.block_for(in), in)));
}

int DecisionUnit::find(const FormatChoice& choice) const {
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].choice == choice) return int(i);
  return -1;
}

namespace {

// "model.layers.3.self_attn.q_proj+k_proj+v_proj": the members' common prefix (up to a dot)
// followed by their last components.
std::string unit_name(const Architecture& arch, const std::vector<size_t>& members) {
  const std::string& first = arch.linears[members.front()].name;
  if (members.size() == 1) return first;
  const size_t dot = first.rfind('.');
  std::string name = first.substr(0, dot + 1);
  for (size_t i = 0; i < members.size(); ++i) {
    const std::string& m = arch.linears[members[i]].name;
    if (i) name += '+';
    name += m.substr(m.rfind('.') + 1);
  }
  return name;
}

}  // namespace

std::vector<DecisionUnit> decision_units(const Architecture& arch, const CandidateOptions& options) {
  std::vector<FormatChoice> formats;
  for (const FormatChoice& f : options.formats) {
    if (f.is_keep()) continue;  // keep is governed by allow_keep
    if (std::find(formats.begin(), formats.end(), f) == formats.end()) formats.push_back(f);
  }
  std::vector<DecisionUnit> units;
  std::vector<bool> done(arch.linears.size(), false);
  for (size_t i = 0; i < arch.linears.size(); ++i) {
    if (done[i]) continue;
    const LinearModule& lm = arch.linears[i];
    std::vector<size_t> members = lm.group >= 0 ? arch.fused_groups.at(size_t(lm.group))
                                                : std::vector<size_t>{i};
    const bool layer_experts = lm.expert >= 0 && options.experts_per_layer;
    if (layer_experts) {
      members.clear();
      for (size_t k : arch.layers[size_t(lm.layer)].linears)
        if (arch.linears[k].expert >= 0) members.push_back(k);
    }
    std::sort(members.begin(), members.end());
    DecisionUnit u;
    // The layer's experts under the router's block ("model.layers.3.mlp.", Nemotron-H's
    // "backbone.layers.3.mixer.").
    const MoeSpec& layer_moe = arch.layers[size_t(lm.layer)].moe;
    u.name = layer_experts
                 ? fmt::format("{}experts (all {} routed)",
                               layer_moe.router.substr(0, layer_moe.router.rfind('.') + 1),
                               layer_moe.num_experts)
                 : unit_name(arch, members);
    if (lm.expert >= 0) {
      const MoeSpec& moe = arch.layers[size_t(lm.layer)].moe;
      u.read_fraction = double(moe.top_k) / double(moe.num_experts);
    }
    u.layer = lm.layer;
    u.linears = members;
    bool excluded = false;
    for (size_t m : members) {
      done[m] = true;
      const LinearModule& x = arch.linears[m];
      u.numel += uint64_t(x.out_features) * uint64_t(x.in_features);
      if (options.excluded && options.excluded(x)) excluded = true;
    }
    auto add = [&](FormatChoice f) {
      if (f.is_channel()) {
        // Per channel only where no other int4 choice fits; stored with its concrete block.
        for (const Candidate& c : u.candidates)
          if (c.choice.format == f.format) return;
        f.block = int(arch.linears[members.front()].in_features);
        for (size_t m : members)
          if (arch.linears[m].in_features != f.block) return;
        if (u.find(f) >= 0) return;
      }
      Candidate c{f, 0};
      for (size_t m : members) {
        const LinearModule& x = arch.linears[m];
        if (!choice_fits(f, x.in_features)) return;
        c.bytes += options.stored_bytes && !f.is_keep()
                       ? options.stored_bytes(x, f)
                       : linear_stored_bytes(f, x.out_features, x.in_features, options.original_dtype);
      }
      u.candidates.push_back(c);
    };
    if (!excluded)
      for (const FormatChoice& f : formats) add(f);
    if (options.allow_keep || u.candidates.empty()) add(FormatChoice::keep());
    units.push_back(std::move(u));
  }
  return units;
}

ModuleChoice module_choice_of(const FormatChoice& choice, const std::string& algo) {
  ModuleChoice mc;
  mc.format = choice;
  mc.algo = algo;
  if (choice.four_over_six) {
    mc.format.four_over_six = false;
    mc.algo = "four_over_six";
  }
  return mc;
}

FormatChoice candidate_of(const ModuleChoice& choice) {
  FormatChoice f = choice.format;
  if (choice.algo == "four_over_six" && f.format == Format::nvfp4) f.four_over_six = true;
  return f;
}

ModuleChoice Assignment::at(const std::string& name) const {
  const auto it = modules.find(name);
  return it == modules.end() ? ModuleChoice{} : it->second;
}

Assignment assignment_from_choices(const Architecture& arch, const std::vector<DecisionUnit>& units,
                                   const std::vector<int>& choice, const std::string& algo) {
  if (choice.size() != units.size())
    fail("assignment: {} choices for {} decision units", choice.size(), units.size());
  Assignment a;
  for (size_t u = 0; u < units.size(); ++u) {
    const int c = choice[u];
    if (c < 0 || size_t(c) >= units[u].candidates.size())
      fail("assignment: choice {} out of range for unit {}", c, units[u].name);
    for (size_t m : units[u].linears)
      a.modules[arch.linears[m].name] = module_choice_of(units[u].candidates[size_t(c)].choice, algo);
  }
  return a;
}

uint64_t assignment_bytes(const Architecture& arch, const Assignment& assignment, DType original) {
  uint64_t total = 0;
  for (const LinearModule& lm : arch.linears)
    total += linear_stored_bytes(assignment.at(lm.name).format, lm.out_features, lm.in_features,
                                 original);
  return total;
}

}  // namespace qf
