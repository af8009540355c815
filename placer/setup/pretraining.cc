#include "placer/setup/pretraining.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>

#include "placer/baselines/baselines.h"
#include "placer/refiner.h"
#include "placer/setup/portable_float.h"
#include "placer/setup/pretraining_progress.h"
#include "placer/setup/simulated_problem.h"
#include "runtime/sim/cost_model.h"

namespace placer::setup {

namespace {

constexpr const char* kSamplesFile = "samples.bin";
constexpr const char* kStateFile = "state.txt";

uint64_t Mix(uint64_t a, uint64_t b) { return (a * 0x9e3779b97f4a7c15ull) ^ (b + 0x7f4a7c15ull); }

// The options fingerprint a resumed run must match.
std::string Fingerprint(const PretrainOptions& o) {
  std::string counts;
  for (int d : o.device_counts) counts += std::to_string(d) + ",";
  if (o.batches.size() != 1 || o.batches.front() != 64) {
    counts += " batches ";
    for (int64_t b : o.batches) counts += std::to_string(b) + ",";
  }
  return fmt::format(
      "features {} problems {} rounds {} blocks {}-{} devices {} groups {} epochs {} batch {} "
      "validation {} seed {} hidden {} lr {}",
      search::kEditFeatureVersion, o.problems_per_iteration, o.refine_rounds, o.min_blocks,
      o.max_blocks, counts, o.max_groups, o.epochs, o.batch, o.validation_share, o.seed,
      o.model.hidden, o.model.learning_rate);
}

// Samples with the rounds they came from ([begin, end) per round).
struct Dataset {
  std::vector<search::EditSample> samples;
  std::vector<std::pair<size_t, size_t>> rounds;
};

void SaveDataset(const Dataset& d, const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  const uint64_t n = d.samples.size(), r = d.rounds.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(d.samples.data()),
            static_cast<std::streamsize>(n * sizeof(search::EditSample)));
  out.write(reinterpret_cast<const char*>(&r), sizeof r);
  out.write(reinterpret_cast<const char*>(d.rounds.data()),
            static_cast<std::streamsize>(r * sizeof(std::pair<size_t, size_t>)));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

Dataset LoadDataset(const std::filesystem::path& file) {
  Dataset d;
  std::ifstream in(file, std::ios::binary);
  uint64_t n = 0, r = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  d.samples.resize(n);
  in.read(reinterpret_cast<char*>(d.samples.data()),
          static_cast<std::streamsize>(n * sizeof(search::EditSample)));
  in.read(reinterpret_cast<char*>(&r), sizeof r);
  d.rounds.resize(r);
  in.read(reinterpret_cast<char*>(d.rounds.data()),
          static_cast<std::streamsize>(r * sizeof(std::pair<size_t, size_t>)));
  if (!in) throw std::runtime_error(file.string() + ": truncated pretraining samples");
  return d;
}

// Refinement on one corpus problem, every judged edit recorded into `data`.
void Collect(const CorpusProblem& p, const PretrainOptions& o, uint64_t seed,
             search::EditScorer* scorer, Dataset& data) {
  const CorpusInstance instance(p, o);
  const search::CandidateEvaluator& evaluator = *instance.problem->evaluator;
  search::Refiner refiner(evaluator.space(), instance.problem->features, {}, seed);
  search::EditGuide guide;
  guide.scorer = scorer;
  guide.seconds_per_byte = instance.seconds_per_byte;
  guide.schedule_costs = instance.schedule_costs;
  guide.record = [&](const std::vector<search::EditFeatureRow>& rows,
                     const std::vector<double>& changes) {
    const size_t begin = data.samples.size();
    for (size_t i = 0; i < rows.size(); ++i) data.samples.push_back({rows[i], changes[i]});
    data.rounds.emplace_back(begin, data.samples.size());
  };
  refiner.SetGuide(guide);
  const search::JudgeBatch judge = [&](const std::vector<search::Candidate>& batch) {
    std::vector<search::Judgement> out;
    for (const graph::EvaluationResult& r : evaluator.Evaluate(batch))
      out.push_back(search::JudgementOf(r));
    return out;
  };
  const std::vector<search::Judgement> starts = judge(instance.starts);
  size_t best = 0;
  for (size_t i = 1; i < starts.size(); ++i) {
    if (starts[i].seconds < starts[best].seconds) best = i;
  }
  refiner.Run(instance.starts[best], starts[best], o.refine_rounds, judge, [] { return false; });
}

}  // namespace

CorpusInstance::CorpusInstance(const CorpusProblem& p, const PretrainOptions& o)
    : CorpusInstance(
          [model = p.model](int64_t batch, int64_t normalizer) {
            return graph::BuildGeneratedModel(model, batch, normalizer);
          },
          p.batch, p.devices, p.nvlink, p.hosts, o.max_groups) {}

CorpusInstance::CorpusInstance(const graph::ForwardBuilder& build_forward, int64_t batch,
                               int device_count, bool nvlink, int hosts, int max_groups,
                               const std::vector<int>& micro_batch_counts) {
  sim::RooflineOptions roofline;
  if (nvlink) roofline.gpu_to_gpu = sim::LinkPresets::Nvlink();
  if (hosts > 1) roofline.gpus_per_host = device_count / hosts;
  costs = std::make_unique<sim::RooflineCostModel>(roofline);
  for (int i = 0; i < device_count; ++i) {
    devices.push_back({"cuda:" + std::to_string(i), graph::DeviceType::kCuda, i, 1, 0});
  }
  problem = std::make_unique<SimulatedProblem>(MakeSimulatedProblem(
      build_forward, batch, 0.01, {graph::GroupingMethod::kCoarsen, max_groups}, devices, *costs,
      search::ActionSpace::DefaultReplicaCounts(device_count, batch), micro_batch_counts));
  seconds_per_byte = sim::TypicalSecondsPerByte(*costs, devices);
  schedule_costs = ScheduleCostsOf(*costs, problem->base(), problem->grouping, devices);
  const search::ActionSpace& space = problem->evaluator->space();
  const auto groups = static_cast<size_t>(problem->num_groups());
  // The starts a search has: one device, data parallelism, and the algorithms' placements.
  starts = {{1, std::vector<int>(groups, space.SingleDeviceOption(0))},
            {device_count, std::vector<int>(groups, space.SpreadOption(device_count))}};
  const baselines::PlacementProblem placement{&problem->base(), &problem->grouping, devices,
                                              costs.get()};
  for (const char* name : {"m-etf", "metis"}) {
    try {
      starts.push_back(
          space.FromGroupDevices(baselines::RunBaseline(name, placement).group_devices));
    } catch (const baselines::BaselineError&) {
      // A baseline that cannot place this problem is no start.
    }
  }
}

CorpusInstance::~CorpusInstance() = default;

std::string CorpusProblem::Describe() const {
  return fmt::format("{} at batch {} on {} GPUs ({}{})", graph::GeneratedModelName(model), batch,
                     devices, nvlink ? "NVLink" : "PCIe", hosts > 1 ? ", 2 hosts" : "");
}

PretrainOptions ValidationProblems(int max_groups) {
  PretrainOptions o;
  o.seed = 1'000'003;  // never a pretraining seed of the shipped command
  o.max_groups = max_groups;
  o.max_blocks = 4 * max_groups;
  o.min_blocks = max_groups / 2;
  o.batches = {32, 128, 512};
  return o;
}

CorpusProblem CorpusProblemFor(const PretrainOptions& o, int iteration, int index) {
  std::mt19937_64 rng(
      Mix(Mix(o.seed, static_cast<uint64_t>(iteration)), static_cast<uint64_t>(index)));
  CorpusProblem p;
  const auto families = static_cast<int>(graph::GeneratedFamilyNames().size());
  p.model.family = static_cast<graph::GeneratedFamily>(index % families);
  p.model.seed = rng();
  p.model.blocks = std::uniform_int_distribution<int>(o.min_blocks, o.max_blocks)(rng);
  p.model.max_width = std::uniform_int_distribution<int>(0, 1)(rng) == 0 ? 1024 : 4096;
  p.devices =
      o.device_counts[std::uniform_int_distribution<size_t>(0, o.device_counts.size() - 1)(rng)];
  p.nvlink = std::bernoulli_distribution(0.5)(rng);
  p.hosts = p.devices >= 4 && std::bernoulli_distribution(0.25)(rng) ? 2 : 1;
  // Drawn only from a choice, so that one batch size leaves the corpus as it was.
  p.batch = o.batches.size() == 1
                ? o.batches.front()
                : o.batches[std::uniform_int_distribution<size_t>(0, o.batches.size() - 1)(rng)];
  return p;
}

std::vector<PretrainProgress> Pretrain(const PretrainOptions& o,
                                       const std::filesystem::path& directory, std::ostream& log,
                                       const std::function<bool()>& stop) {
  using Clock = std::chrono::steady_clock;
  std::filesystem::create_directories(directory);
  const std::filesystem::path state_file = directory / kStateFile;
  Dataset data;
  std::unique_ptr<search::EditModel> model;
  const int done = ReadIterationsDone(state_file, Fingerprint(o));
  if (done > 0) {
    data = LoadDataset(directory / kSamplesFile);
    search::EditModelOptions loading = o.model;
    loading.learn_online = false;  // its labels must be what an unbroken run collects
    model = search::EditModel::Load(directory / kEditModelFile, loading);
    log << fmt::format("resuming after iteration {} ({} samples)\n", done, data.samples.size());
  }
  if (const std::string note = PortableFloatKernelsNote(); !note.empty()) log << note << '\n';
  // Deterministic training: one intra-op thread.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  std::vector<PretrainProgress> progress;
  for (int iteration = done; iteration < o.iterations; ++iteration) {
    const auto start = Clock::now();
    // Appended in place: a stopped iteration is not saved, and is redone on resume.
    search::EditModel* scorer = model.get();
    for (int i = 0; i < o.problems_per_iteration; ++i) {
      if (stop()) {
        at::set_num_threads(threads);
        return progress;
      }
      const CorpusProblem p = CorpusProblemFor(o, iteration, i);
      const size_t before = data.samples.size();
      // The scorer must not learn online here: its labels are what training sees.
      Collect(p, o, Mix(o.seed, static_cast<uint64_t>(iteration * 1000 + i)), scorer, data);
      log << fmt::format("iteration {} problem {}/{}: {}, {} edits\n", iteration + 1, i + 1,
                         o.problems_per_iteration, p.Describe(), data.samples.size() - before);
    }
    // Rounds held back for validation: every k-th.
    Dataset train, validation;
    const int every = o.validation_share > 0
                          ? std::max(2, static_cast<int>(1.0 / o.validation_share))
                          : std::numeric_limits<int>::max();
    for (size_t r = 0; r < data.rounds.size(); ++r) {
      Dataset& into =
          static_cast<int>(r % static_cast<size_t>(every)) == every - 1 ? validation : train;
      const size_t begin = into.samples.size();
      for (size_t k = data.rounds[r].first; k < data.rounds[r].second; ++k) {
        into.samples.push_back(data.samples[k]);
      }
      into.rounds.emplace_back(begin, into.samples.size());
    }
    search::EditModelOptions training = o.model;
    training.learn_online = false;
    model = std::make_unique<search::EditModel>(training,
                                                Mix(o.seed, static_cast<uint64_t>(iteration)));
    PretrainProgress p;
    p.iteration = iteration + 1;
    p.samples = data.samples.size();
    p.train_loss = model->Train(train.samples, o.epochs, o.batch,
                                Mix(o.seed, static_cast<uint64_t>(iteration + 17)));
    const search::EditModel::Quality q = model->Assess(validation.samples, validation.rounds);
    p.validation_loss = q.loss;
    p.validation_pair_accuracy = q.pair_accuracy;
    // The hand-written controls' ordering of the same held-back edits.
    std::vector<double> estimated, scheduled;
    for (const search::EditSample& sample : validation.samples) {
      estimated.push_back(search::EditEstimator::EstimatedLogChange(sample.features));
      scheduled.push_back(search::EditEstimator::ScheduledLogChange(sample.features));
    }
    p.estimate_pair_accuracy =
        search::InRoundPairAccuracy(estimated, validation.samples, validation.rounds);
    p.schedule_pair_accuracy =
        search::InRoundPairAccuracy(scheduled, validation.samples, validation.rounds);
    p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    model->Save(directory / kEditModelFile);
    SaveDataset(data, directory / kSamplesFile);
    WriteIterationsDone(state_file, iteration + 1, Fingerprint(o));
    log << fmt::format(
        "iteration {}: {} samples, train loss {:.5f}, held-back loss {:.5f}, in-round order "
        "{:.1f}% right (hand-written estimate {:.1f}%, group-level schedule {:.1f}%), {:.0f} s\n",
        p.iteration, p.samples, p.train_loss, p.validation_loss, 100 * p.validation_pair_accuracy,
        100 * p.estimate_pair_accuracy, 100 * p.schedule_pair_accuracy, p.seconds);
    progress.push_back(p);
  }
  at::set_num_threads(threads);
  return progress;
}

}  // namespace placer::setup
