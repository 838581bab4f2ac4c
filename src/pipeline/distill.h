// End-to-end distillation (`qforge tune`): the quantized student's next-token distributions are
// pulled toward the original model's by minimising KL(teacher ‖ student) on the logits over
// calibration windows. The steps:
//   1. quantize: the normal pipeline (QuantizeOptions: format, algorithm, ...) into a scratch
//      directory, keeping each quantized Linear's QuantizedTensor in memory (or read them from
//      a checkpoint quantized before, `from`): its scales are frozen from here on and its
//      dequantized weights are the student's start;
//   2. tune: every quantized Linear's latent float weights W (in units of the scale's step,
//      u = W / d, so one learning rate suits every block; starting at the original weights
//      where they round to the quantization's codes and at the codes' values where they do not,
//      so step 0 is exactly the post-training result) are fake-quantized with
//      FakeQuantSte against those scales; the loss's gradient reaches W through the
//      straight-through estimator (train/model_grad.h: whole-model backward with gradient
//      checkpointing); Adam with a cosine learning-rate decay; the teacher's logits come from the
//      engine's forward of the original model (cached when small enough); a held-out slice of
//      the windows gives the evaluation KL;
//   3. export: the trained W encoded with the frozen scales (codes = what the forward used) and
//      written by the normal writer (QuantizeOptions::replace_linear), under a temporary name
//      renamed when complete.
// Checkpoints (latent weights, Adam state, step, loss curve, and a hash of the flags and inputs)
// are written atomically every N steps; a resumed run gives the same bytes as an uninterrupted
// one (the batches depend only on the seed and the step).
#pragma once

#include "pipeline/quantize_checkpoint.h"
#include "train/adam.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

// What `qforge tune` trains (--train): the latent weights through the straight-through estimator,
// the NVFP4 FP8 block scales by LSQ (each block scale e4m3_j is a latent float, rounded to the
// E4M3 grid in every forward, so the export equals the trained forward), or both.
enum class DistillTrain { weights, scales, both };
std::string_view distill_train_name(DistillTrain t);

struct DistillOptions {
  // The initial quantization (format, algorithm, export target, calibration windows, threads,
  // force, progress). Weight-only; AWQ, SmoothQuant, mixed-precision plans and a quantized
  // lm_head are refused (the student's Linears must be plain).
  QuantizeOptions quantize;
  // Start from this checkpoint (a qforge NVFP4 / MXFP4 export of the base model, weight-only)
  // instead of quantizing: pipeline/distill_start.h read_start. Empty: quantize first.
  std::filesystem::path from;
  int64_t steps = 200;         // optimiser steps
  int64_t batch = 4;           // windows per step
  int64_t eval_samples = 8;    // windows of the evaluation KL (held out, or of eval_text)
  int64_t eval_every = 0;      // steps between evaluations; 0: steps / 10 (at least 1)
  // Adam's peak learning rate (cosine decay to 0 over `steps`), in units of each weight's
  // quantization step (its scale's divisor d: the parameters are W / d).
  float lr = 0.01f;
  DistillTrain train = DistillTrain::weights;
  // LSQ block scales: Adam's peak learning rate for the scales, in units of each scale's initial
  // value (the parameters are e4m3_j / e4m3_j(init)); 0: the same as `lr`.
  float scale_lr = 0.f;
  // The token embedding and the output head (one matrix when tied) trained too, in float and
  // exported in their stored dtype: Adam's peak learning rate, in units of each matrix's RMS
  // (cosine decay as `lr`); 0: they stay the base model's.
  float embedding_lr = 0.f;
  // Teacher-generated distillation windows (LLM-QAT's data-free distillation): each calibration
  // window keeps its first `generate_prompt` tokens (BOS included) and the teacher samples the
  // rest (temperature 1, seeded by --seed and the window), so the student is distilled on the
  // teacher's own distribution, and the initial quantization (GPTQ's statistics, W4A4's input
  // scales) calibrates on the same windows; 0: the calibration text as it is.
  int64_t generate_prompt = 0;
  // A text to measure the evaluation KL on instead of held-out calibration windows (every
  // calibration window then trains): its first eval_samples windows of calib.seq_len tokens, BOS
  // once at the start and each window from position 0, so the curve's KL is what `qforge eval
  // kl --ctx seq_len` reports on those tokens. Used only to measure, never to train or
  // calibrate. Empty: the last eval_samples calibration windows are held out.
  std::filesystem::path eval_text;
  int64_t checkpoint_every = 0;         // 0: no checkpoints
  std::filesystem::path checkpoint;     // the checkpoint file (written and, with resume, read)
  bool resume = false;
  std::string config_key;  // the flags and inputs as text: its hash guards --resume
  // Test seam: called at export for each tuned Linear (Architecture::linears index) with the
  // weights [rows, cols] the student's final forward used (its Ŵ after the last step).
  std::function<void(size_t, const float*)> on_student_weights;
  // Test seam: stop (throwing qf::Error "interrupted") once this many steps are done; 0: never.
  int64_t stop_after = 0;
  // Teacher logits larger than this are recomputed per step instead of cached.
  uint64_t teacher_cache_bytes = uint64_t(1) << 30;
};

struct DistillPoint {
  int64_t step = 0;        // steps done
  double loss = 0;         // the training batch's KL at this step (before its update)
  double eval_kl = -1;     // the held-out KL after `step` steps; -1: not evaluated
};

struct DistillReport {
  QuantizeReport quantize;        // the export's (final write) report
  std::string algo;               // the initial quantization's algorithm
  int64_t train_windows = 0, eval_windows = 0, tokens_per_window = 0;
  bool eval_on_text = false;      // the evaluation KL is on DistillOptions::eval_text
  int64_t steps = 0, resumed_from = 0, parameters = 0, tuned_linears = 0;
  int64_t scale_parameters = 0;      // LSQ block scales trained (0 unless --train scales/both)
  int64_t generated_windows = 0;     // windows the teacher sampled (--calib-generate)
  int64_t embedding_parameters = 0;  // embedding / head values trained (--embedding-lr)
  bool embedding_tied = false;       // one matrix for both (tied embeddings)
  double eval_kl_before = 0, eval_kl_after = 0;
  // train_seconds includes the evaluations (eval_seconds); seconds_per_step excludes them.
  double quantize_seconds = 0, train_seconds = 0, eval_seconds = 0, seconds_per_step = 0;
  double seconds = 0;
  uint64_t peak_rss_bytes = 0;
  std::vector<DistillPoint> curve;
};

// The token windows a distillation reads: the calibration windows (trained on; the last
// eval_samples held out unless there is an evaluation text) and the evaluation text's windows.
struct DistillData {
  CalibrationData calib;
  std::vector<std::vector<int32_t>> eval_text;  // empty without DistillOptions::eval_text
};

// Checks everything that can be checked before work starts (one-line qf::Error): the family's
// backward exists (every layer a plain Llama block, plain head), the options' ranges and
// combinations, the calibration windows against batch (+ eval_samples when held out), the
// evaluation text (readable, UTF-8, at least eval_samples x seq_len tokens). Returns the windows.
DistillData check_distill(const SourceModel& model, const DistillOptions& options);

// Runs the three steps into `out_dir`. Throws qf::Error as check_distill does, and for a
// checkpoint that does not match (--resume with other flags or inputs).
DistillReport distill_checkpoint(const SourceModel& model, const std::filesystem::path& out_dir,
                                 const DistillOptions& options);

// The serialised optimiser state (exposed for tests).
struct DistillState {
  uint64_t key_hash = 0;
  int64_t step = 0;
  std::vector<float> params;  // the latent weights / their scale's divisor, Linear after Linear
  AdamState adam;
  std::vector<DistillPoint> curve;
};
void write_distill_state(const std::filesystem::path& path, const DistillState& s);
DistillState read_distill_state(const std::filesystem::path& path);
uint64_t distill_key_hash(const std::string& key);

}  // namespace qf
