// The `placer` command line: one subcommand per job, all driven by a YAML config.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands.h"
#include "graph/ir.h"
#include "placer/config/config.h"

int main(int argc, char** argv) {
  CLI::App app{"placer: learns on which device each op of a training step should run"};
  app.require_subcommand(1);
  placer::cli::Commands commands;
  placer::cli::RegisterCommands(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);  // --help exits 0, usage errors exit non-zero with the usage text
  }
  try {
    return commands.run();
  } catch (const placer::config::ConfigError& error) {
    std::cerr << "placer: error: " << error.what() << '\n';
    return placer::cli::kExitBadInput;
  } catch (const placer::cli::InputError& error) {
    std::cerr << "placer: error: " << error.what() << '\n';
    return placer::cli::kExitBadInput;
  } catch (const placer::graph::GraphError& error) {
    std::cerr << "placer: error: invalid model: " << error.what() << '\n';
    return placer::cli::kExitBadInput;
  } catch (const std::exception& error) {
    std::cerr << "placer: error: " << error.what() << '\n';
    return placer::cli::kExitFailure;
  }
}
