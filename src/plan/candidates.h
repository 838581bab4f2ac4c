// Decision units of a mixed-precision plan (a fused group, or a single Linear), the formats each
// can take (plus "keep original"), the exact bytes each choice stores, and the per-module
// assignment the planner hands to the quantization pipeline.
#pragma once

#include "core/act_quant.h"
#include "core/dtype.h"
#include "formats/registry.h"
#include "model/architecture.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

// A weight format with its block (group) size, or "keep original" (format empty). As a planning
// candidate it may also be NVFP4 with Four Over Six block scales ("nvfp4:4o6": the same bytes,
// other scales); in an Assignment that is format nvfp4 with algo four_over_six
// (module_choice_of).
struct FormatChoice {
  std::optional<Format> format;  // nullopt: the weight stays in its own dtype
  int block = 0;                 // elements per scale; 0 = the format's default (int4: 128);
                                 // int4 kInt4ChannelGroup (-1): one scale per output channel
  bool four_over_six = false;    // nvfp4 only: block scales by Four Over Six

  static FormatChoice keep() { return {}; }
  static FormatChoice of(Format f, int block = 0) { return {f, block}; }
  static FormatChoice nvfp4_four_over_six() { return {Format::nvfp4, 0, true}; }
  bool is_keep() const { return !format.has_value(); }
  // The block actually used (the format default when block == 0); 0 for keep;
  // kInt4ChannelGroup for int4 per channel.
  int effective_block() const;
  // Whether this is int4 with one scale per output channel (block = each module's in_features).
  bool is_channel() const;
  // The block for a module with `in_features` inputs (per channel: in_features).
  int block_for(int64_t in_features) const;
  // "keep", "nvfp4", "mxfp4", "fp8", "int4" (int4 with a non-default group: "int4:64"; per
  // channel: "int4:channel"; NVFP4 with Four Over Six scales: "nvfp4:4o6").
  std::string name() const;
  friend bool operator==(const FormatChoice& a, const FormatChoice& b) {
    return a.format == b.format && a.effective_block() == b.effective_block() &&
           a.four_over_six == b.four_over_six;
  }
};

// Parses "keep", a registry format name ("nvfp4", case-insensitive), "int4:G", "int4:channel"
// or "nvfp4:4o6" (also "nvfp4:four_over_six"). nullopt if unknown or G is not a positive
// multiple of 2.
std::optional<FormatChoice> parse_format_choice(std::string_view text);
// The spellings parse_format_choice accepts, for messages and suggestions: the weight-only
// registry names, "int4:G" examples and "int4:channel" for free-block formats, "nvfp4:4o6",
// then "keep" when `with_keep`.
std::vector<std::string> format_choice_names(bool with_keep);

// Whether a Linear with `in_features` inputs can be stored in `choice` (keep: always; a block
// format: in_features is a multiple of its block).
bool choice_fits(const FormatChoice& choice, int64_t in_features);

// Exact stored bytes of one [out, in] Linear weight in `choice`, as the exporters write it
// (codes + block scales + tensor scales):
//   nvfp4: out*in/2 + out*in/16 + 4        mxfp4: out*in/2 + out*in/32
//   fp8 (per channel): out*in + 4*out       int4 group G: out*in/2 + 4*out*in/G
//   int4 per channel: out*in/2 + 4*out
//   keep: out*in*dtype_size(original)
// Throws qf::Error if the choice does not fit (see choice_fits).
uint64_t linear_stored_bytes(const FormatChoice& choice, int64_t out, int64_t in, DType original);

struct Candidate {
  FormatChoice choice;
  uint64_t bytes = 0;  // stored bytes of all the unit's Linears in this choice
};

// The smallest thing the planner decides: a fused group (q/k/v, gate/up), whose members must
// share a format, or one Linear.
struct DecisionUnit {
  std::string name;             // a single Linear's name, or e.g. "model.layers.3.self_attn.q_proj+k_proj+v_proj"
  int layer = 0;
  std::vector<size_t> linears;  // indices into Architecture::linears, in architecture order
  uint64_t numel = 0;           // weights of all members
  // The share of the unit's bytes one decoded token reads: 1, or for routed experts top_k /
  // num_experts (a token reads k of them; which ones is not known ahead).
  double read_fraction = 1.0;
  // The asked formats the unit can take, in the order asked, then keep (if allowed) last.
  // Never empty: a unit that can take nothing asked keeps its dtype. An asked int4:channel is
  // stored with its concrete block (the unit's in_features, e.g. "int4:172") and only added
  // when no other int4 choice fits the unit ("int4,int4:channel" = group 128 where it divides
  // in_features, one scale per channel elsewhere).
  std::vector<Candidate> candidates;

  // Index of `choice` in candidates, or -1.
  int find(const FormatChoice& choice) const;
};

struct CandidateOptions {
  std::vector<FormatChoice> formats;  // e.g. {nvfp4, fp8}; duplicates are dropped
  DType original_dtype = DType::BF16;  // dtype of the checkpoint's Linear weights
  bool allow_keep = true;              // add "keep original" to every unit's candidates
  // Modules that must stay unquantized (--exclude): their unit gets only "keep". A fused group
  // is excluded if any member is. Empty: none.
  std::function<bool(const LinearModule&)> excluded;
  // Exact stored bytes of one Linear in a (non-keep) choice as the chosen export writes it, all
  // its tensors included (exports differ: compressed-tensors INT4 adds weight_shape and stores
  // scales in the model dtype). Empty: linear_stored_bytes.
  std::function<uint64_t(const LinearModule&, const FormatChoice&)> stored_bytes;
  // Routed experts: true = one unit per MoE layer holding every routed expert's Linears (one
  // format for the layer's experts, what vLLM's fused-MoE layers and ModelOpt's
  // MIXED_PRECISION per-layer entries load); false = one unit per expert gate/up and down.
  bool experts_per_layer = true;
};

// Units in architecture order (layer by layer: q/k/v, o, gate/up, down).
std::vector<DecisionUnit> decision_units(const Architecture& arch, const CandidateOptions& options);

// ---- assignment: what the pipeline quantizes -------------------------------------------
struct ModuleChoice {
  FormatChoice format;                               // keep = leave unquantized
  std::string algo = "max";  // max | mse | awq | gptq | smoothquant | four_over_six
  nlohmann::ordered_json options = nlohmann::ordered_json::object();  // algorithm options, passed through
  // The module's input quantization: nvfp4 with format nvfp4 (W4A4), fp8 with format fp8 (FP8
  // W8A8, per-tensor weights); none: weight-only.
  ActQuant activations = ActQuant::none;
  friend bool operator==(const ModuleChoice& a, const ModuleChoice& b) {
    return a.format == b.format && a.algo == b.algo && a.options == b.options &&
           a.activations == b.activations;
  }
};

// The assignment entry for planning candidate `choice` run with `algo`: a Four Over Six
// candidate becomes format nvfp4 with algo four_over_six, anything else keeps `algo`.
ModuleChoice module_choice_of(const FormatChoice& choice, const std::string& algo = "max");
// The planning candidate a module choice stands for (nvfp4 + four_over_six: "nvfp4:4o6"), what
// the fake quantization of --auto's scoring takes.
FormatChoice candidate_of(const ModuleChoice& choice);

// Per Linear module name (LinearModule::name); a module not listed keeps its dtype.
struct Assignment {
  std::map<std::string, ModuleChoice> modules;

  // The choice for `name`, keep if absent.
  ModuleChoice at(const std::string& name) const;
};

// Every Linear of every unit set from choice[u] (an index into units[u].candidates), with `algo`.
Assignment assignment_from_choices(const Architecture& arch, const std::vector<DecisionUnit>& units,
                                   const std::vector<int>& choice, const std::string& algo = "max");

// Stored bytes of the assignment's Linears (modules absent from it counted as kept in
// `original`). Throws qf::Error if a module's format does not fit it.
uint64_t assignment_bytes(const Architecture& arch, const Assignment& assignment, DType original);

}  // namespace qf
