// One run per output directory (placer/run_lock.h), with real `placer` processes: a second
// search or compare into a directory a search is using is refused with exit 2 naming the first
// one's PID; a lock file left by a process killed with -9 is taken over; a clean exit removes it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/placer_process.h"

namespace {

namespace fs = std::filesystem;
using placer_test::StartPlacer;
using placer_test::Wait;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Waits until `log` holds `text`; false when the process ended first or five minutes passed.
bool WaitForLine(pid_t pid, const fs::path& log, const std::string& text) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::minutes(5)) {
    if (ReadFile(log).find(text) != std::string::npos) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A directory of this test process's own, so that two runs of the suite do not meet.
fs::path TestRoot(const std::string& name) {
  return fs::temp_directory_path() / (name + "." + std::to_string(getpid()));
}

// A simulated search into `root`/run; `policy_steps` large enough that it runs until killed.
fs::path WriteConfig(const fs::path& root, const std::string& name, int policy_steps) {
  fs::create_directories(root);
  const fs::path config = root / name;
  std::ofstream(config) << "model: {builtin: lenet, batch_size: 16}\n"
                           "devices: [cpu:0, cpu:1]\n"
                           "search: {evaluator: simulated, policy_steps: "
                        << policy_steps
                        << ", samples_per_step: 8,\n"
                           "         refinement_rounds: 3, max_wall_seconds: 3600}\n"
                           "output: {directory: run}\n";
  return config;
}

TEST(RunLockTest, ASecondRunIntoTheSameDirectoryIsRefusedNamingTheFirstsPid) {
  const fs::path root = TestRoot("placer_run_lock_test");
  fs::remove_all(root);
  const fs::path long_search = WriteConfig(root, "long.yaml", 1000000);
  const pid_t first = StartPlacer({"search", "--config", long_search.string()}, root / "first.log");
  ASSERT_TRUE(WaitForLine(first, root / "first.log", "[search] step"))
      << ReadFile(root / "first.log");
  EXPECT_EQ(ReadFile(root / "run" / ".lock"), std::to_string(first) + "\n");

  const fs::path short_search = WriteConfig(root, "short.yaml", 2);
  for (const char* command : {"search", "compare"}) {
    const fs::path log = root / (std::string(command) + ".log");
    const int code = Wait(StartPlacer({command, "--config", short_search.string()}, log));
    EXPECT_EQ(code, 2) << command << ": " << ReadFile(log);
    EXPECT_THAT(ReadFile(log), AllOf(HasSubstr((root / "run").string() + " is in use"),
                                     HasSubstr("process " + std::to_string(first) + " holds")))
        << command;
    // Refused before any work: no set-up, no search.
    EXPECT_THAT(ReadFile(log), Not(HasSubstr("[search] step"))) << command;
  }
  // The refusals left the first run's lock alone.
  EXPECT_EQ(ReadFile(root / "run" / ".lock"), std::to_string(first) + "\n");

  // Killed with -9, the first run leaves its lock file behind, unlocked by the kernel: the next
  // run takes it over, says so, and removes it when it ends.
  kill(first, SIGKILL);
  ASSERT_EQ(Wait(first), 128 + SIGKILL);
  ASSERT_EQ(ReadFile(root / "run" / ".lock"), std::to_string(first) + "\n");
  const int code =
      Wait(StartPlacer({"compare", "--config", short_search.string()}, root / "after.log"));
  const std::string after = ReadFile(root / "after.log");
  EXPECT_EQ(code, 0) << after;
  EXPECT_THAT(after, HasSubstr("took over " + (root / "run" / ".lock").string() +
                               ", left by process " + std::to_string(first)));
  EXPECT_FALSE(fs::exists(root / "run" / ".lock"));
  fs::remove_all(root);
}

TEST(RunLockTest, ACleanRunLeavesNoLockAndTheNextTakesNothingOver) {
  const fs::path root = TestRoot("placer_run_lock_clean_test");
  fs::remove_all(root);
  const fs::path config = WriteConfig(root, "short.yaml", 2);
  ASSERT_EQ(Wait(StartPlacer({"search", "--config", config.string()}, root / "first.log")), 0)
      << ReadFile(root / "first.log");
  EXPECT_FALSE(fs::exists(root / "run" / ".lock"));
  ASSERT_EQ(Wait(StartPlacer({"compare", "--config", config.string()}, root / "second.log")), 0)
      << ReadFile(root / "second.log");
  EXPECT_THAT(ReadFile(root / "second.log"), Not(HasSubstr("took over")));
  fs::remove_all(root);
}

}  // namespace
