// The fuzzers' input as a file: the parsers under test read paths, as the CLI does.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace placer::fuzz {

// Writes `data` to a file private to this process (in /dev/shm when present: memory, not disk)
// named with `extension`, and returns its path. The parsers pick the format by extension.
inline std::filesystem::path WriteInput(const uint8_t* data, size_t size,
                                        const std::string& extension) {
  const std::filesystem::path dir =
      std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  std::filesystem::path file = dir / ("placer-fuzz-" + std::to_string(getpid()) + extension);
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return file;
}

}  // namespace placer::fuzz
