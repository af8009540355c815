#include "placer/run_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace placer::search {
namespace {

// The PID written in an open lock file; nullopt when it holds none (empty: just created, or its
// holder has locked it and not written yet).
std::optional<pid_t> PidIn(int fd) {
  char text[32] = {};
  const ssize_t size = pread(fd, text, sizeof(text) - 1, 0);
  if (size <= 0) return std::nullopt;
  char* end = nullptr;
  const long pid = std::strtol(text, &end, 10);
  return pid > 0 ? std::optional(static_cast<pid_t>(pid)) : std::nullopt;
}

std::runtime_error CannotWrite(const std::filesystem::path& file) {
  return std::runtime_error(
      fmt::format("cannot write {}: {}", file.string(), std::strerror(errno)));
}

// Whether `fd` is still the file at `path`: a holder removes the file before it unlocks, so a
// process that opened the file just before may lock a file no longer in the directory, while a
// third one locks a new file under the same name.
bool StillThere(int fd, const std::filesystem::path& path) {
  struct stat opened {};
  struct stat named {};
  return fstat(fd, &opened) == 0 && stat(path.c_str(), &named) == 0 &&
         opened.st_dev == named.st_dev && opened.st_ino == named.st_ino;
}

}  // namespace

RunLockHeld::RunLockHeld(const std::filesystem::path& directory, pid_t holder)
    : std::runtime_error(
          holder > 0
              ? fmt::format("{} is in use by another run (process {} holds {}); wait for it to "
                            "end, or choose another output directory",
                            directory.string(), holder, (directory / ".lock").string())
              : fmt::format("{} is in use by another run (a process that is starting holds {}); "
                            "wait for it to end, or choose another output directory",
                            directory.string(), (directory / ".lock").string())),
      holder_(holder) {}

RunLock::RunLock(const std::filesystem::path& directory) : file_(directory / ".lock") {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    throw std::runtime_error(fmt::format("cannot create the output directory {}: {}",
                                         directory.string(), error.message()));
  }
  for (;;) {
    fd_ = open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw CannotWrite(file_);
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      if (StillThere(fd_, file_)) break;
      close(fd_);  // removed by its last holder meanwhile: lock the file now there
      continue;
    }
    const int lock_errno = errno;
    if (lock_errno != EWOULDBLOCK) {
      close(fd_);
      errno = lock_errno;
      throw CannotWrite(file_);
    }
    // Held. The holder writes its PID right after it locks: give it a moment to.
    std::optional<pid_t> holder = PidIn(fd_);
    for (int attempt = 0; !holder && attempt < 50; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      holder = PidIn(fd_);
    }
    close(fd_);
    fd_ = -1;
    throw RunLockHeld(directory, holder.value_or(0));
  }
  // Locked: whatever PID the file names is a process that died holding it.
  taken_over_from_ = PidIn(fd_);
  const std::string pid = fmt::format("{}\n", getpid());
  if (ftruncate(fd_, 0) != 0 ||
      pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int write_errno = errno;
    unlink(file_.c_str());
    close(fd_);
    errno = write_errno;
    throw CannotWrite(file_);
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  unlink(file_.c_str());
  close(fd_);
}

}  // namespace placer::search
