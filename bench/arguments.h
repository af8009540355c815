// Reading benchmark arguments: a comma-separated list of integers ("64,512,4096").
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace placer::bench {

inline std::vector<int> IntList(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace placer::bench
