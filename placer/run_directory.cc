#include "placer/run_directory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/serialize/archive.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string_view>

#include "proto/writers.h"

namespace placer::search {
namespace {

// A checkpoint is LibTorch's archive behind one line with its length and CRC-32: LibTorch reads
// an archive with flipped bytes in a tensor without complaint, and a resumed search would go on
// from damaged weights.
constexpr std::string_view kChecksumTag = "placer-checkpoint";

std::string WithChecksum(const std::string& payload) {
  const uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size()));
  return fmt::format("{} {} {:08x}\n", kChecksumTag, payload.size(), crc) + payload;
}

// The archive of a checkpoint file, checked against its length and CRC-32; throws
// std::runtime_error saying what does not match.
std::string CheckedPayload(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open: {}", std::strerror(errno)));
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  const size_t end = bytes.find('\n');
  std::istringstream header(bytes.substr(0, end == std::string::npos ? 0 : end));
  std::string tag;
  size_t size = 0;
  uLong expected = 0;
  if (!(header >> tag >> size >> std::hex >> expected) || tag != kChecksumTag) {
    throw std::runtime_error("no checksum line (not a checkpoint of this version)");
  }
  std::string payload = bytes.substr(end + 1);
  if (payload.size() != size) {
    throw std::runtime_error(
        fmt::format("{} bytes where {} were written (truncated?)", payload.size(), size));
  }
  const uLong actual =
      crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size()));
  if (actual != expected) {
    throw std::runtime_error(fmt::format(
        "checksum {:08x} where {:08x} was written (damaged on disk)", actual, expected));
  }
  return payload;
}

constexpr char kCsvHeader[] =
    "step,phase,sample,step_seconds,valid,reward,cached,origin,candidate,reason";

std::string Quoted(std::string text) {
  std::replace(text.begin(), text.end(), '"', '\'');
  std::replace(text.begin(), text.end(), '\n', ' ');
  return "\"" + text + "\"";
}

// The fields of one line of our own log: commas split, double quotes group (no escapes: Quoted
// never writes a quote inside a field).
std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  return fields;
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  auto s = static_cast<int64_t>(seconds + 0.5);
  return s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60) : fmt::format("{}s", s);
}

std::string Ms(double seconds) {
  return std::isfinite(seconds) ? fmt::format("{:.3f} ms", seconds * 1e3) : "-";
}

// "model 'lenet' became 'nmt'; devices [a, b] became [a]" for every field that differs.
std::string Differences(const RunIdentity& saved, const RunIdentity& now) {
  std::vector<std::string> parts;
  if (saved.model != now.model) {
    parts.push_back(
        fmt::format("the model was '{}', the config now gives '{}'", saved.model, now.model));
  }
  if (saved.grouping_fingerprint != now.grouping_fingerprint || saved.groups != now.groups) {
    parts.push_back(fmt::format(
        "this search placed {} groups made by grouping '{}', the config now gives {} groups by "
        "grouping '{}'",
        saved.groups, saved.grouping_name, now.groups, now.grouping_name));
  }
  if (saved.devices != now.devices) {
    parts.push_back(fmt::format("the devices were [{}], the config now gives [{}]",
                                fmt::join(saved.devices, ", "), fmt::join(now.devices, ", ")));
  }
  if (saved.replica_counts != now.replica_counts) {
    parts.push_back(fmt::format("the replica counts were [{}], now [{}]",
                                fmt::join(saved.replica_counts, ", "),
                                fmt::join(now.replica_counts, ", ")));
  }
  if (saved.micro_batch_counts != now.micro_batch_counts) {
    parts.push_back(fmt::format("the micro-batch counts were [{}], now [{}]",
                                fmt::join(saved.micro_batch_counts, ", "),
                                fmt::join(now.micro_batch_counts, ", ")));
  }
  if (saved.replicated_pipelines != now.replicated_pipelines) {
    parts.push_back(fmt::format("the replicated pipelines were [{}], now [{}]",
                                fmt::join(saved.replicated_pipelines, ", "),
                                fmt::join(now.replicated_pipelines, ", ")));
  }
  if (saved.tensor_parallel != now.tensor_parallel) {
    parts.push_back(fmt::format("the tensor-parallel shapes were [{}], now [{}]",
                                fmt::join(saved.tensor_parallel, ", "),
                                fmt::join(now.tensor_parallel, ", ")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

nlohmann::json RunIdentity::ToJson() const {
  return {{"model", model},
          {"grouping_name", grouping_name},
          {"fingerprint", grouping_fingerprint},
          {"groups", groups},
          {"devices", devices},
          {"replica_counts", replica_counts},
          {"micro_batch_counts", micro_batch_counts},
          {"replicated_pipelines", replicated_pipelines},
          {"tensor_parallel", tensor_parallel}};
}

RunIdentity RunIdentity::FromJson(const nlohmann::json& j) {
  return {j.at("model"),
          j.at("grouping_name"),
          j.at("fingerprint"),
          j.at("groups"),
          j.at("devices").get<std::vector<std::string>>(),
          j.at("replica_counts").get<std::vector<int>>(),
          j.value("micro_batch_counts", std::vector<int>{1}),
          j.value("replicated_pipelines", std::vector<std::string>{}),
          j.value("tensor_parallel", std::vector<std::string>{})};
}

void WriteBestPlacement(const std::filesystem::path& dir, const graph::Graph& graph,
                        const graph::Placement& placement, const Candidate& candidate,
                        const std::string& model, double step_seconds,
                        const std::string& evaluator) {
  const int replicas = candidate.replicas / candidate.tensor_ways;
  // As the log keeps it: the search's checkpoints and its final, side-by-side verdict then write
  // the same file for the same answer.
  const double seconds = AsLogged(step_seconds);
  std::string yaml = fmt::format(
                         "# best placement found by placer search: {:.3f} ms per step ({})\n"
                         "model: {}\nstep_time_seconds: {}\n",
                         seconds * 1e3, evaluator, model, seconds) +
                     graph::PlacementToYaml(graph, placement, replicas, candidate.tensor_ways);
  graph::WriteFileAtomically(dir / "best_placement.yaml", yaml);
  proto::WritePlacementProto(dir / "best_placement.pb", dir / "best_placement.pbtxt", graph,
                             placement,
                             {model, seconds, evaluator, replicas, candidate.tensor_ways});
}

RunDirectory::RunDirectory(std::filesystem::path dir, bool resume, RunIdentity identity,
                           const CandidateEvaluator* evaluator, bool progress)
    : dir_(std::move(dir)),
      resume_(resume),
      identity_(std::move(identity)),
      evaluator_(evaluator),
      progress_(progress) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) {
    throw std::runtime_error(
        fmt::format("cannot create the output directory {}: {}", dir_.string(), error.message()));
  }
  CheckUsable(dir_, resume_);
  if (!resume_) {
    std::filesystem::remove(dir_ / "search.csv");
    csv_.open(dir_ / "search.csv", std::ios::app);
    csv_ << kCsvHeader << '\n';
    CheckLog();
    tensorboard_ = std::make_unique<proto::TensorBoardWriter>(dir_);
  }
}

RunDirectory::~RunDirectory() = default;

void RunDirectory::CheckUsable(const std::filesystem::path& dir, bool resume) {
  const std::filesystem::path checkpoint = dir / "checkpoint.pt";
  if (resume && !std::filesystem::exists(checkpoint)) {
    throw RunDirectoryError(fmt::format("{}: no checkpoint to resume from", checkpoint.string()));
  }
  if (!resume && std::filesystem::exists(checkpoint)) {
    throw RunDirectoryError(
        fmt::format("{} holds a search already: pass --resume to continue it, or choose another "
                    "output.directory",
                    dir.string()));
  }
}

void RunDirectory::CheckLog() {
  // The log is appended row by row; a failed write (full disk) must stop the run, not lose rows.
  csv_.flush();
  if (!csv_) {
    throw std::runtime_error(fmt::format("cannot write {}: {}", (dir_ / "search.csv").string(),
                                         std::strerror(errno != 0 ? errno : EIO)));
  }
}

RunDirectory::Resumed RunDirectory::Resume(Learner& learner) {
  const std::filesystem::path file = dir_ / "checkpoint.pt";
  auto corrupt = [&](const std::exception& error) {
    return RunDirectoryError(fmt::format(
        "{}: cannot resume from this checkpoint (corrupt, or written by another version): {}",
        file.string(), error.what()));
  };
  torch::serialize::InputArchive archive;
  nlohmann::json saved;
  try {
    std::istringstream zip(CheckedPayload(file));
    archive.load_from(zip);
    c10::IValue run_state;
    archive.read("run_state", run_state);
    saved = nlohmann::json::parse(run_state.toStringRef());
  } catch (const std::exception& error) {
    throw corrupt(error);
  }
  RunIdentity identity;
  try {
    identity = RunIdentity::FromJson(saved.at("identity"));
  } catch (const std::exception& error) {
    throw corrupt(error);
  }
  if (const std::string differences = Differences(identity, identity_); !differences.empty()) {
    throw RunDirectoryError(fmt::format(
        "{}: cannot resume: {}; resume with the config the search was started with, or choose "
        "another output.directory",
        file.string(), differences));
  }
  try {
    learner.Load(archive);
  } catch (const std::exception& error) {
    throw corrupt(error);
  }
  // Rows logged after the checkpoint belong to work that will be done again.
  const std::filesystem::path csv_path = dir_ / "search.csv";
  const auto csv_bytes = saved.at("csv_bytes").get<uintmax_t>();
  if (!std::filesystem::exists(csv_path) || std::filesystem::file_size(csv_path) < csv_bytes) {
    throw RunDirectoryError(
        fmt::format("{}: shorter than the checkpoint says ({} bytes); the "
                    "log of this run was lost or truncated",
                    csv_path.string(), csv_bytes));
  }
  std::filesystem::resize_file(csv_path, csv_bytes);
  Resumed resumed{saved.at("state"), {}};
  std::ifstream in(csv_path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const std::vector<std::string> f = SplitCsv(line);
    if (f.size() != 10) {
      throw RunDirectoryError(fmt::format("{}: a row of {} fields, 10 expected: {}",
                                          csv_path.string(), f.size(), line));
    }
    LogRow row;
    try {
      row.step = std::stoi(f[0]);
      row.phase = f[1];
      row.sample = std::stoi(f[2]);
      row.seconds = std::stod(f[3]);
      row.valid = f[4] == "1";
      row.reward = std::stod(f[5]);
      row.cached = f[6] == "1";
      row.origin = f[7];
      row.candidate = ParseCandidate(f[8]);
      row.reason = f[9];
    } catch (const std::exception& error) {
      throw RunDirectoryError(
          fmt::format("{}: a malformed row ({}): {}", csv_path.string(), error.what(), line));
    }
    resumed.rows.push_back(std::move(row));
  }
  csv_.open(csv_path, std::ios::app);
  CheckLog();
  tensorboard_ = std::make_unique<proto::TensorBoardWriter>(dir_);
  return resumed;
}

void RunDirectory::Log(const LogRow& row) {
  csv_ << fmt::format("{},{},{},{:.{}f},{},{:.6f},{},{},{},{}\n", row.step, row.phase, row.sample,
                      row.valid ? row.seconds : 0.0, kLoggedSecondsDigits, row.valid ? 1 : 0,
                      row.reward, row.cached ? 1 : 0, Quoted(row.origin),
                      Quoted(FormatCandidate(row.candidate)), Quoted(row.reason));
}

void RunDirectory::StepDone(const StepReport& r) {
  CheckLog();
  tensorboard_->AddScalar("reward/mean", r.report, -std::sqrt(r.mean_seconds));
  tensorboard_->AddScalar("step_time_ms/mean", r.report, r.mean_seconds * 1e3);
  if (std::isfinite(r.best_seconds)) {
    tensorboard_->AddScalar("step_time_ms/best", r.report, r.best_seconds * 1e3);
  }
  if (r.phase == "policy") {
    tensorboard_->AddScalar("policy/entropy", r.report, r.entropy);
    tensorboard_->AddScalar("policy/clipped_fraction", r.report, r.clipped_fraction);
  }
  tensorboard_->AddScalar("search/evaluations", r.report, r.evaluations);
  if (!progress_) return;
  const double per_step = r.wall_seconds / std::max(1, r.step);
  const double eta =
      std::min(per_step * (r.max_steps - r.step), r.max_wall_seconds - r.wall_seconds);
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::fprintf(
      stderr, "%s[search] step %d/%d  evals %d  best %s  mean %s  %s  elapsed %s  ETA %s%s",
      tty ? "\r\033[K" : "", r.step, r.max_steps, r.evaluations, Ms(r.best_seconds).c_str(),
      Ms(r.mean_seconds).c_str(), r.phase.c_str(), Duration(r.wall_seconds).c_str(),
      Duration(std::max(0.0, eta)).c_str(), tty ? "" : "\n");
  std::fflush(stderr);
}

void RunDirectory::EndProgress() {
  if (progress_ && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
}

void RunDirectory::Checkpoint(const Learner& learner, nlohmann::json state,
                              const std::optional<RankedCandidate>& best) {
  CheckLog();
  if (best && KeyOf(best->candidate) != best_written_) {
    const ReplicatedModel& model = evaluator_->model(best->candidate);
    WriteBestPlacement(dir_, model.graph, evaluator_->PlacementOf(best->candidate), best->candidate,
                       identity_.model, best->seconds, evaluator_->name());
    best_written_ = KeyOf(best->candidate);
  }
  nlohmann::json saved = {{"identity", identity_.ToJson()},
                          {"state", std::move(state)},
                          {"csv_bytes", std::filesystem::file_size(dir_ / "search.csv")}};
  torch::serialize::OutputArchive archive;
  learner.Save(archive);
  archive.write("run_state", c10::IValue(saved.dump()));
  // Serialised in memory, then written by the one atomic writer: a full disk or an unwritable
  // directory is a clear error and leaves the previous checkpoint as it was.
  std::ostringstream bytes;
  archive.save_to(bytes);
  graph::WriteFileAtomically(dir_ / "checkpoint.pt", WithChecksum(bytes.str()));
}

}  // namespace placer::search
