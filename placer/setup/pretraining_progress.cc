#include "placer/setup/pretraining_progress.h"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

namespace placer::setup {

int ReadIterationsDone(const std::filesystem::path& file, const std::string& fingerprint) {
  if (!std::filesystem::exists(file)) return 0;
  std::ifstream in(file);
  int done = 0;
  std::string written;
  in >> done;
  in.ignore();
  std::getline(in, written);
  if (written != fingerprint) {
    throw std::runtime_error(fmt::format(
        "{}: pretraining options differ from the run being resumed ('{}' there, '{}' now); use "
        "another directory",
        file.string(), written, fingerprint));
  }
  return done;
}

void WriteIterationsDone(const std::filesystem::path& file, int done,
                         const std::string& fingerprint) {
  std::ofstream out(file, std::ios::trunc);
  out << done << '\n' << fingerprint << '\n';
}

}  // namespace placer::setup
