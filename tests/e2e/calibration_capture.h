// The layer-by-layer calibration of a fixture model computed in-process exactly as `quantize`
// does with the e2e tests' settings (tinyshakespeare, --calib-samples 16 --calib-seq 128
// --seed 3), so tests can recompute the scales an export must hold.
#pragma once

#include "calib/calibration_data.h"
#include "calib/layer_calibration.h"
#include "engine/model.h"
#include "io/tokenizer.h"
#include "test_util.h"

#include <functional>
#include <string>

namespace qf::test {

inline const char* kCalibFlags = " --calib-samples 16 --calib-seq 128 --seed 3";

inline std::filesystem::path calib_file() {
  return fixtures_dir() / "corpora" / "tinyshakespeare.txt";
}

// Calls on_layer(layer, capture) for every decoder layer of fixture `model`.
inline void capture_calibration(const std::string& model,
                                const std::function<void(int64_t, LayerCapture&)>& on_layer) {
  const auto tok = Tokenizer::load(model_dir(model));
  CalibrationOptions o;
  o.files = {calib_file()};
  o.samples = 16;
  o.seq_len = 128;
  o.seed = 3;
  const CalibrationData data = load_calibration_data(o, *tok);
  ModelOptions mo;
  mo.max_seq = 128;
  auto m = Model::load(model_dir(model), mo);
  LayerCalibrationOptions co;
  co.capture.seed = 3;
  calibrate_layers(*m, data.windows, co, [&](int64_t l, LayerCapture& cap) {
    on_layer(l, cap);
    return static_cast<const LayerWeights*>(nullptr);
  });
}

}  // namespace qf::test
