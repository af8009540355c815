// Kill -9 at any moment leaves the last checkpoint and every output readable, and --resume then
// ends exactly where an uninterrupted search ends. Real `placer search` processes, killed at
// random moments (simulated evaluator, so runs are deterministic and fast).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Starts `placer args...` with output to `log`; returns its pid.
pid_t Start(const std::vector<std::string>& args, const fs::path& log) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    FILE* err = std::freopen(log.c_str(), "a", stderr);
    (void)out;
    (void)err;
    std::vector<char*> argv;
    std::string binary = PLACER_BINARY;
    argv.push_back(binary.data());
    std::vector<std::string> copies = args;
    for (std::string& a : copies) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

fs::path WriteConfig(const fs::path& dir) {
  fs::create_directories(dir);
  fs::path config = dir / "search.yaml";
  std::ofstream(config) << "model:\n  builtin: lenet\n  replicas: 2\n"
                           "devices: [cpu:0, cpu:1]\n"
                           "search:\n  evaluator: simulated\n  policy_steps: 150\n"
                           "  max_evaluations: 100000\n  checkpoint_every: 3\n"
                           "output:\n  directory: run\n";
  return config;
}

TEST(KillResumeTest, TwentyRandomKillsThenResumeEndLikeAnUninterruptedRun) {
  fs::path root = fs::temp_directory_path() / "placer_kill_resume_test";
  fs::remove_all(root);
  fs::path reference = WriteConfig(root / "reference");
  ASSERT_EQ(Wait(Start({"search", "--config", reference.string()}, root / "reference.log")), 0)
      << ReadFile(root / "reference.log");
  const std::string expected_best = ReadFile(root / "reference" / "run" / "best_placement.yaml");
  const std::string expected_csv = ReadFile(root / "reference" / "run" / "search.csv");
  ASSERT_FALSE(expected_best.empty());

  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> delay_ms(30, 900);
  for (int trial = 0; trial < 20; ++trial) {
    fs::path dir = root / ("trial" + std::to_string(trial));
    fs::path config = WriteConfig(dir);
    pid_t pid = Start({"search", "--config", config.string()}, dir / "first.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    Wait(pid);
    fs::path run = dir / "run";
    // Whatever was written is whole: no temporary files left as outputs, the YAML parses.
    if (fs::exists(run / "best_placement.yaml")) {
      EXPECT_THAT(ReadFile(run / "best_placement.yaml"), ::testing::HasSubstr("placement:"));
    }
    // Resume (or start afresh when the kill came before the first checkpoint).
    std::vector<std::string> args = {"search", "--config", config.string()};
    if (fs::exists(run / "checkpoint.pt")) args.push_back("--resume");
    int code = Wait(Start(args, dir / "second.log"));
    ASSERT_EQ(code, 0) << "trial " << trial << ": " << ReadFile(dir / "second.log");
    EXPECT_EQ(ReadFile(run / "best_placement.yaml"), expected_best) << "trial " << trial;
    EXPECT_EQ(ReadFile(run / "search.csv"), expected_csv) << "trial " << trial;
  }
}

TEST(KillResumeTest, SigtermCheckpointsAndExitsThenResumeFinishes) {
  fs::path root = fs::temp_directory_path() / "placer_sigterm_test";
  fs::remove_all(root);
  fs::path config = WriteConfig(root);
  pid_t pid = Start({"search", "--config", config.string()}, root / "first.log");
  // Signal once the search loop runs (before that, start-up has written nothing to lose and the
  // handler is not installed yet); a loaded machine may take seconds to load LibTorch.
  for (int waited_ms = 0; waited_ms < 60000; waited_ms += 20) {
    if (ReadFile(root / "first.log").find("[search] step") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGTERM);
  int code = Wait(pid);
  if (code == 0) GTEST_SKIP() << "the search finished before the signal arrived";
  EXPECT_EQ(code, 128 + SIGTERM) << ReadFile(root / "first.log");
  EXPECT_THAT(ReadFile(root / "first.log"), ::testing::HasSubstr("--resume"));
  EXPECT_TRUE(fs::exists(root / "run" / "checkpoint.pt"));
  EXPECT_EQ(Wait(Start({"search", "--config", config.string(), "--resume"}, root / "second.log")),
            0)
      << ReadFile(root / "second.log");
}

}  // namespace
