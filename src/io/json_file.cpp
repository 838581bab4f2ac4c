#include "io/json_file.h"

#include "core/error.h"
#include "io/io_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

namespace qf {
namespace {

struct TooDeep {};

constexpr std::string_view kPythonWords[] = {"-Infinity", "Infinity", "NaN"};

// `text` with every bare Infinity / -Infinity / NaN outside strings replaced by the string
// kPythonFloatPrefix + word; nullopt when there is none (the common case, parsed in place).
std::optional<std::string> quote_python_floats(std::string_view text) {
  std::string out;
  bool changed = false, in_string = false;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
      continue;
    }
    for (std::string_view w : kPythonWords) {
      if (text.substr(i, w.size()) != w) continue;
      out.append(text.substr(copied, i - copied));
      out.append("\"\\u0001");  // JSON strings escape the prefix's control character
      out.append(kPythonFloatPrefix.substr(1));
      out.append(w);
      out += '"';
      i += w.size() - 1;
      copied = i + 1;
      changed = true;
      break;
    }
  }
  if (!changed) return std::nullopt;
  out.append(text.substr(copied));
  return out;
}

template <typename Json>
std::optional<double> number_of(const Json& v) {
  if (v.is_number()) return v.template get<double>();
  std::string_view w;
  if (v.is_object() && v.size() == 1 && v.contains("__float__") && v["__float__"].is_string()) {
    // transformers 5 writes a non-finite config float as {"__float__": "Infinity"}.
    w = v["__float__"].template get_ref<const std::string&>();
  } else if (v.is_string() && v.template get_ref<const std::string&>().starts_with(kPythonFloatPrefix)) {
    w = std::string_view(v.template get_ref<const std::string&>()).substr(kPythonFloatPrefix.size());
  } else {
    return std::nullopt;
  }
  if (w == "Infinity") return std::numeric_limits<double>::infinity();
  if (w == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (w == "NaN") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

template <typename Json>
Json parse_bounded(std::string_view original, const std::string& label, int max_depth) {
  const std::optional<std::string> quoted = quote_python_floats(original);
  const std::string_view text = quoted ? std::string_view(*quoted) : original;
  try {
    return Json::parse(text.begin(), text.end(),
                       [max_depth](int depth, nlohmann::json::parse_event_t, Json&) {
                         // depth counts from 0 at the top level
                         if (depth >= max_depth) throw TooDeep{};
                         return true;
                       });
  } catch (const TooDeep&) {
    fail("{}: JSON nests deeper than {} levels", label, max_depth);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", label, json_error_reason(e));
  }
}

}  // namespace

std::optional<double> json_number(const nlohmann::json& v) { return number_of(v); }
std::optional<double> json_number(const nlohmann::ordered_json& v) { return number_of(v); }

nlohmann::json parse_json_text(std::string_view text, const std::string& label, int max_depth) {
  return parse_bounded<nlohmann::json>(text, label, max_depth);
}

nlohmann::ordered_json parse_ordered_json_text(std::string_view text, const std::string& label,
                                               int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, label, max_depth);
}

void write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& json) {
  std::string text = json.dump(4) + "\n";
  // The Python float words the reader held as strings go back bare (nlohmann escapes the
  // prefix's control character as \u0001).
  const std::string escaped = "\"\\u0001" + std::string(kPythonFloatPrefix.substr(1));
  for (size_t at; (at = text.find(escaped)) != std::string::npos;) {
    const size_t end = text.find('"', at + escaped.size());
    text.replace(at, end + 1 - at, text.substr(at + escaped.size(), end - at - escaped.size()));
  }
  const std::filesystem::path tmp = path.string() + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp.string(), std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    const int e = written ? errno : write_errno;
    std::remove(tmp.c_str());
    fail("{}: write failed: {}", path.string(), std::strerror(e));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename into place: {}", path.string(), ec.message());
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    fail("{}: write failed", path);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) fail("{}: cannot rename into place: {}", path, ec.message());
}

}  // namespace qf
