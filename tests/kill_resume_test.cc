// Kill -9 at any moment leaves the last checkpoint and every output readable, and --resume then
// ends exactly where an uninterrupted search ends. Real `placer search` processes, killed at
// random moments (simulated evaluator, so runs are deterministic and fast).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "tests/placer_process.h"

namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

using placer_test::DropPermissionOverride;
using placer_test::Wait;

pid_t Start(const std::vector<std::string>& args, const fs::path& log,
            const placer_test::ChildOptions& options = {}) {
  return placer_test::StartPlacer(args, log, options);
}

using Clock = std::chrono::steady_clock;

// Waits until `log` holds `text`; false when the process ended first (or five minutes passed: a
// loaded machine may take seconds to load LibTorch and minutes to reach a late step).
bool WaitForLine(pid_t pid, const fs::path& log, const std::string& text) {
  for (auto start = Clock::now(); Clock::now() - start < std::chrono::minutes(5);) {
    std::ifstream in(log);
    const std::string contents{std::istreambuf_iterator<char>(in), {}};
    if (contents.find(text) != std::string::npos) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// The search loop has begun once its progress line shows.
constexpr const char* kSearching = "[search] step";

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

  // Each kill lands a random moment after a random one of the first 20 of 30 policy steps was
  // reported: counted in steps, not in a wall time measured once, a kill lands inside the search
  // however the load of a shared machine changes between runs (a time window taken from one run
  // had let a faster later run finish before its kill). 50 ms is under two steps on this
  // project's machines (30 steps took about a second on an idle one, 2026-12-04), and the steps
  // between kills and checkpoints (every 3) vary. A kill that still comes after the search finished
  // (at step 25 with 100 ms, one did on an idle machine: "search done", then killed while writing
  // its files) tests nothing: that draw is repeated, at most 5 times in all.
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> kill_after_step(1, 20);
  std::uniform_int_distribution<int> delay_ms(0, 50);
  int resumed_from_checkpoint = 0;
  int too_late = 0;
  for (int trial = 0; trial < 20; ++trial) {
    fs::path dir = root / ("trial" + std::to_string(trial) + "_" + std::to_string(too_late));
    fs::path config = WriteConfig(dir);
    pid_t pid = Start({"search", "--config", config.string()}, dir / "first.log");
    const std::string step_line =
        std::string(kSearching) + " " + std::to_string(kill_after_step(rng)) + "/30 ";
    ASSERT_TRUE(WaitForLine(pid, dir / "first.log", step_line)) << ReadFile(dir / "first.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    kill(pid, SIGKILL);
    const int first_exit = Wait(pid);
    if (first_exit != 128 + SIGKILL ||
        ReadFile(dir / "first.log").find("search done") != std::string::npos) {
      // The search had finished before the kill: draw again.
      ++too_late;
      ASSERT_LE(too_late, 5) << "trial " << trial << " finished before the kill (exit "
                             << first_exit << "): " << ReadFile(dir / "first.log");
      --trial;
      continue;
    }
    fs::path run = dir / "run";
    // Whatever was written is whole: no temporary files left as outputs, the YAML parses.
    if (fs::exists(run / "best_placement.yaml")) {
      EXPECT_THAT(ReadFile(run / "best_placement.yaml"), ::testing::HasSubstr("placement:"));
    }
    // Resume (or start afresh when the kill came before the first checkpoint).
    std::vector<std::string> args = {"search", "--config", config.string()};
    if (fs::exists(run / "checkpoint.pt")) {
      args.push_back("--resume");
      ++resumed_from_checkpoint;
    }
    int code = Wait(Start(args, dir / "second.log"));
    ASSERT_EQ(code, 0) << "trial " << trial << ": " << ReadFile(dir / "second.log");
    EXPECT_EQ(ReadFile(run / "best_placement.yaml"), expected_best) << "trial " << trial;
    EXPECT_EQ(ReadFile(run / "search.csv"), expected_csv) << "trial " << trial;
  }
  // Most kills came after a checkpoint (every 3 of 30 steps): resuming is what was tested.
  EXPECT_GE(resumed_from_checkpoint, 10);
  fs::remove_all(root);
}

TEST(KillResumeTest, SigtermCheckpointsAndExitsThenResumeFinishes) {
  fs::path root = TestRoot("placer_sigterm_test");
  fs::remove_all(root);
  fs::path config = WriteConfig(root);
  pid_t pid = Start({"search", "--config", config.string()}, root / "first.log");
  // Signal once the search loop runs (before that, start-up has written nothing to lose and the
  // handler is not installed yet): the first of 30 steps has just been reported, so the search
  // cannot have finished, and exiting 0 would mean the signal was ignored.
  ASSERT_TRUE(WaitForLine(pid, root / "first.log", kSearching)) << ReadFile(root / "first.log");
  kill(pid, SIGTERM);
  EXPECT_EQ(Wait(pid), 128 + SIGTERM) << ReadFile(root / "first.log");
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
  const int code = Wait(Start({"search", "--config", config.string(), "--resume"},
                              root / "full.log", {.max_file_bytes = room}));
  const std::string log = ReadFile(root / "full.log");
  EXPECT_EQ(code, 1) << "a full disk is a failed run, not bad input: " << log;
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

// A checkpoint damaged on disk (cut short, or one byte flipped) is refused, naming the file, as
// bad input; nothing in the run directory is touched, and the intact checkpoint resumes.
TEST(FaultsTest, ATruncatedOrBitFlippedCheckpointIsRefusedNamingItAndNothingIsOverwritten) {
  fs::path root = TestRoot("placer_damaged_checkpoint_test");
  fs::remove_all(root);
  fs::path config = WriteConfig(root, /*policy_steps=*/6);
  ASSERT_EQ(Wait(Start({"search", "--config", config.string()}, root / "first.log")), 0)
      << ReadFile(root / "first.log");
  const fs::path checkpoint = root / "run" / "checkpoint.pt";
  const std::string intact = ReadFile(checkpoint);
  ASSERT_GT(intact.size(), 1000u);
  std::string flipped = intact;
  for (size_t at : {flipped.size() / 3, flipped.size() / 2, 2 * flipped.size() / 3}) {
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
  }
  const std::map<std::string, std::string> damages = {
      {"truncated", intact.substr(0, intact.size() / 2)}, {"bit-flipped", flipped}};
  for (const auto& [damage, bytes] : damages) {
    std::ofstream(checkpoint, std::ios::binary | std::ios::trunc) << bytes;
    const auto before = Snapshot(root / "run");
    const int code =
        Wait(Start({"search", "--config", config.string(), "--resume"}, root / (damage + ".log")));
    const std::string log = ReadFile(root / (damage + ".log"));
    EXPECT_EQ(code, 2) << damage << ": " << log;
    EXPECT_THAT(log, ::testing::HasSubstr(checkpoint.string() + ": cannot resume")) << damage;
    EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("[search] step"))) << damage;
    EXPECT_EQ(Snapshot(root / "run"), before) << damage << ": the run directory changed";
  }
  std::ofstream(checkpoint, std::ios::binary | std::ios::trunc) << intact;
  EXPECT_EQ(Wait(Start({"search", "--config", config.string(), "--resume"}, root / "again.log")), 0)
      << ReadFile(root / "again.log");
  fs::remove_all(root);
}

// `placer compare` killed while its searches run, then run again into the same directory: the
// second run starts afresh (compare keeps no state to resume) and writes whole reports.
TEST(FaultsTest, CompareKilledMidRunThenRunAgainWritesWholeReports) {
  fs::path root = TestRoot("placer_compare_kill_test");
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path config = root / "compare.yaml";
  std::ofstream(config) << "model: {builtin: lenet, batch_size: 16}\n"
                           "devices: [cpu:0, cpu:1]\n"
                           "search: {evaluator: simulated, policy_steps: 4, samples_per_step: 8,\n"
                           "         refinement_rounds: 3, max_wall_seconds: 600}\n"
                           "output: {directory: run}\n";
  const pid_t pid = Start({"compare", "--config", config.string()}, root / "first.log");
  ASSERT_TRUE(WaitForLine(pid, root / "first.log", "search: policy and refinement"))
      << ReadFile(root / "first.log");
  kill(pid, SIGKILL);
  ASSERT_EQ(Wait(pid), 128 + SIGKILL) << ReadFile(root / "first.log");
  EXPECT_FALSE(fs::exists(root / "run" / "report.md"));

  ASSERT_EQ(Wait(Start({"compare", "--config", config.string()}, root / "second.log")), 0)
      << ReadFile(root / "second.log");
  EXPECT_THAT(ReadFile(root / "run" / "report.md"), ::testing::HasSubstr("learned"));
  EXPECT_THAT(ReadFile(root / "run" / "report.json"), ::testing::EndsWith("\n"));
  for (const auto& [name, contents] : Snapshot(root / "run")) {
    EXPECT_EQ(name.find(".tmp."), std::string::npos) << name << " left behind";
  }
  fs::remove_all(root);
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
  EXPECT_EQ(code, 1) << "an unwritable disk is a failed run, not bad input: " << log;
  EXPECT_THAT(log, ::testing::AllOf(::testing::HasSubstr("cannot create the output directory"),
                                    ::testing::HasSubstr("blocker/run"),
                                    ::testing::HasSubstr("Not a directory")));
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("[search] step")));
}

TEST(FaultsTest, AReadOnlyOutputDirectoryIsAClearErrorBeforeTheSearchAndLeavesItUntouched) {
  fs::path root = TestRoot("placer_read_only_test");
  fs::remove_all(root);
  fs::create_directories(root / "run");
  std::ofstream(root / "run" / "notes.txt") << "the user's own file\n";
  fs::permissions(root / "run", fs::perms::owner_read | fs::perms::owner_exec |
                                    fs::perms::group_read | fs::perms::group_exec |
                                    fs::perms::others_read | fs::perms::others_exec);
  // The condition holds before it is tested: a program started as placer is cannot write there
  // (the bounding set binds what a process executes, hence touch(1)).
  const std::string probe_file = (root / "run" / "probe").string();
  if (const pid_t probe = fork(); probe == 0) {
    DropPermissionOverride();
    execl("/usr/bin/touch", "touch", probe_file.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  } else if (Wait(probe) != 1) {
    fs::remove(root / "run" / "probe");
    fs::permissions(root / "run", fs::perms::owner_all);
    fs::remove_all(root);
    GTEST_SKIP() << "this process may write into a read-only directory (root without "
                    "CAP_SETPCAP to drop CAP_DAC_OVERRIDE): the fault cannot be made here";
  }
  fs::path config = root / "search.yaml";
  std::ofstream(config) << "model: {builtin: lenet, batch_size: 16}\n"
                           "devices: [cpu:0, cpu:1]\n"
                           "search: {evaluator: simulated, policy_steps: 3}\n"
                           "output: {directory: run}\n";
  const int code = Wait(
      Start({"search", "--config", config.string()}, root / "log", {.obey_permissions = true}));
  const std::string log = ReadFile(root / "log");
  EXPECT_EQ(code, 1) << "an unwritable directory is a failed run, not bad input: " << log;
  EXPECT_THAT(log, ::testing::AllOf(::testing::HasSubstr("cannot write"),
                                    ::testing::HasSubstr((root / "run").string()),
                                    ::testing::HasSubstr("Permission denied")));
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("[search] step")));
  EXPECT_EQ(Snapshot(root / "run"),
            (std::map<std::string, std::string>{{"notes.txt", "the user's own file\n"}}));
  fs::permissions(root / "run", fs::perms::owner_all);
  fs::remove_all(root);
}

}  // namespace
