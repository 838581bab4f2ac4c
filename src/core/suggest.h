// "Did you mean" for names a user chooses (formats, algorithms, targets, subcommands, shapes):
// the closest known name by edit distance, and the one-line message that names it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qf {

// Edit distance: insertions, deletions, substitutions and swaps of neighbouring characters,
// each costing 1; case-insensitive over ASCII.
size_t edit_distance(std::string_view a, std::string_view b);

// The choice closest to `given` when it is close enough to be a plausible typo (distance at
// most max(1, (given length) / 3), ties to the earlier choice), or "" when none is.
std::string closest_name(std::string_view given, std::span<const std::string> choices);

// "unknown WHAT 'GIVEN'; did you mean 'X'? (choices: a, b, c)", without the did-you-mean part
// when no choice is close.
std::string unknown_name_message(std::string_view what, std::string_view given,
                                 std::span<const std::string> choices);

}  // namespace qf
