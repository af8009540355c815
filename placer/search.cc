#include "placer/search.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/serialize/archive.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "proto/writers.h"

namespace placer::search {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Verdict {
  bool valid = false;
  double seconds = 0;
  std::string reason;
};

std::string KeyOf(const std::vector<int>& group_devices) {
  return std::string(group_devices.begin(), group_devices.end());
}

Verdict Judge(runtime::Evaluator& evaluator, const graph::Placement& placement) {
  try {
    runtime::EvaluationResult r = evaluator.Evaluate(placement);
    return {r.valid, r.step_seconds, r.invalid_reason};
  } catch (const std::exception& error) {  // an evaluator should not throw; if it does, go on
    return {false, 0, error.what()};
  }
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60) : fmt::format("{}s", s);
}

std::string Ms(double seconds) {
  return std::isfinite(seconds) ? fmt::format("{:.2f} ms", seconds * 1e3) : "-";
}

// Everything about a run that is not torch state, as JSON inside the checkpoint.
struct RunState {
  int step = 0;
  int evaluations = 0;
  double elapsed_seconds = 0;
  std::vector<int> best;
  double best_seconds = kInfinity;
  std::map<std::string, Verdict> cache;
  std::vector<CurvePoint> curve;
  int64_t csv_bytes = 0;
  // The grouping the policy's decisions (and the cache's keys) are about. Checkpoints written
  // before groupings were recorded have none: those searches placed one op per group.
  std::string grouping_name;
  std::string grouping_fingerprint;
  int groups = 0;

  nlohmann::json ToJson() const {
    nlohmann::json cache_json = nlohmann::json::array();
    for (const auto& [key, v] : cache) {
      cache_json.push_back({{"placement", std::vector<int>(key.begin(), key.end())},
                            {"valid", v.valid},
                            {"seconds", v.seconds},
                            {"reason", v.reason}});
    }
    nlohmann::json curve_json = nlohmann::json::array();
    for (const CurvePoint& p : curve) {
      curve_json.push_back({p.step, p.evaluations, p.wall_seconds,
                            std::isfinite(p.best_seconds) ? p.best_seconds : -1.0, p.mean_seconds});
    }
    return {{"step", step},
            {"evaluations", evaluations},
            {"elapsed_seconds", elapsed_seconds},
            {"best", best},
            {"best_seconds", std::isfinite(best_seconds) ? best_seconds : -1.0},
            {"cache", cache_json},
            {"curve", curve_json},
            {"csv_bytes", csv_bytes},
            {"grouping",
             {{"name", grouping_name}, {"fingerprint", grouping_fingerprint}, {"groups", groups}}}};
  }

  static RunState FromJson(const nlohmann::json& j) {
    RunState s;
    s.step = j.at("step");
    s.evaluations = j.at("evaluations");
    s.elapsed_seconds = j.at("elapsed_seconds");
    s.best = j.at("best").get<std::vector<int>>();
    double best = j.at("best_seconds");
    s.best_seconds = best < 0 ? kInfinity : best;
    for (const auto& entry : j.at("cache")) {
      std::vector<int> devices = entry.at("placement");
      s.cache[KeyOf(devices)] = {entry.at("valid"), entry.at("seconds"), entry.at("reason")};
    }
    for (const auto& p : j.at("curve")) {
      double b = p[3];
      s.curve.push_back({p[0], p[1], p[2], b < 0 ? kInfinity : b, p[4]});
    }
    s.csv_bytes = j.at("csv_bytes");
    if (j.contains("grouping")) {
      s.grouping_name = j.at("grouping").at("name");
      s.grouping_fingerprint = j.at("grouping").at("fingerprint");
      s.groups = j.at("grouping").at("groups");
    }
    return s;
  }
};

void SaveCheckpoint(const std::filesystem::path& file, const Reinforce& learner,
                    const RunState& state) {
  torch::serialize::OutputArchive archive;
  learner.Save(archive);
  archive.write("run_state", c10::IValue(state.ToJson().dump()));
  // Serialised in memory, then written by the one atomic writer: a full disk or an unwritable
  // directory is a clear error and leaves the previous checkpoint as it was.
  std::ostringstream bytes;
  archive.save_to(bytes);
  graph::WriteFileAtomically(file, bytes.str());
}

// Restores the learner and the run state, after checking that the checkpoint was written for
// `grouping` (named `grouping_name` in messages): the sampled device vectors, the cache and the
// policy all refer to groups, which mean other ops under another grouping.
RunState LoadCheckpoint(const std::filesystem::path& file, Reinforce& learner,
                        const graph::Graph& graph, const graph::Grouping& grouping,
                        const std::string& grouping_name) {
  auto corrupt = [&](const std::exception& error) {
    return std::runtime_error(fmt::format(
        "{}: cannot resume from this checkpoint (corrupt, or written for another config): {}",
        file.string(), error.what()));
  };
  torch::serialize::InputArchive archive;
  RunState state;
  try {
    archive.load_from(file.string());
    c10::IValue run_state;
    archive.read("run_state", run_state);
    state = RunState::FromJson(nlohmann::json::parse(run_state.toStringRef()));
  } catch (const std::exception& error) {
    throw corrupt(error);
  }
  const std::string fingerprint = graph::GroupingFingerprint(grouping);
  const bool legacy = state.grouping_fingerprint.empty();
  if (legacy ? fingerprint != graph::GroupingFingerprint(graph::OpPerGroup(graph))
             : fingerprint != state.grouping_fingerprint) {
    throw std::runtime_error(fmt::format(
        "{}: cannot resume: this search placed {} groups made by grouping '{}', the config now "
        "gives {} groups by grouping '{}'; resume with the search.grouping and search.max_groups "
        "(and model) it was started with, or choose another output.directory",
        file.string(),
        legacy ? static_cast<int>(graph.OpsInPhase(graph::Phase::kForward).size()) : state.groups,
        legacy ? "op" : state.grouping_name, grouping.num_groups(),
        grouping_name.empty() ? "unnamed" : grouping_name));
  }
  try {
    learner.Load(archive);
  } catch (const std::exception& error) {
    throw corrupt(error);
  }
  return state;
}

}  // namespace

void WriteBestPlacement(const std::filesystem::path& dir, const graph::Graph& graph,
                        const graph::Placement& placement, const std::string& model, double seconds,
                        const std::string& evaluator) {
  std::string yaml = fmt::format(
                         "# best placement found by placer search: {:.3f} ms per step ({})\n"
                         "model: {}\nstep_time_seconds: {}\n",
                         seconds * 1e3, evaluator, model, seconds) +
                     graph::PlacementToYaml(graph, placement);
  graph::WriteFileAtomically(dir / "best_placement.yaml", yaml);
  proto::WritePlacementProto(dir / "best_placement.pb", dir / "best_placement.pbtxt", graph,
                             placement, {model, seconds, evaluator});
}

SearchOutcome RunSearch(const graph::Graph& graph, const graph::Grouping& grouping,
                        runtime::Evaluator& evaluator, const std::vector<std::string>& devices,
                        const SearchOptions& o) {
  const graph::GroupFeatures features = graph::ComputeGroupFeatures(graph, grouping);
  Reinforce learner(features, static_cast<int>(devices.size()), o.policy, o.reinforce, o.seed);
  RunState state;
  state.grouping_name = o.grouping_name;
  state.grouping_fingerprint = graph::GroupingFingerprint(grouping);
  state.groups = grouping.num_groups();
  const bool writes = !o.run_dir.empty();
  const std::filesystem::path checkpoint = o.run_dir / "checkpoint.pt";
  const std::filesystem::path csv_path = o.run_dir / "search.csv";
  if (writes) {
    std::error_code error;
    std::filesystem::create_directories(o.run_dir, error);
    if (error) {
      throw std::runtime_error(fmt::format("cannot create the output directory {}: {}",
                                           o.run_dir.string(), error.message()));
    }
    if (o.resume) {
      if (!std::filesystem::exists(checkpoint)) {
        throw std::runtime_error(
            fmt::format("{}: no checkpoint to resume from", checkpoint.string()));
      }
      state = LoadCheckpoint(checkpoint, learner, graph, grouping, o.grouping_name);
      // From now on the checkpoint records this run's grouping (the same groups; a legacy
      // checkpoint gains the record).
      state.grouping_name = o.grouping_name;
      state.grouping_fingerprint = graph::GroupingFingerprint(grouping);
      state.groups = grouping.num_groups();
      // Rows logged after the checkpoint belong to steps that will be run again.
      if (std::filesystem::exists(csv_path)) {
        std::filesystem::resize_file(csv_path, static_cast<uintmax_t>(state.csv_bytes));
      }
    } else if (std::filesystem::exists(checkpoint)) {
      throw std::runtime_error(
          fmt::format("{} holds a search already: pass --resume to continue it, or choose another "
                      "output.directory",
                      o.run_dir.string()));
    } else {
      std::filesystem::remove(csv_path);
    }
  } else if (o.resume) {
    throw std::runtime_error("--resume needs an output directory");
  }

  std::ofstream csv;
  // The CSV is appended row by row; a failed write (full disk) must stop the run, not lose rows.
  auto check_csv = [&] {
    csv.flush();
    if (!csv) {
      throw std::runtime_error(fmt::format("cannot write {}: {}", csv_path.string(),
                                           std::strerror(errno != 0 ? errno : EIO)));
    }
  };
  std::unique_ptr<proto::TensorBoardWriter> tensorboard;
  if (writes) {
    bool fresh = !std::filesystem::exists(csv_path) || std::filesystem::file_size(csv_path) == 0;
    csv.open(csv_path, std::ios::app);
    if (!csv) throw std::runtime_error(fmt::format("cannot write {}", csv_path.string()));
    if (fresh) {
      csv << "step,sample,step_seconds,valid,reward,baseline,entropy,cached,reason\n";
      check_csv();
    }
    tensorboard = std::make_unique<proto::TensorBoardWriter>(o.run_dir);
  }

  const auto start = Clock::now();
  auto elapsed = [&] {
    return state.elapsed_seconds + std::chrono::duration<double>(Clock::now() - start).count();
  };
  auto checkpoint_now = [&] {
    if (!writes) return;
    check_csv();
    state.csv_bytes = static_cast<int64_t>(std::filesystem::file_size(csv_path));
    RunState snapshot = state;
    snapshot.elapsed_seconds = elapsed();
    SaveCheckpoint(checkpoint, learner, snapshot);
  };

  auto evaluate = [&](const std::vector<int>& sample, bool& was_cached) {
    const std::string key = KeyOf(sample);
    auto hit = o.cache ? state.cache.find(key) : state.cache.end();
    Verdict v;
    if (hit != state.cache.end()) {
      v = hit->second;
      was_cached = true;
    } else {
      v = Judge(evaluator, graph::ToPlacement(graph, grouping, sample, devices));
      ++state.evaluations;
      state.cache[key] = v;
      was_cached = false;
    }
    if (v.valid && v.seconds < state.best_seconds) {
      state.best_seconds = v.seconds;
      state.best = sample;
      if (writes) {
        WriteBestPlacement(o.run_dir, graph, graph::ToPlacement(graph, grouping, sample, devices),
                           o.model_name, v.seconds, evaluator.name());
      }
    }
    return v;
  };

  if (!o.resume && state.step == 0 && !o.warm_start.empty()) {
    const std::vector<int>* best_known = nullptr;
    double best_known_seconds = kInfinity;
    for (size_t k = 0; k < o.warm_start.size(); ++k) {
      bool was_cached = false;
      Verdict v = evaluate(o.warm_start[k], was_cached);
      if (v.valid && v.seconds < best_known_seconds) {
        best_known_seconds = v.seconds;
        best_known = &o.warm_start[k];
      }
      if (writes) {
        csv << fmt::format("-1,{},{:.6f},{},{:.6f},0,0,{},\"warm start{}{}\"\n", k,
                           v.valid ? v.seconds : 0.0, v.valid ? 1 : 0,
                           RewardOf(v.valid ? v.seconds : o.failing_step_seconds),
                           was_cached ? 1 : 0, v.valid ? "" : ": ", v.reason);
      }
    }
    if (best_known != nullptr) {
      learner.Imitate(*best_known, o.warm_start_probability, o.warm_start_max_steps);
    }
  }

  SearchOutcome outcome;
  while (state.step < o.policy_steps && state.evaluations < o.max_evaluations &&
         elapsed() < o.max_wall_seconds) {
    std::vector<std::vector<int>> samples = learner.Sample();
    std::vector<double> rewards;
    std::vector<Verdict> verdicts;
    std::vector<bool> cached;
    double mean_seconds = 0;
    for (const std::vector<int>& sample : samples) {
      bool was_cached = false;
      Verdict v = evaluate(sample, was_cached);
      cached.push_back(was_cached);
      double seconds = v.valid ? v.seconds : o.failing_step_seconds;
      rewards.push_back(RewardOf(seconds));
      mean_seconds += seconds / static_cast<double>(samples.size());
      verdicts.push_back(std::move(v));
    }
    const double baseline_before = learner.baseline();
    UpdateStats stats = learner.Update(rewards);
    if (writes) {
      for (size_t k = 0; k < samples.size(); ++k) {
        std::string reason = verdicts[k].reason;
        std::replace(reason.begin(), reason.end(), '"', '\'');
        csv << fmt::format("{},{},{:.6f},{},{:.6f},{:.6f},{:.5f},{},\"{}\"\n", state.step, k,
                           verdicts[k].valid ? verdicts[k].seconds : 0.0, verdicts[k].valid ? 1 : 0,
                           rewards[k], baseline_before, stats.mean_entropy, cached[k] ? 1 : 0,
                           reason);
      }
      check_csv();
      tensorboard->AddScalar("reward/mean", state.step, -std::sqrt(mean_seconds));
      tensorboard->AddScalar("step_time_ms/mean", state.step, mean_seconds * 1e3);
      if (std::isfinite(state.best_seconds)) {
        tensorboard->AddScalar("step_time_ms/best", state.step, state.best_seconds * 1e3);
      }
      tensorboard->AddScalar("policy/entropy", state.step, stats.mean_entropy);
      tensorboard->AddScalar("policy/baseline", state.step, stats.baseline);
    }
    ++state.step;
    state.curve.push_back(
        {state.step, state.evaluations, elapsed(), state.best_seconds, mean_seconds});
    if (o.progress) {
      double per_step = elapsed() / std::max(1, state.step);
      double eta =
          std::min({per_step * (o.policy_steps - state.step), o.max_wall_seconds - elapsed()});
      std::fprintf(stderr,
                   "%s[search] step %d/%d  evals %d/%d  best %s  mean %s  elapsed %s  ETA %s%s",
                   isatty(STDERR_FILENO) ? "\r\033[K" : "", state.step, o.policy_steps,
                   state.evaluations, o.max_evaluations, Ms(state.best_seconds).c_str(),
                   Ms(mean_seconds).c_str(), Duration(elapsed()).c_str(),
                   Duration(std::max(0.0, eta)).c_str(), isatty(STDERR_FILENO) ? "" : "\n");
      std::fflush(stderr);
    }
    if (o.checkpoint_every > 0 && state.step % o.checkpoint_every == 0) checkpoint_now();
    if (o.stop_requested != nullptr && o.stop_requested->load()) {
      outcome.interrupted = true;
      break;
    }
  }
  if (o.progress && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
  checkpoint_now();

  outcome.steps = state.step;
  outcome.evaluations = state.evaluations;
  outcome.wall_seconds = elapsed();
  outcome.curve = state.curve;
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [key, verdict] : state.cache) {
    if (verdict.valid) ranked.emplace_back(verdict.seconds, key);
  }
  std::sort(ranked.begin(), ranked.end());
  for (size_t i = 0; i < std::min<size_t>(3, ranked.size()); ++i) {
    outcome.top_candidates.emplace_back(ranked[i].second.begin(), ranked[i].second.end());
  }
  outcome.found_valid = std::isfinite(state.best_seconds);
  if (outcome.found_valid) {
    outcome.best_group_devices = state.best;
    outcome.best = graph::ToPlacement(graph, grouping, state.best, devices);
    outcome.best_seconds = state.best_seconds;
  }
  return outcome;
}

SearchOutcome RandomSearch(const graph::Graph& graph, const graph::Grouping& grouping,
                           runtime::Evaluator& evaluator, const std::vector<std::string>& devices,
                           int evaluations, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(devices.size()) - 1);
  const double space = std::pow(static_cast<double>(devices.size()), grouping.num_groups());
  const int budget = static_cast<int>(std::min<double>(evaluations, space));
  std::map<std::string, bool> seen;
  SearchOutcome outcome;
  outcome.best_seconds = kInfinity;
  const auto start = Clock::now();
  while (outcome.evaluations < budget) {
    std::vector<int> sample(static_cast<size_t>(grouping.num_groups()));
    for (int& device : sample) device = pick(rng);
    if (!seen.emplace(KeyOf(sample), true).second) continue;
    Verdict v = Judge(evaluator, graph::ToPlacement(graph, grouping, sample, devices));
    ++outcome.evaluations;
    if (v.valid && v.seconds < outcome.best_seconds) {
      outcome.best_seconds = v.seconds;
      outcome.best_group_devices = sample;
    }
    outcome.curve.push_back({outcome.evaluations, outcome.evaluations,
                             std::chrono::duration<double>(Clock::now() - start).count(),
                             outcome.best_seconds, v.valid ? v.seconds : 0.0});
  }
  outcome.found_valid = std::isfinite(outcome.best_seconds);
  if (outcome.found_valid) {
    outcome.best = graph::ToPlacement(graph, grouping, outcome.best_group_devices, devices);
  }
  outcome.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

}  // namespace placer::search
