// A directory of a test's own under the system's temporary directory, created fresh (mkdtemp)
// and removed with everything in it when the object goes. Suites that run at once (CI beside a
// developer's sanitizer build, or the test runs of several worktrees) never share, overwrite or
// delete each other's files, and nothing is left behind in /tmp.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace placer::test_support {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "placer_test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

  // Writes `contents` to `name` inside the directory (parents created) and returns its path.
  std::filesystem::path Write(const std::filesystem::path& name,
                              const std::string& contents) const {
    const std::filesystem::path file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << contents;
    return file;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace placer::test_support
