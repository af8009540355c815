// Helpers shared by the test suites.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

#include "graph/device.h"

namespace placer::test_support {

// `count` CPU workers of one thread each, named cpu:0, cpu:1, ...; capacity 0 = unlimited.
inline graph::DeviceSet CpuWorkers(int count, int64_t capacity = 0) {
  graph::DeviceSet devices;
  for (int i = 0; i < count; ++i) {
    devices.push_back({"cpu:" + std::to_string(i), graph::DeviceType::kCpu, i, 1, capacity});
  }
  return devices;
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the real `placer` binary (PLACER_BINARY, set by tests/CMakeLists.txt) with `args`.
inline CommandResult RunPlacer(const std::string& args) {
  std::string command = std::string(PLACER_BINARY) + " " + args + " 2>&1 </dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  CommandResult result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace placer::test_support
