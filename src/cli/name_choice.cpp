// Validators for flags that take a name from a list: unknown names are refused with the
// closest known one ("did you mean"), and the list is what --help shows.
#include "cli/commands.h"
#include "core/suggest.h"

#include <algorithm>
#include <cctype>

namespace qf::cli {

CLI::Validator name_choice(std::string what, std::vector<std::string> choices, bool ignore_case) {
  std::string desc = "{";
  for (size_t i = 0; i < choices.size(); ++i) desc += (i ? "," : "") + choices[i];
  desc += "}";
  return CLI::Validator(
      [what = std::move(what), choices = std::move(choices), ignore_case](std::string& value) {
        if (ignore_case)
          std::transform(value.begin(), value.end(), value.begin(),
                         [](unsigned char c) { return char(std::tolower(c)); });
        if (std::find(choices.begin(), choices.end(), value) != choices.end()) return std::string();
        return unknown_name_message(what, value, choices);
      },
      desc);
}

std::string unknown_subcommand(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* level = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') return "";  // options come after the command
    std::vector<std::string> names;
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : level->get_subcommands(std::function<bool(const CLI::App*)>{})) {
      names.push_back(sub->get_name());
      if (sub->check_name(arg)) next = sub;
    }
    if (names.empty()) return "";  // a positional argument of the command itself
    if (!next) return unknown_name_message("command", arg, names);
    level = next;
  }
  return "";
}

}  // namespace qf::cli
