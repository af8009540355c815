// One run per output directory: `search` and `compare` hold an exclusive flock(2) on
// <directory>/.lock for the run's life, the holder's PID written inside. The kernel releases the
// lock when its holder dies however it dies (kill -9 included), so a lock file left behind by a
// dead process is unlocked and is simply taken over; a clean exit removes the file. Torch-free.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <stdexcept>

namespace placer::search {

// Another live process holds the directory's lock: its PID (0 when it had not written it yet).
class RunLockHeld : public std::runtime_error {
 public:
  RunLockHeld(const std::filesystem::path& directory, pid_t holder);
  pid_t holder() const { return holder_; }

 private:
  pid_t holder_;
};

class RunLock {
 public:
  // Creates `directory` and locks it. Throws RunLockHeld when another process holds the lock, and
  // std::runtime_error naming the path when the directory or the lock file cannot be made.
  explicit RunLock(const std::filesystem::path& directory);
  ~RunLock();  // removes the lock file, then releases the lock
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::filesystem::path& file() const { return file_; }
  // The PID a lock file left by a dead process named, when this lock took it over.
  std::optional<pid_t> taken_over_from() const { return taken_over_from_; }

 private:
  std::filesystem::path file_;
  int fd_ = -1;
  std::optional<pid_t> taken_over_from_;
};

}  // namespace placer::search
