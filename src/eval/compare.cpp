#include "eval/compare.h"

#include "core/html.h"
#include "core/progress.h"
#include "io/gguf_file.h"
#include "targets/checkpoint_inspector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

namespace fs = std::filesystem;

namespace qf {
namespace {

CompareRow describe(const fs::path& dir, const Model& m) {
  CompareRow row;
  row.dir = dir;
  row.quantization = m.weights().quantization;
  if (is_gguf_file(dir)) {
    // A GGUF file: its size, and the decoder Linears' stored bits as the engine holds them.
    row.bytes = fs::file_size(dir);
    int64_t weights = 0;
    uint64_t bytes = 0;
    for (const LayerWeights& l : m.weights().layers)
      for (const EngineLinear& e : l.linears) {
        weights += e.w.rows * e.w.cols;
        bytes += e.w.stored_bytes();
      }
    row.bits_per_weight = weights ? double(bytes) * 8.0 / double(weights) : 0.0;
    return row;
  }
  const InspectReport i = inspect_checkpoint(dir);
  row.bytes = i.total_bytes;
  row.bits_per_weight = i.bits_per_linear_weight();
  return row;
}

std::string name_of(const CompareRow& r) {
  const fs::path p = r.dir.filename().empty() ? r.dir.parent_path() : r.dir;
  return p.filename().string();
}

nlohmann::ordered_json row_json(const CompareRow& r, bool base) {
  nlohmann::ordered_json j;
  j["model"] = r.dir.string();
  j["quantization"] = r.quantization;
  j["bytes"] = r.bytes;
  j["bits_per_weight"] = r.bits_per_weight;
  j["ppl"] = r.ppl;
  if (!base) {
    j["kl_mean"] = r.kl.kl_mean;
    j["kl_p99"] = r.kl.kl_p99;
    j["top1"] = r.kl.top1;
  }
  return j;
}

}  // namespace

CompareResult compare_models(const fs::path& base, const std::vector<fs::path>& variants,
                             std::span<const int32_t> ids, int64_t ctx, const ModelOptions& options,
                             const EvalProgress& progress) {
  auto b = Model::load(base, options);
  std::vector<std::unique_ptr<Model>> owned;
  std::vector<Model*> qs;
  for (const fs::path& v : variants) {
    owned.push_back(Model::load(v, options));
    qs.push_back(owned.back().get());
  }
  const std::vector<KlResult> kls = kl_divergence(*b, qs, ids, ctx, progress);
  CompareResult r;
  r.base = describe(base, *b);
  r.ctx = ctx;
  for (size_t k = 0; k < variants.size(); ++k) {
    CompareRow row = describe(variants[k], *qs[k]);
    row.kl = kls[k];
    row.ppl = kls[k].ppl_quant;
    r.base.ppl = kls[k].ppl_base;
    r.tokens = kls[k].tokens;
    r.variants.push_back(std::move(row));
  }
  return r;
}

std::string compare_table(const CompareResult& r) {
  size_t w = std::max<size_t>(5, name_of(r.base).size());
  for (const auto& row : r.variants) w = std::max(w, name_of(row).size());
  std::string out = fmt::format("{:<{}}  {:>10}  {:>6}  {:>9}  {:>9}  {:>9}  {:>6}  {}\n", "model",
                                w, "size", "bits", "PPL", "KL mean", "KL p99", "top-1",
                                "quantization");
  out += fmt::format("{:<{}}  {:>10}  {:>6.2f}  {:>9.4f}  {:>9}  {:>9}  {:>6}  {}\n",
                     name_of(r.base), w, human_bytes(double(r.base.bytes)),
                     r.base.bits_per_weight, r.base.ppl, "-", "-", "-", r.base.quantization);
  for (const auto& v : r.variants)
    out += fmt::format("{:<{}}  {:>10}  {:>6.2f}  {:>9.4f}  {:>9.5f}  {:>9.5f}  {:>5.1f}%  {}\n",
                       name_of(v), w, human_bytes(double(v.bytes)), v.bits_per_weight, v.ppl,
                       v.kl.kl_mean, v.kl.kl_p99, 100 * v.kl.top1, v.quantization);
  out += fmt::format("{} tokens, windows of {}; KL(base || variant) in nats; bits = stored bits "
                     "per decoder Linear weight, scales included\n",
                     r.tokens, r.ctx);
  return out;
}

nlohmann::ordered_json compare_json(const CompareResult& r) {
  nlohmann::ordered_json j;
  j["tokens"] = r.tokens;
  j["ctx"] = r.ctx;
  j["base"] = row_json(r.base, true);
  auto& vs = j["variants"] = nlohmann::ordered_json::array();
  for (const auto& v : r.variants) vs.push_back(row_json(v, false));
  return j;
}

std::string compare_html(const CompareResult& r) {
  // KL mean against size: one point per variant, the base's size as a dashed line. Axes start
  // at zero so that distances read as ratios.
  const int W = 640, H = 360, left = 70, right = 20, top = 20, bottom = 50;
  double max_bytes = double(r.base.bytes), max_kl = 0;
  for (const auto& v : r.variants) {
    max_bytes = std::max(max_bytes, double(v.bytes));
    max_kl = std::max(max_kl, v.kl.kl_mean);
  }
  if (!(max_kl > 0)) max_kl = 1;
  max_kl *= 1.15;
  max_bytes *= 1.05;
  auto x = [&](double bytes) { return left + (W - left - right) * bytes / max_bytes; };
  auto y = [&](double kl) { return H - bottom - (H - top - bottom) * kl / max_kl; };
  std::string svg = fmt::format(
      "<svg width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"KL divergence against size\">\n",
      W, H);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333\"/>\n", left,
                     H - bottom, W - right);
  svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#333\"/>\n", left,
                     top, H - bottom);
  for (int k = 0; k <= 4; ++k) {
    const double kl = max_kl * k / 4, bytes = max_bytes * k / 4;
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"ax\" text-anchor=\"end\">{:.3g}</text>\n",
                       left - 6, y(kl) + 4, kl);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">{}</text>\n",
                       x(bytes), H - bottom + 16, escape_html(human_bytes(bytes)));
  }
  svg += fmt::format(
      "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#888\" "
      "stroke-dasharray=\"4 3\"/><text x=\"{0:.1f}\" y=\"{3}\" class=\"ax\" "
      "text-anchor=\"end\">base {4}</text>\n",
      x(double(r.base.bytes)), top, H - bottom, top + 10, escape_html(name_of(r.base)));
  for (const auto& v : r.variants)
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"#1f77b4\"/><text x=\"{:.1f}\" "
        "y=\"{:.1f}\" class=\"lb\">{}</text>\n",
        x(double(v.bytes)), y(v.kl.kl_mean), x(double(v.bytes)) + 8, y(v.kl.kl_mean) - 6,
        escape_html(name_of(v)));
  svg += fmt::format("<text x=\"{}\" y=\"{}\" class=\"ax\" text-anchor=\"middle\">size on disk"
                     "</text>\n<text x=\"14\" y=\"{}\" class=\"ax\" transform=\"rotate(-90 14 {})\" "
                     "text-anchor=\"middle\">mean KL (nats)</text>\n</svg>\n",
                     (left + W - right) / 2, H - 12, (top + H - bottom) / 2, (top + H - bottom) / 2);

  std::string rows = fmt::format(
      "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2f}</td>"
      "<td class=\"n\">{:.4f}</td><td class=\"n\">-</td><td class=\"n\">-</td><td "
      "class=\"n\">-</td></tr>\n",
      escape_html(name_of(r.base)), escape_html(r.base.quantization),
      escape_html(human_bytes(double(r.base.bytes))), r.base.bits_per_weight, r.base.ppl);
  for (const auto& v : r.variants)
    rows += fmt::format(
        "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2f}</td>"
        "<td class=\"n\">{:.4f}</td><td class=\"n\">{:.5f}</td><td class=\"n\">{:.5f}</td>"
        "<td class=\"n\">{:.1f}%</td></tr>\n",
        escape_html(name_of(v)), escape_html(v.quantization), escape_html(human_bytes(double(v.bytes))),
        v.bits_per_weight, v.ppl, v.kl.kl_mean, v.kl.kl_p99, 100 * v.kl.top1);

  std::string body = fmt::format(
      "<h1>Variants of {}</h1>\n<p>{} tokens of {}, windows of {}. KL(base &#8741; "
      "variant) of the next-token distributions, in nats (0 = identical); top-1: "
      "how often both pick the same next token; bits: stored bits per decoder "
      "Linear weight, scales included.</p>\n",
      escape_html(r.base.dir.string()), r.tokens, escape_html(r.text), r.ctx);
  body += svg;
  body += "<table>\n<thead><tr><th>model</th><th>quantization</th><th>size</th><th>bits</th>"
          "<th>PPL</th><th>KL mean</th><th>KL p99</th><th>top-1</th></tr></thead>\n<tbody>\n" +
          rows + "</tbody>\n</table>\n";
  return html_page("qforge compare: " + name_of(r.base), body);
}

}  // namespace qf
