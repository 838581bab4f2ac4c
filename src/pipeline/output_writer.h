// Step 3 of quantization, "write": the output checkpoint, tensor by tensor in input order, in
// the export target's layout (quantized Linears through the target's writer, every other tensor
// copied as stored), cut into shards, then config.json with the target's quantization config,
// the target's extra files and the input's tokenizer files. Input pages are released as they
// are consumed, so memory holds one tensor and its quantized form.
#pragma once

#include "pipeline/calibrated_weights.h"

#include <filesystem>

namespace qf {

// Writes into `staging_dir` (the caller renames it into place). Fills report's byte counts.
// Throws qf::Error naming the file on NaN/Inf weights or a failed write.
void write_output(const SourceModel& model, const ModulePlan& plan, CalibrationOutcome& calibration,
                  LinearQuantizer& quantizer, const QuantizeOptions& options,
                  const Exporter& exporter, ThreadPool& pool,
                  const std::filesystem::path& staging_dir, QuantizeReport& report);

}  // namespace qf
