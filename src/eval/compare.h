// `qforge compare`: several quantized variants of one model measured against it on the same
// text in one run (the base model's logits computed once per window), as a table, JSON and a
// self-contained HTML page.
#pragma once

#include "eval/perplexity.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qf {

struct CompareRow {
  std::filesystem::path dir;
  std::string quantization;    // "none", or the reader's name and scheme
  uint64_t bytes = 0;          // sizes of the safetensors files
  double bits_per_weight = 0;  // stored bits per decoder Linear weight, scales included
  double ppl = 0;
  KlResult kl;                 // against the base; zero for the base row
};

struct CompareResult {
  CompareRow base;
  std::vector<CompareRow> variants;  // in the order given
  int64_t tokens = 0, ctx = 0;
  std::string text;                  // the evaluation text's path, for the report
};

// Loads the base and every variant (all mapped at once: only small vectors are copied), runs the
// windows of `ids` through them (eval/perplexity.h protocol) and fills the rows. Throws
// qf::Error as kl_divergence() and for a checkpoint that cannot be read.
CompareResult compare_models(const std::filesystem::path& base,
                             const std::vector<std::filesystem::path>& variants,
                             std::span<const int32_t> ids, int64_t ctx, const ModelOptions& options,
                             const EvalProgress& progress = {});

// The result as an aligned text table, as JSON ({"base": {...}, "variants": [...]}), and as an
// HTML document with the table and a plot of KL against size.
std::string compare_table(const CompareResult& r);
nlohmann::ordered_json compare_json(const CompareResult& r);
std::string compare_html(const CompareResult& r);

}  // namespace qf
