// qforge tune: quantize, then distill the quantized Linears' latent weights end to end against
// the original model's logits, then export through the normal writer.
#include "pipeline/distill.h"

#include "core/convert.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/numeric.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "eval/text.h"
#include "formats/fake_quant.h"
#include "io/json_file.h"
#include "pipeline/distill_start.h"
#include "train/fake_quant_ste.h"
#include "train/model_grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>

namespace qf {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'Q', 'F', 'T', 'U', 'N', 'E', '0', '1'};

std::vector<float>* role_slot(BlockWeights<float>& w, LinearRole r) {
  switch (r) {
    case LinearRole::q_proj: return &w.q;
    case LinearRole::k_proj: return &w.k;
    case LinearRole::v_proj: return &w.v;
    case LinearRole::o_proj: return &w.o;
    case LinearRole::gate_proj: return &w.gate;
    case LinearRole::up_proj: return &w.up;
    case LinearRole::down_proj: return &w.down;
    default: return nullptr;
  }
}

// One quantized Linear of the student: its frozen scales, the fake quantizer built on them and
// where its latent weights lie in the flat parameter array.
struct Tuned {
  size_t linear = 0;
  int64_t layer = 0;
  LinearRole role = LinearRole::q_proj;
  QuantizedTensor scales;
  std::unique_ptr<FakeQuantSte> ste;
  size_t offset = 0, size = 0;
  int64_t span = 1;  // elements per scale, scales in element order
  std::vector<float> d0;  // the initial scales' divisors: the units of the latent weights
  // LSQ (--train scales/both): the block scales' parameters at scale_offset (one per scale,
  // e4m3_j = p_j · scale_factor · e4m3_j(init), rounded to the E4M3 grid in every forward);
  // scale_count 0 when the scales stay frozen.
  size_t scale_offset = 0, scale_count = 0;
  std::vector<float> scale0;  // e4m3_j(init) as floats

  // The parameters are the latent weights in units of their initial scale's step: W_i = u_i ·
  // d0_j (d0_j > 0; an all-zero block's d counts as 1), so one learning rate moves every block
  // at the same pace relative to its own code grid.
  float unit(size_t i) const {
    const float d = d0[i / size_t(span)];
    return d > 0.f && std::isfinite(d) ? d : 1.f;
  }
  // The block scales from the LSQ parameters: each on the E4M3 grid, positive, at most 448
  // (an all-zero block's scale stays 0), and the fake quantizer rebuilt on them.
  void set_scales(const float* p, float scale_factor) {
    if (scale_count == 0) return;
    for (size_t j = 0; j < scale_count; ++j) {
      if (scale0[j] == 0.f) continue;
      const float s = std::clamp(p[j] * scale_factor * scale0[j], 0x1p-9f, 448.f);
      scales.block_scales[j] = f32_to_e4m3(s);
    }
    ste = std::make_unique<FakeQuantSte>(scales);
  }
  void weights(const float* u, float* w) const {
    for (size_t i = 0; i < size; ++i) w[i] = u[i] * unit(i);
  }
};

// A float matrix trained with the quantized weights (--embedding-lr): the output head, or the
// token embedding of an untied model. Its parameters lie at `offset` in the flat array, M = p ·
// unit with unit = rms(M0) · embedding_lr / lr, so Adam's step of lr moves it by about
// embedding_lr of its RMS. Every forward rounds it to its stored dtype, so the export writes
// exactly what the student used.
struct TrainedMatrix {
  size_t offset = 0, size = 0;
  float unit = 1.f;
  DType dtype = DType::F32;

  void init(const std::vector<float>& m0, float rate_ratio, DType stored, size_t at) {
    double sq = 0;
    for (float v : m0) sq += double(v) * double(v);
    const double rms = m0.empty() ? 0.0 : std::sqrt(sq / double(m0.size()));
    offset = at;
    size = m0.size();
    unit = rms > 0 ? float(rms * double(rate_ratio)) : rate_ratio;
    dtype = stored;
  }
  void values(const float* params, float* out, ThreadPool& pool) const {
    constexpr size_t kChunk = size_t(1) << 16;
    pool.parallel_for(int64_t((size + kChunk - 1) / kChunk), [&](int64_t c) {
      const size_t begin = size_t(c) * kChunk, count = std::min(kChunk, size - begin);
      for (size_t i = begin; i < begin + count; ++i) out[i] = params[offset + i] * unit;
      round_through(dtype, out + begin, count);
    });
  }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// --calib-generate: each window's first `prompt` tokens, continued by the teacher's samples
// (temperature 1, no nucleus, seeded by the seed and the window index) to the window's length.
void generate_windows(Model& teacher, std::vector<std::vector<int32_t>>& windows, int64_t prompt,
                      uint64_t seed, bool show) {
  int64_t total = 0;
  for (const auto& w : windows) total += int64_t(w.size()) - prompt;
  Progress p("generate", ProgressUnit::tokens, double(total), show);
  for (size_t k = 0; k < windows.size(); ++k) {
    std::vector<int32_t>& w = windows[k];
    const int64_t n = int64_t(w.size());
    SamplingOptions so;
    so.temperature = 1.f;
    so.seed = seed * 0x100000001B3ull + uint64_t(k) + 1;
    w.resize(size_t(prompt));
    const std::vector<int32_t> more = generate(teacher, w, n - prompt, so, /*eos=*/-1, nullptr);
    if (int64_t(more.size()) != n - prompt)
      fail("tune: --calib-generate: the teacher generated {} of {} tokens", more.size(), n - prompt);
    w.insert(w.end(), more.begin(), more.end());
    p.advance(double(n - prompt));
  }
  p.finish();
}

// The training windows of step `step`: an epoch-wise seeded permutation, a function of the seed
// and the step only (a resumed run draws the same batches).
std::vector<int64_t> batch_windows(uint64_t seed, int64_t step, int64_t batch, int64_t n) {
  std::vector<int64_t> out;
  int64_t cached_epoch = -1;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t j = 0; j < batch; ++j) {
    const int64_t i = step * batch + j, epoch = i / n;
    if (epoch != cached_epoch) {
      std::iota(perm.begin(), perm.end(), int64_t(0));
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(epoch) + 1);
      for (int64_t k = n - 1; k > 0; --k)
        std::swap(perm[size_t(k)], perm[size_t(rng() % uint64_t(k + 1))]);
      cached_epoch = epoch;
    }
    out.push_back(perm[size_t(i % n)]);
  }
  return out;
}

template <typename V>
void put(std::string& s, const V& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(V));
}
void put_floats(std::string& s, const std::vector<float>& v) {
  put(s, uint64_t(v.size()));
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct Reader {
  const std::string& s;
  const fs::path& path;
  size_t at = 0;
  template <typename V>
  V get() {
    if (at + sizeof(V) > s.size()) fail("{}: truncated tune checkpoint", path.string());
    V v;
    std::memcpy(&v, s.data() + at, sizeof(V));
    at += sizeof(V);
    return v;
  }
  std::vector<float> floats() {
    const uint64_t n = get<uint64_t>();
    if (n > (s.size() - at) / sizeof(float)) fail("{}: truncated tune checkpoint", path.string());
    std::vector<float> v(n);
    std::memcpy(v.data(), s.data() + at, n * sizeof(float));
    at += n * sizeof(float);
    return v;
  }
};

}  // namespace

std::string_view distill_train_name(DistillTrain t) {
  switch (t) {
    case DistillTrain::weights: return "weights";
    case DistillTrain::scales: return "scales";
    case DistillTrain::both: return "both";
  }
  return "?";
}

uint64_t distill_key_hash(const std::string& key) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void write_distill_state(const fs::path& path, const DistillState& st) {
  std::string s(kMagic, sizeof(kMagic));
  put(s, st.key_hash);
  put(s, st.step);
  put_floats(s, st.params);
  put_floats(s, st.adam.m);
  put_floats(s, st.adam.v);
  put(s, st.adam.steps);
  put(s, uint64_t(st.curve.size()));
  for (const DistillPoint& p : st.curve) {
    put(s, p.step);
    put(s, p.loss);
    put(s, p.eval_kl);
  }
  write_text_file(path.string(), s);
}

DistillState read_distill_state(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot read the tune checkpoint (--resume needs one written by --checkpoint-every)",
               path.string());
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() < sizeof(kMagic) || std::memcmp(s.data(), kMagic, sizeof(kMagic)) != 0)
    fail("{}: not a qforge tune checkpoint", path.string());
  Reader r{s, path, sizeof(kMagic)};
  DistillState st;
  st.key_hash = r.get<uint64_t>();
  st.step = r.get<int64_t>();
  st.params = r.floats();
  st.adam.m = r.floats();
  st.adam.v = r.floats();
  st.adam.steps = r.get<int64_t>();
  const uint64_t points = r.get<uint64_t>();
  if (points > s.size()) fail("{}: truncated tune checkpoint", path.string());
  for (uint64_t i = 0; i < points; ++i) {
    DistillPoint p;
    p.step = r.get<int64_t>();
    p.loss = r.get<double>();
    p.eval_kl = r.get<double>();
    st.curve.push_back(p);
  }
  if (st.adam.m.size() != st.params.size() || st.adam.v.size() != st.params.size())
    fail("{}: corrupt tune checkpoint (state sizes differ)", path.string());
  return st;
}

DistillData check_distill(const SourceModel& model, const DistillOptions& o) {
  const QuantizeOptions& q = o.quantize;
  if (o.steps < 1 || o.steps > 10'000'000)
    fail("tune: --steps {} is out of range [1, 10000000]", o.steps);
  if (o.batch < 1 || o.batch > 4096) fail("tune: --batch {} is out of range [1, 4096]", o.batch);
  if (o.eval_samples < 1 || o.eval_samples > 4096)
    fail("tune: --eval-samples {} is out of range [1, 4096]", o.eval_samples);
  if (!std::isfinite(o.lr) || o.lr <= 0.f || o.lr > 1.f)
    fail("tune: --lr {} is out of range (0, 1]", o.lr);
  if (!std::isfinite(o.scale_lr) || o.scale_lr < 0.f || o.scale_lr > 1.f)
    fail("tune: --scale-lr {} is out of range [0, 1] (0: --lr)", o.scale_lr);
  if (!std::isfinite(o.embedding_lr) || o.embedding_lr < 0.f || o.embedding_lr > 1.f)
    fail("tune: --embedding-lr {} is out of range [0, 1] (0: the embedding and head stay the "
         "base model's)", o.embedding_lr);
  if (o.scale_lr > 0.f && o.train == DistillTrain::weights)
    fail("tune: --scale-lr {} sets the block scales' rate; it needs --train scales or both",
         o.scale_lr);
  if (o.train != DistillTrain::weights && q.format != Format::nvfp4)
    fail("tune: --train {}: learnable scales are implemented for --format nvfp4 only",
         distill_train_name(o.train));
  if (o.generate_prompt < 0 || (o.generate_prompt > 0 && o.generate_prompt >= q.calib.seq_len))
    fail("tune: --calib-generate {} is out of range: 0 (off) or 1 to --calib-seq - 1 ({})",
         o.generate_prompt, q.calib.seq_len - 1);
  if (o.eval_every < 0) fail("tune: --eval-every {} is negative", o.eval_every);
  if (o.checkpoint_every < 0) fail("tune: --checkpoint-every {} is negative", o.checkpoint_every);
  if ((o.checkpoint_every > 0 || o.resume) && o.checkpoint.empty())
    fail("tune: --checkpoint-every and --resume need a checkpoint path");
  const AlgoRow& algo = algo_row(q.algo);
  if (algo.awq || algo.smoothquant)
    fail("tune: --algo {}: the student's Linears must be plain (AWQ / SmoothQuant pre-scale "
         "their inputs); use max, mse, gptq, local_hessian(+gptq) or four_over_six(+gptq)",
         algo.name);
  if (q.assignment) fail("tune: mixed-precision plans (--auto, --recipe) are not supported");
  if (q.quantize_lm_head) fail("tune: --quantize-lm-head is not supported (the head is not tuned)");
  if (q.kv_fp8) fail("tune: --kv-cache fp8 is not supported (the student has no KV quantization)");
  if (q.calib.files.empty()) fail("tune: --calib is required (the distillation's text)");
  if (!o.from.empty()) {
    if (!fs::is_directory(o.from)) fail("tune --from: {} is not a directory", o.from.string());
    // The export calibrates the input scales on --calib; the student would have trained with
    // the checkpoint's, which may differ.
    if (q.activations != ActQuant::none)
      fail("tune --from: quantized activations (--activations {}) are not supported; tune from "
           "the base model instead",
           act_quant_name(q.activations));
  }
  // The family: every layer a plain Llama block, and a plain head.
  const Architecture& a = model.arch;
  for (int64_t l = 0; l < a.num_layers; ++l) block_shape(a, l);
  if (a.final_softcap != 0.f || a.logits_divisor != 1.f || a.embedding_scale != 1.f)
    fail("{}: a head with logit soft-capping or scaling, or scaled embeddings, is not "
         "differentiated by the training code (plain Llama models only)", a.model_type);
  DistillData data;
  data.calib = load_calibration_data(q.calib, model.tokenizer());
  const int64_t windows = int64_t(data.calib.windows.size());
  const int64_t n = q.calib.seq_len;
  if (!o.eval_text.empty()) {
    if (windows < o.batch)
      fail("tune: the calibration set is too small: {} windows of {} tokens, need --batch {} "
           "(more text, a smaller --calib-seq or --batch)", windows, n, o.batch);
    const std::vector<int32_t> ids = eval_text_ids(o.eval_text, 0, model.tokenizer());
    if (int64_t(ids.size()) < o.eval_samples * n)
      fail("tune --eval-text: {} holds {} tokens; --eval-samples {} windows of --calib-seq {} "
           "need {} (more text or fewer --eval-samples)",
           o.eval_text.string(), ids.size(), o.eval_samples, n, o.eval_samples * n);
    for (int64_t w = 0; w < o.eval_samples; ++w)
      data.eval_text.emplace_back(ids.begin() + w * n, ids.begin() + (w + 1) * n);
  } else if (windows < o.batch + o.eval_samples) {
    fail("tune: the calibration set is too small: {} windows of {} tokens, need --batch {} + "
         "--eval-samples {} (more text, a smaller --calib-seq, --batch or --eval-samples)",
         windows, n, o.batch, o.eval_samples);
  }
  if (o.resume) {
    const DistillState st = read_distill_state(o.checkpoint);
    if (st.key_hash != distill_key_hash(o.config_key))
      fail("{}: the checkpoint was written with other flags or inputs; --resume needs the same "
           "command line", o.checkpoint.string());
  }
  return data;
}

DistillReport distill_checkpoint(const SourceModel& model, const fs::path& out_dir,
                                 const DistillOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  DistillData checked = check_distill(model, o);
  CalibrationData& data = checked.calib;
  DistillReport rep;
  rep.algo = o.from.empty() ? std::string(weight_algo_name(o.quantize.algo)) : "from checkpoint";
  const Architecture& arch = model.arch;

  // The teacher (the engine on the original weights); with --calib-generate it samples the
  // distillation windows, which the initial quantization then calibrates on too.
  const int64_t n = o.quantize.calib.seq_len;
  ModelOptions mo;
  mo.threads = o.quantize.threads;
  mo.kernels = KernelMode::exact;
  mo.max_seq = n;
  std::unique_ptr<Model> teacher = Model::load(model.checkpoint, mo);
  ThreadPool& pool = teacher->pool();
  QuantizeOptions base = o.quantize;
  if (o.generate_prompt > 0) {
    generate_windows(*teacher, data.windows, o.generate_prompt, o.quantize.calib.seed,
                     o.quantize.progress);
    rep.generated_windows = int64_t(data.windows.size());
    base.calib_windows = std::make_shared<const CalibrationData>(data);
  }

  // 1. The start: the initial quantization (on those windows), or the checkpoint given by
  // --from; its tensors kept in memory.
  DistillStart init = o.from.empty() ? quantize_start(model, out_dir, base)
                                     : read_start(model, o.from, o.quantize);
  std::map<size_t, QuantizedTensor>& initial = init.tensors;
  rep.quantize_seconds = seconds_since(start);

  // 2. The student (train's float model).
  DenseModel<float> student = dense_model(teacher->weights(), n);
  student.act = std::move(init.act);
  const int64_t H = student.block.hidden, V = student.vocab;

  std::vector<Tuned> tuned;
  size_t total = 0;
  for (auto& [li, q] : initial) {
    const LinearModule& lm = arch.linears[li];
    Tuned t;
    t.linear = li;
    t.layer = lm.layer;
    t.role = lm.role;
    if (!role_slot(student.blocks[size_t(t.layer)], t.role))
      fail("tune: {}: not a Linear of a plain Llama block", lm.name);
    t.scales = q;
    t.scales.codes.clear();
    t.ste = std::make_unique<FakeQuantSte>(t.scales);
    t.offset = total;
    t.size = size_t(q.rows * q.cols);
    t.span = int64_t(t.size) / t.ste->scale_count();
    t.d0 = t.ste->divisors();
    total += t.size;
    tuned.push_back(std::move(t));
  }
  const bool train_weights = o.train != DistillTrain::scales;
  const bool train_scales = o.train != DistillTrain::weights;
  // LSQ parameters after all the weights: p_j = (e4m3_j / e4m3_j(init)) / c, c = scale_lr /
  // lr, so Adam's step of lr moves a scale by about scale_lr of its initial value.
  const float scale_factor = o.scale_lr > 0.f ? o.scale_lr / o.lr : 1.f;
  const size_t weight_total = total;
  if (train_scales) {
    for (Tuned& t : tuned) {
      t.scale_offset = total;
      t.scale_count = t.scales.block_scales.size();
      t.scale0.resize(t.scale_count);
      for (size_t j = 0; j < t.scale_count; ++j) t.scale0[j] = e4m3_to_f32(t.scales.block_scales[j]);
      total += t.scale_count;
      rep.scale_parameters += int64_t(t.scale_count);
    }
  }
  if (tuned.empty()) fail("tune: no Linear was quantized (everything excluded?)");
  rep.tuned_linears = int64_t(tuned.size());
  rep.parameters = int64_t(weight_total);
  // --embedding-lr: the head, and an untied model's embedding, after the block scales. Tied: the
  // config says so and the two tensors hold the same values (one matrix, both gradients).
  const ModelWeights& mw = teacher->weights();
  const bool train_embedding = o.embedding_lr > 0.f;
  TrainedMatrix head_matrix, embed_matrix;
  std::vector<float> embed_values;  // an untied model's trained embedding (rounded)
  bool tied = false;
  if (train_embedding) {
    if (mw.embed.blocks.data) fail("tune --embedding-lr: the token embedding is stored quantized");
    std::vector<float> e0(size_t(V * H));
    for (int64_t v = 0; v < V; ++v) mw.embed.row(v, e0.data() + v * H);
    tied = arch.tie_word_embeddings && e0 == student.head;
    const float ratio = o.embedding_lr / o.lr;
    const std::optional<DType> head_dtype = float_weight_dtype(mw.lm_head.w.format);
    if (!head_dtype) fail("tune --embedding-lr: the output head is stored quantized");
    head_matrix.init(student.head, ratio, *head_dtype, total);
    total += head_matrix.size;
    if (!tied) {
      embed_matrix.init(e0, ratio, mw.embed.dtype, total);
      total += embed_matrix.size;
      embed_values = std::move(e0);
    }
    rep.embedding_parameters = int64_t(total - head_matrix.offset);
    rep.embedding_tied = tied;
  }
  // The matrix the inputs are embedded from (the head itself when tied).
  const std::vector<float>& embedding = tied ? student.head : embed_values;
  const TrainedMatrix& input_matrix = tied ? head_matrix : embed_matrix;

  DistillState st;
  st.key_hash = distill_key_hash(o.config_key);
  if (!o.resume) {
    std::vector<float>& p0 = st.params;
    p0.resize(total);
    // The start: each weight's original value where it rounds to the quantization's code
    // (every weight after round-to-nearest algorithms), else the code's value (where GPTQ chose
    // another code), so the first forward is exactly the quantization's and the latent weights
    // keep where they lie inside their rounding interval.
    pool.parallel_for(int64_t(tuned.size()), [&](int64_t k) {
      const Tuned& t = tuned[size_t(k)];
      float* u = p0.data() + t.offset;
      std::vector<float> q(t.size), rounded(t.size);
      dequantize(initial.at(t.linear), q.data());
      const float* original = role_slot(student.blocks[size_t(t.layer)], t.role)->data();
      t.ste->forward(original, nullptr, rounded.data());
      for (size_t i = 0; i < t.size; ++i)
        u[i] = (rounded[i] == q[i] ? original[i] : q[i]) / t.unit(i);
      std::fill(p0.begin() + ptrdiff_t(t.scale_offset),
                p0.begin() + ptrdiff_t(t.scale_offset + t.scale_count), 1.f / scale_factor);
    });
    if (train_embedding) {
      for (size_t i = 0; i < head_matrix.size; ++i)
        p0[head_matrix.offset + i] = student.head[i] / head_matrix.unit;
      if (!tied)
        for (size_t i = 0; i < embed_matrix.size; ++i)
          p0[embed_matrix.offset + i] = embed_values[i] / embed_matrix.unit;
    }
    st.adam = AdamState(total);
  } else {
    st = read_distill_state(o.checkpoint);
    if (st.params.size() != total)
      fail("{}: the checkpoint holds {} parameters, this run has {}", o.checkpoint.string(),
           st.params.size(), total);
    rep.resumed_from = st.step;
  }
  initial.clear();

  // Windows: the last eval_samples held out, or the evaluation text's after every calibration
  // window (appended only now: the initial quantization never saw them).
  rep.eval_on_text = !checked.eval_text.empty();
  for (std::vector<int32_t>& w : checked.eval_text) data.windows.push_back(std::move(w));
  const int64_t W = int64_t(data.windows.size());
  const int64_t n_eval = o.eval_samples, n_train = W - n_eval;
  rep.train_windows = n_train;
  rep.eval_windows = n_eval;
  rep.tokens_per_window = n;
  std::vector<std::vector<float>> x0(static_cast<size_t>(W));
  for (int64_t w = 0; w < W; ++w) {  // with --embedding-lr batch_of embeds from the trained matrix
    x0[size_t(w)].resize(size_t(n * H));
    if (!train_embedding) teacher->embed(data.windows[size_t(w)], x0[size_t(w)].data());
  }
  const bool cache = uint64_t(W) * uint64_t(n) * uint64_t(V) * 4 <= o.teacher_cache_bytes;
  std::vector<std::vector<float>> cached(static_cast<size_t>(W));
  auto teacher_logits = [&](int64_t w, std::vector<float>& out) {
    out.resize(size_t(n * V));
    teacher->forward(data.windows[size_t(w)], 0, out.data(), /*all_logits=*/true);
  };
  if (cache) {
    Progress p("teacher", ProgressUnit::tokens, double(W * n), o.quantize.progress);
    for (int64_t w = 0; w < W; ++w) {
      teacher_logits(w, cached[size_t(w)]);
      p.advance(double(n));
    }
    p.finish();
  }
  std::vector<std::vector<float>> scratch_logits;
  auto batch_of = [&](const std::vector<int64_t>& ids) {
    DistillBatch<float> b;
    b.tokens = n;
    if (!cache) scratch_logits.assign(ids.size(), {});
    for (size_t i = 0; i < ids.size(); ++i) {
      std::vector<float>& x = x0[size_t(ids[i])];
      if (train_embedding) {  // the current embedding's rows
        const std::vector<int32_t>& tokens = data.windows[size_t(ids[i])];
        for (int64_t t = 0; t < n; ++t)
          std::copy_n(embedding.data() + int64_t(tokens[size_t(t)]) * H, H, x.data() + t * H);
      }
      b.x0.push_back(x.data());
      if (cache) {
        b.teacher_logits.push_back(cached[size_t(ids[i])].data());
      } else {
        teacher_logits(ids[i], scratch_logits[i]);
        b.teacher_logits.push_back(scratch_logits[i].data());
      }
    }
    return b;
  };
  // Ŵ of every tuned Linear into the student (the LSQ scales first).
  auto apply = [&] {
    pool.parallel_for(int64_t(tuned.size()), [&](int64_t i) {
      Tuned& t = tuned[size_t(i)];
      t.set_scales(st.params.data() + t.scale_offset, scale_factor);
      std::vector<float> w(t.size);
      t.weights(st.params.data() + t.offset, w.data());
      t.ste->forward(w.data(), nullptr, role_slot(student.blocks[size_t(t.layer)], t.role)->data());
    });
    if (train_embedding) {
      head_matrix.values(st.params.data(), student.head.data(), pool);
      if (!tied) embed_matrix.values(st.params.data(), embed_values.data(), pool);
    }
  };
  std::vector<int64_t> eval_ids(static_cast<size_t>(n_eval));
  std::iota(eval_ids.begin(), eval_ids.end(), n_train);
  double eval_seconds = 0;
  auto evaluate = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    apply();
    const double kl = model_kl<float>(student, batch_of(eval_ids), nullptr, &pool);
    eval_seconds += seconds_since(t0);
    return kl;
  };

  const int64_t eval_every = o.eval_every > 0 ? o.eval_every : std::max<int64_t>(1, o.steps / 10);
  const uint64_t seed = o.quantize.calib.seed;
  std::vector<BlockWeights<float>> grads;
  std::vector<float> dhead;
  std::vector<std::vector<float>> dx0;
  std::vector<float> flat_grad(total);
  std::vector<FakeQuantGrads> fq(tuned.size());
  const auto train_start = std::chrono::steady_clock::now();
  Progress progress("tune", ProgressUnit::runs, double(o.steps), o.quantize.progress);
  progress.advance(double(st.step));
  double last_eval = -1;
  for (const DistillPoint& p : st.curve)
    if (p.eval_kl >= 0) last_eval = p.eval_kl;
  for (int64_t s = st.step; s < o.steps; ++s) {
    DistillPoint point;
    point.step = s;
    if (s % eval_every == 0) point.eval_kl = last_eval = evaluate();
    apply();
    for (BlockWeights<float>& g : grads)
      for (std::vector<float>* p : {&g.attn_norm, &g.mlp_norm, &g.q, &g.k, &g.v, &g.o, &g.gate,
                                    &g.up, &g.down})
        std::fill(p->begin(), p->end(), 0.f);
    const std::vector<int64_t> ids = batch_windows(seed, s, o.batch, n_train);
    std::fill(dhead.begin(), dhead.end(), 0.f);
    point.loss = model_kl<float>(student, batch_of(ids), &grads, &pool, nullptr,
                                 train_embedding ? EmbeddingGrads<float>{&dhead, &dx0}
                                                 : EmbeddingGrads<float>{});
    pool.parallel_for(int64_t(tuned.size()), [&](int64_t i) {
      const Tuned& t = tuned[size_t(i)];
      std::vector<float> w(t.size);
      t.weights(st.params.data() + t.offset, w.data());
      t.ste->backward(w.data(), nullptr, role_slot(grads[size_t(t.layer)], t.role)->data(),
                      fq[size_t(i)]);
      const std::vector<float>& gw = fq[size_t(i)].w;
      float* gu = flat_grad.data() + t.offset;
      for (size_t k = 0; k < t.size; ++k)  // dL/du = dL/dW · d0
        gu[k] = train_weights ? gw[k] * t.unit(k) : 0.f;
      // dL/dp_j = dL/dd_j · dd_j/dp_j, d_j = e4m3_j · g, e4m3_j ≈ p_j · c · e4m3_j(init) (the
      // E4M3 rounding passed straight through): c · d0_j · dL/dd_j.
      float* gp = flat_grad.data() + t.scale_offset;
      for (size_t j = 0; j < t.scale_count; ++j)
        gp[j] = scale_factor * t.d0[j] * fq[size_t(i)].scale[j];
    });
    if (train_embedding) {  // dL/dp = unit · dL/dM; the inputs' rows go back to their tokens
      float* gh = flat_grad.data() + head_matrix.offset;
      pool.parallel_for(V, [&](int64_t v) {
        for (int64_t h = v * H; h < (v + 1) * H; ++h) gh[h] = head_matrix.unit * dhead[size_t(h)];
      });
      float* ge = flat_grad.data() + input_matrix.offset;
      if (!tied) std::fill(ge, ge + input_matrix.size, 0.f);
      for (size_t i = 0; i < ids.size(); ++i) {
        const std::vector<int32_t>& tokens = data.windows[size_t(ids[i])];
        for (int64_t t = 0; t < n; ++t) {
          float* g = ge + int64_t(tokens[size_t(t)]) * H;
          const float* d = dx0[i].data() + t * H;
          for (int64_t h = 0; h < H; ++h) g[h] += input_matrix.unit * d[h];
        }
      }
    }
    AdamOptions ao;
    ao.lr = float(double(o.lr) * 0.5 * (1.0 + std::cos(M_PI * double(s) / double(o.steps))));
    adam_step(ao, st.adam, st.params.data(), flat_grad.data(), &pool);
    st.curve.push_back(point);
    st.step = s + 1;
    progress.advance(1);
    progress.set_detail(last_eval >= 0
                            ? fmt::format("loss {:.5f}  eval KL {:.5f}", point.loss, last_eval)
                            : fmt::format("loss {:.5f}", point.loss));
    if (o.checkpoint_every > 0 && st.step % o.checkpoint_every == 0 && st.step < o.steps)
      write_distill_state(o.checkpoint, st);
    if (o.stop_after > 0 && st.step == o.stop_after) fail("tune: interrupted after step {}", st.step);
  }
  {
    DistillPoint last;
    last.step = o.steps;
    last.loss = -1;
    last.eval_kl = evaluate();
    st.curve.push_back(last);
  }
  progress.finish();
  rep.train_seconds = seconds_since(train_start);
  rep.steps = o.steps;
  rep.eval_seconds = eval_seconds;
  rep.seconds_per_step = o.steps > rep.resumed_from
                             ? (rep.train_seconds - eval_seconds) / double(o.steps - rep.resumed_from)
                             : 0;
  rep.curve = st.curve;
  for (const DistillPoint& p : st.curve)
    if (p.eval_kl >= 0) {
      rep.eval_kl_before = p.eval_kl;
      break;
    }
  rep.eval_kl_after = st.curve.back().eval_kl;

  // 3. Export: the trained weights encoded with the frozen scales, through the normal writer.
  std::map<size_t, const Tuned*> by_linear;
  for (const Tuned& t : tuned) by_linear[t.linear] = &t;
  QuantizeOptions fo = base;
  fo.algo = WeightAlgo::max;  // nothing to calibrate: every quantized Linear is replaced
  fo.replace_linear = [&](size_t li) -> std::optional<QuantizedTensor> {
    auto it = by_linear.find(li);
    if (it == by_linear.end()) return std::nullopt;
    const Tuned& t = *it->second;  // its scales set by the last evaluation's apply()
    QuantizedTensor q = t.scales;
    std::vector<float> w(t.size);
    t.weights(st.params.data() + t.offset, w.data());
    encode_with_scales(q, w.data(), pool);
    if (o.on_student_weights)
      o.on_student_weights(li, role_slot(student.blocks[size_t(t.layer)], t.role)->data());
    return q;
  };
  fo.on_linear = nullptr;
  if (train_embedding)  // the matrices as the last evaluation's apply() rounded them
    fo.replace_float = [&](const std::string& name) -> std::optional<std::vector<float>> {
      if (name == arch.head_name) return student.head;
      if (name == arch.embed_name) return embedding;
      return std::nullopt;
    };
  rep.quantize = quantize_checkpoint(model, out_dir, fo);
  rep.quantize.algo = rep.algo + "+tune";
  if (o.checkpoint_every > 0 && fs::exists(o.checkpoint)) fs::remove(o.checkpoint);
  rep.seconds = seconds_since(start);
  rep.peak_rss_bytes = peak_rss_bytes();
  return rep;
}

}  // namespace qf
