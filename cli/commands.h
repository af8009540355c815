// Subcommands of `placer`. Each reads its config, does its job and returns an exit code; bad
// input surfaces as an exception that main() turns into a message and exit code 2.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "placer/setup/input_error.h"

namespace CLI {
class App;
}

namespace placer::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

using setup::InputError;

struct Commands {
  std::function<int()> run;  // set by the chosen subcommand's callback
  std::string config_path;
  std::string placement_path;
  std::string trace_path;
  std::string device;
  bool data_parallel = false;
  bool resume = false;
  bool simulate = false;
  bool predict_only = false;  // predict: simulate, never measure
  std::string output_path;
  std::string output_directory;  // search, compare: instead of the config's output.directory
  int epochs = 10;
  int max_steps = 0;
  // worker: the rendezvous, as torchrun's MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (flags win
  // over the environment)
  std::string master_addr, master_port, world_size, rank;
  double worker_timeout_seconds = 300;
  std::string key_file;  // worker: the search's cluster key (else PLACER_CLUSTER_KEY[_FILE])
  // pretrain: where, and how much (the rest of setup::PretrainOptions keeps its defaults)
  std::string pretrain_directory = "runs/pretrain";
  int pretrain_iterations = 3, pretrain_problems = 30, pretrain_rounds = 12;
  uint64_t pretrain_seed = 1;
};

void RegisterCommands(CLI::App& app, Commands& commands);

}  // namespace placer::cli
