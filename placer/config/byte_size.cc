// Byte sizes as configs give them ("4GiB", "512 MiB", "1.5GB", a plain count).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "placer/config/config.h"

namespace placer::config {

std::optional<int64_t> ParseByteSize(const std::string& text) {
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1000},
      {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000},
      {"TB", int64_t{1000} * 1000 * 1000 * 1000},
      {"KiB", int64_t{1} << 10},
      {"MiB", int64_t{1} << 20},
      {"GiB", int64_t{1} << 30},
      {"TiB", int64_t{1} << 40},
  };
  const std::string_view all(text);
  const size_t number_end = all.find_first_not_of("0123456789.");
  const std::string_view number = all.substr(0, number_end);
  std::string_view unit = number_end == std::string_view::npos ? "" : all.substr(number_end);
  if (unit.size() > 1 && unit.front() == ' ') unit.remove_prefix(1);
  const auto* found = std::find_if(std::begin(kUnits), std::end(kUnits),
                                   [&](const auto& entry) { return entry.first == unit; });
  if (found == std::end(kUnits) || number.empty()) return std::nullopt;
  const int64_t multiplier = found->second;

  const char* const begin = number.data();
  const char* const end = number.data() + number.size();
  if (number.find('.') == std::string_view::npos) {
    int64_t count = 0;
    int64_t bytes = 0;
    const auto [parsed_end, error] = std::from_chars(begin, end, count);
    if (error != std::errc() || parsed_end != end) return std::nullopt;
    if (__builtin_mul_overflow(count, multiplier, &bytes)) return std::nullopt;
    return bytes;
  }
  // A fraction needs a unit above bytes ("1.5GiB"); "1.5" or "1.5B" is not a byte count.
  if (multiplier == 1 || number.front() == '.' || number.back() == '.') return std::nullopt;
  double count = 0;
  const auto [parsed_end, error] = std::from_chars(begin, end, count, std::chars_format::fixed);
  if (error != std::errc() || parsed_end != end) return std::nullopt;
  const double bytes = std::round(count * static_cast<double>(multiplier));
  if (bytes >= 0x1p63) return std::nullopt;
  return static_cast<int64_t>(bytes);
}

}  // namespace placer::config
