// Importance-weighted and calibrated GGUF weight matrices (see the header).
#include "pipeline/gguf_calibrated.h"

#include "algo/ggml_gptq.h"
#include "calib/layer_calibration.h"
#include "core/convert.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/model.h"
#include "formats/ggml_fp4_repack.h"
#include "formats/ggml_weighted.h"
#include "formats/nvfp4.h"
#include "model/gguf_llama_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace qf {

namespace {

std::vector<float> read_floats(const CheckpointTensor& t) {
  const TensorData d = read_tensor(t);
  std::vector<float> x(size_t(d.view.numel()));
  convert_to_f32(d.view.dtype, d.view.data, x.data(), x.size());
  return x;
}

}  // namespace

float gguf_nvfp4_tensor_scale(const float* x, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return nvfp4_global_scale(amax);
}

std::string quantize_gguf_matrix(const GgufMatrixJob& job, uint8_t* out, ThreadPool& pool) {
  const int64_t rows = job.rows, cols = job.cols;
  const std::optional<uint64_t> rb = ggml_row_bytes(job.type, cols);
  if (!rb || rows <= 0)
    fail("gguf: [{}, {}] does not fit {}", rows, cols, ggml_type_info(job.type).name);
  const uint64_t row_bytes = *rb;
  const bool weighted = job.importance || job.block_hessian;
  if (job.type == GgmlType::NVFP4 && !weighted) {
    // qforge's two-level NVFP4 (ModelOpt's scales), repacked into ggml's blocks.
    std::vector<uint8_t> packed(size_t(rows * cols / 2)), scales(size_t(rows * cols / 16));
    nvfp4_quantize_reference({job.x, DType::F32, rows, cols, {}}, job.g, packed.data(),
                             scales.data());
    nvfp4_to_ggml(packed.data(), scales.data(), rows, cols, out);
  } else {
    // Rows are quantized independently: split by rows over the pool (same bytes for any count).
    const int64_t per_task = std::max<int64_t>(1, (int64_t(1) << 16) / cols);
    pool.parallel_for((rows + per_task - 1) / per_task, [&](int64_t t) {
      const int64_t r0 = t * per_task, r1 = std::min(rows, r0 + per_task);
      for (int64_t r = r0; r < r1; ++r) {
        const float* x = job.x + r * cols;
        uint8_t* o = out + uint64_t(r) * row_bytes;
        if (job.type == GgmlType::NVFP4)
          qforge_quantize_nvfp4_weighted(x, o, cols, job.g, job.importance, job.block_hessian);
        else if (job.type == GgmlType::MXFP4 && job.importance)
          qforge_quantize_mxfp4_weighted(x, o, cols, job.importance);
        else
          ggml_quantize_row_weighted(job.type, x, o, cols, job.importance);
      }
    });
  }
  std::string note;
  if (job.block_hessian)
    note = "block-Hessian scale search";
  else if (job.importance && job.type != GgmlType::Q8_0)  // Q8_0 ignores it, as ggml does
    note = "importance-weighted scales";
  if (job.gptq) {
    if (!job.xtx) fail("gguf: gptq without X^T X");
    std::vector<float> w(job.x, job.x + rows * cols);
    const GgmlGptqReport r =
        ggml_gptq(job.type, std::move(w), rows, cols, out, job.g, *job.xtx, job.tokens, {}, pool);
    const std::string g = r.fell_back ? "GPTQ fell back (H not positive definite)" : "GPTQ";
    note = note.empty() ? g : note + " + " + g;
  }
  return note;
}

void GgufPrecomputed::put(const std::string& name, std::span<const uint8_t> bytes, float g,
                          std::string note) {
  entries_[name] = {spill_.put(bytes), g, std::move(note)};
}

const GgufPrecomputed::Entry* GgufPrecomputed::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::unique_ptr<GgufPrecomputed> calibrate_gguf(const SourceModel& model,
                                                const std::vector<GgufLinearTarget>& targets,
                                                const GgufCalibrationOptions& options,
                                                const std::filesystem::path& spill_dir) {
  const auto start = std::chrono::steady_clock::now();
  auto result = std::make_unique<GgufPrecomputed>(spill_dir);
  std::map<std::string, const GgufLinearTarget*> by_name;
  for (const GgufLinearTarget& t : targets) by_name[t.name] = &t;

  const CalibrationData data = load_calibration_data(options.calib, model.tokenizer());
  for (const auto& w : data.warnings) result->warnings.push_back(w);
  ModelOptions mo;
  mo.threads = options.threads;
  mo.max_seq = options.calib.seq_len;
  auto engine = Model::load(model.checkpoint, mo);
  LayerCalibrationOptions co;
  co.capture.seed = options.calib.seed;
  co.capture.xtx = true;  // importance = its diagonal; GPTQ and NVFP4's block search: all of it
  co.capture.sample_rows = 0;
  co.progress = options.progress;
  ThreadPool pool(options.threads > 0 ? options.threads : ThreadPool::hardware_threads());
  const Architecture& arch = model.arch;
  const bool gptq = options.algo == GgufAlgo::gptq;

  auto on_layer = [&](int64_t layer, LayerCapture& capture) -> const LayerWeights* {
    for (size_t li : arch.layers[size_t(layer)].linears) {
      const LinearModule& m = arch.linears[li];
      const std::string name = gguf_llama_linear_name(m);
      auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      const GgufLinearTarget& t = *it->second;
      const LinearStats& stats = capture.of(m);
      std::vector<float> x = read_floats(*t.source);
      const int64_t cols = t.source->entry->shape.back(), rows = int64_t(x.size()) / cols;
      if (stats.tokens <= 0 || int64_t(stats.xtx.size()) != cols * cols)
        fail("{}: no calibration statistics for {}", model.dir.string(), t.source->name);
      // Importance per input column: q/k rows are reordered for GGUF, columns are not, so the
      // statistics apply unchanged.
      std::vector<float> importance(static_cast<size_t>(cols));
      const std::vector<float>* from_file = options.imatrix ? options.imatrix->find(name) : nullptr;
      if (from_file) {
        if (int64_t(from_file->size()) != cols)
          fail("--imatrix: {} has {} values, {} has rows of {}", name, from_file->size(),
               t.source->name, cols);
        importance = *from_file;
      } else {
        for (int64_t c = 0; c < cols; ++c)
          importance[size_t(c)] = float(stats.xtx[size_t(c * cols + c)] / double(stats.tokens));
      }
      std::vector<float> block_h;
      if (gptq && t.type == GgmlType::NVFP4 && !from_file) {
        block_h.resize(size_t(cols * 16));
        for (int64_t b = 0; b < cols / 16; ++b)
          for (int i = 0; i < 16; ++i)
            for (int k = 0; k < 16; ++k)
              block_h[size_t(b * 256 + i * 16 + k)] = float(
                  stats.xtx[size_t((16 * b + i) * cols + 16 * b + k)] / double(stats.tokens));
      }
      if (t.permute_heads > 0)
        gguf_permute_qk_rows(x.data(), t.permute_heads, rows / t.permute_heads, cols);
      GgufMatrixJob job;
      job.type = t.type;
      job.x = x.data();
      job.rows = rows;
      job.cols = cols;
      job.importance = importance.data();
      job.block_hessian = block_h.empty() ? nullptr : block_h.data();
      job.gptq = gptq;
      job.xtx = &stats.xtx;
      job.tokens = stats.tokens;
      if (t.type == GgmlType::NVFP4) job.g = gguf_nvfp4_tensor_scale(x.data(), int64_t(x.size()));
      std::vector<uint8_t> bytes(size_t(*ggml_row_bytes(t.type, cols) * uint64_t(rows)));
      std::string note = quantize_gguf_matrix(job, bytes.data(), pool);
      if (from_file) note += " (importance from --imatrix)";
      result->put(name, bytes, job.g, std::move(note));
    }
    return nullptr;
  };
  const LayerCalibrationReport cr = calibrate_layers(*engine, data.windows, co, on_layer);
  result->tokens = cr.tokens;
  result->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace qf
