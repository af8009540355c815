// The `placer` program as a child process, for the tests that drive the binary (kill and resume,
// faults, evaluation workers). PLACER_BINARY is defined by the test's target.
#pragma once

#include <arpa/inet.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace placer_test {

// Drops, for this process and what it executes, the capabilities that let root write where file
// permissions forbid it: tests run as root in CI, and a read-only directory must be read-only.
// False when the process may not drop them (no CAP_SETPCAP), and then permissions still bind it
// unless it is root.
inline bool DropPermissionOverride() {
  return prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) == 0 &&
         prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) == 0;
}

struct ChildOptions {
  std::map<std::string, std::string> env;  // set in the child's environment
  // > 0 caps the size of every file the child writes (RLIMIT_FSIZE, SIGXFSZ ignored): writes
  // beyond it fail with EFBIG exactly where a full disk fails with ENOSPC.
  rlim_t max_file_bytes = 0;
  bool obey_permissions = false;  // bound by file permissions even as root
  std::string binary;             // the program to start; empty: placer (PLACER_BINARY)
};

// Starts `placer args...` with stdout and stderr to `log` (made afresh); returns its pid.
inline pid_t StartPlacer(const std::vector<std::string>& args, const std::filesystem::path& log,
                         const ChildOptions& options = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    if (options.obey_permissions) DropPermissionOverride();
    if (options.max_file_bytes > 0) {
      signal(SIGXFSZ, SIG_IGN);  // an ignored signal stays ignored across exec
      rlimit limit{options.max_file_bytes, options.max_file_bytes};
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
    // Both in append mode: with separate offsets, stdout's buffered lines would overwrite what
    // stderr wrote meanwhile.
    ::unlink(log.c_str());
    FILE* out = std::freopen(log.c_str(), "a", stdout);
    FILE* err = std::freopen(log.c_str(), "a", stderr);
    (void)out;
    (void)err;
    std::string binary = options.binary.empty() ? PLACER_BINARY : options.binary;
    std::vector<std::string> copies = args;
    std::vector<char*> argv = {binary.data()};
    for (std::string& a : copies) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// The child's exit code, or 128 + the signal that ended it (as a shell reports it).
inline int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A port nobody listens on now (the kernel's choice), for a child to listen on right after.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t size = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace placer_test
