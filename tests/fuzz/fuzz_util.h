// Shared pieces of the libFuzzer targets: a per-process scratch directory for parsers that read
// files, splitting one input into several files, and the policy on exceptions.
//
// Policy: a parser of untrusted input may only throw qf::Error (a one-line message naming the
// file and field). Any other exception escapes LLVMFuzzerTestOneInput, which libFuzzer reports
// as a crash ("uncaught exception"), so the fuzzer stops on it like on a sanitizer report.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace qf::fuzz {

// A directory that lives as long as the process: inputs are written there as the files the
// parsers expect. Removed at exit so that repeated runs leave no litter in /tmp.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    // Memory-backed when possible: on a disk-backed /tmp the file-reading harnesses ran 20x
    // slower, spending their time in the file system instead of the parsers.
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec) &&
                                               access("/dev/shm", W_OK) == 0
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "qforge-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    std::filesystem::path p(tmpl);
    static const std::filesystem::path keep = p;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return p;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) std::abort();
}

inline void remove_file(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

// Splits the input at each occurrence of `sep` (at most `parts` pieces, the last one takes the
// rest). A separator that no JSON document contains lets the fuzzer vary each file on its own.
inline std::vector<std::string_view> split(std::string_view in, std::string_view sep,
                                           size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const size_t at = in.find(sep);
    if (at == std::string_view::npos) break;
    out.push_back(in.substr(0, at));
    in.remove_prefix(at + sep.size());
  }
  out.push_back(in);
  return out;
}

// A valid safetensors file holding one F32 scalar per name, for checkpoints around a fuzzed
// config or index.
inline std::string tiny_safetensors(const std::vector<std::string>& names,
                                    const std::string& metadata = "") {
  std::string header = "{";
  if (!metadata.empty()) header += "\"__metadata__\":" + metadata + ",";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) header += ",";
    header += "\"" + names[i] + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
  }
  header += "}";
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[size_t(b)] = char((uint64_t(header.size()) >> (8 * b)) & 0xff);
  return out + header + std::string(4 * names.size(), '\0');
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace qf::fuzz
