// Kill -9 at any moment leaves the last checkpoint and every output readable, and --resume then
// ends exactly where an uninterrupted search ends. Real `placer search` processes, killed at
// random moments (simulated evaluator, so runs are deterministic and fast).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Starts `placer args...` with output to `log`; returns its pid. `max_file_bytes` > 0 caps the
// size of every file the process writes (RLIMIT_FSIZE, SIGXFSZ ignored): writes beyond it fail
// with EFBIG exactly where a full disk fails with ENOSPC.
pid_t Start(const std::vector<std::string>& args, const fs::path& log, rlim_t max_file_bytes = 0) {
  pid_t pid = fork();
  if (pid == 0) {
    if (max_file_bytes > 0) {
      signal(SIGXFSZ, SIG_IGN);  // an ignored signal stays ignored across exec
      rlimit limit{max_file_bytes, max_file_bytes};
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    // Both in append mode: with separate offsets, stdout's buffered lines would overwrite what
    // stderr wrote meanwhile.
    ::unlink(log.c_str());
    FILE* out = std::freopen(log.c_str(), "a", stdout);
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

// A directory of this test process's own: two runs of the suite at once (CI and a developer's
// sanitizer build did) must not delete each other's runs.
fs::path TestRoot(const std::string& name) {
  return fs::temp_directory_path() / (name + "." + std::to_string(getpid()));
}

fs::path WriteConfig(const fs::path& dir, int policy_steps = 30) {
  fs::create_directories(dir);
  fs::path config = dir / "search.yaml";
  // Budgets in steps and rounds, never reached in wall time: the run is deterministic.
  std::ofstream(config) << "model:\n  builtin: lenet\n"
                           "devices: [cpu:0, cpu:1]\n"
                           "search:\n  evaluator: simulated\n  policy_steps: "
                        << policy_steps
                        << "\n"
                           "  samples_per_step: 16\n  refinement_rounds: 30\n"
                           "  max_wall_seconds: 3600\n  checkpoint_every: 3\n"
                           "output:\n  directory: run\n";
  return config;
}

TEST(KillResumeTest, TwentyRandomKillsThenResumeEndLikeAnUninterruptedRun) {
  fs::path root = TestRoot("placer_kill_resume_test");
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
  fs::path root = TestRoot("placer_sigterm_test");
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

// Every file of a directory and its contents.
std::map<std::string, std::string> Snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadFile(entry.path());
  }
  return files;
}

TEST(FaultsTest, AFullDiskStopsTheSearchWithAClearErrorAndKeepsEveryEarlierOutput) {
  fs::path root = TestRoot("placer_full_disk_test");
  fs::remove_all(root);
  fs::path config = WriteConfig(root, /*policy_steps=*/6);
  ASSERT_EQ(Wait(Start({"search", "--config", config.string()}, root / "first.log")), 0)
      << ReadFile(root / "first.log");
  const auto before = Snapshot(root / "run");
  // Room for the logs and the CSV, not for the checkpoint that resuming rewrites.
  const size_t room = before.at("checkpoint.pt").size() / 2;
  ASSERT_GT(room, 4 * before.at("search.csv").size());
  const int code =
      Wait(Start({"search", "--config", config.string(), "--resume"}, root / "full.log", room));
  const std::string log = ReadFile(root / "full.log");
  EXPECT_TRUE(code == 1 || code == 2) << "exit " << code << ": " << log;
  EXPECT_THAT(log, ::testing::AllOf(::testing::HasSubstr("cannot write"),
                                    ::testing::HasSubstr("checkpoint.pt"),
                                    ::testing::HasSubstr("File too large")));
  // Nothing written before is damaged, and no temporary file is left behind. (The resumed run
  // may add its own TensorBoard event file.)
  const auto after = Snapshot(root / "run");
  for (const auto& [name, contents] : before) {
    ASSERT_TRUE(after.count(name)) << name << " disappeared";
    EXPECT_EQ(after.at(name), contents) << name << " changed";
  }
  for (const auto& [name, contents] : after) {
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name << " left behind";
  }
  // With space again, the same checkpoint resumes.
  EXPECT_EQ(Wait(Start({"search", "--config", config.string(), "--resume"}, root / "again.log")), 0)
      << ReadFile(root / "again.log");
}

TEST(FaultsTest, AnOutputDirectoryThatCannotBeCreatedIsAClearErrorBeforeAnyWork) {
  fs::path root = TestRoot("placer_unwritable_test");
  fs::remove_all(root);
  fs::create_directories(root);
  std::ofstream(root / "blocker") << "a file where the output directory should go\n";
  fs::path config = root / "search.yaml";
  std::ofstream(config) << "model: {builtin: lenet, batch_size: 16}\n"
                           "devices: [cpu:0, cpu:1]\n"
                           "search: {evaluator: simulated, policy_steps: 3}\n"
                           "output: {directory: blocker/run}\n";
  const int code = Wait(Start({"search", "--config", config.string()}, root / "log"));
  const std::string log = ReadFile(root / "log");
  EXPECT_TRUE(code == 1 || code == 2) << "exit " << code << ": " << log;
  EXPECT_THAT(log, ::testing::AllOf(::testing::HasSubstr("cannot create the output directory"),
                                    ::testing::HasSubstr("blocker/run"),
                                    ::testing::HasSubstr("Not a directory")));
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("[search] step")));
}

}  // namespace
