#include "proto/evaluation_wire.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "evaluation.pb.h"
#include "graph/micro_batches.h"

namespace placer::proto {
namespace {

std::vector<uint8_t> Bytes(const google::protobuf::MessageLite& message) {
  std::vector<uint8_t> bytes(message.ByteSizeLong());
  if (!message.SerializeToArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw WireError("cannot encode an evaluation message");
  }
  return bytes;
}

void Parse(google::protobuf::MessageLite& message, const std::vector<uint8_t>& bytes,
           const char* what) {
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw WireError(std::string("an evaluation ") + what + " of " + std::to_string(bytes.size()) +
                    " bytes does not parse");
  }
}

}  // namespace

std::vector<uint8_t> EncodeTask(const EvaluationTask& task) {
  wire::EvaluationTask m;
  m.set_id(task.id);
  m.set_stop(task.stop);
  m.set_kind(std::string(graph::ToString(task.kind)));
  m.set_replicas(task.replicas);
  m.mutable_device_of_op()->Add(task.placement.device_of_op.begin(),
                                task.placement.device_of_op.end());
  for (const std::string& device : task.placement.devices) m.add_devices(device);
  m.set_micro_batches(task.placement.micro_batches);
  m.set_schedule(graph::ToString(task.placement.schedule));
  return Bytes(m);
}

EvaluationTask DecodeTask(const std::vector<uint8_t>& bytes) {
  wire::EvaluationTask m;
  Parse(m, bytes, "task");
  EvaluationTask task{.id = m.id(), .stop = m.stop(), .replicas = m.replicas()};
  if (!task.stop) {
    const std::optional<graph::EvaluatorKind> kind = graph::ParseEvaluatorKind(m.kind());
    if (!kind) {
      throw WireError(fmt::format("an evaluation task's evaluator kind '{}' is none of {}",
                                  m.kind(), fmt::join(graph::kEvaluatorKindNames, ", ")));
    }
    task.kind = *kind;
  }
  task.placement.device_of_op.assign(m.device_of_op().begin(), m.device_of_op().end());
  task.placement.devices.assign(m.devices().begin(), m.devices().end());
  task.placement.micro_batches = std::max(1, m.micro_batches());
  if (!m.schedule().empty()) {
    try {
      task.placement.schedule = graph::ParsePipelineSchedule(m.schedule());
    } catch (const graph::GraphError& error) {
      throw WireError(std::string("an evaluation task's schedule: ") + error.what());
    }
  }
  return task;
}

std::vector<uint8_t> EncodeResult(const TaggedResult& tagged) {
  const graph::EvaluationResult& r = tagged.result;
  wire::EvaluationResult m;
  m.set_id(tagged.id);
  m.set_rank(tagged.rank);
  m.set_valid(r.valid);
  m.set_invalid_reason(r.invalid_reason);
  m.set_step_seconds(r.step_seconds);
  m.set_min_seconds(r.min_seconds);
  m.set_max_seconds(r.max_seconds);
  m.mutable_step_samples()->Add(r.step_samples.begin(), r.step_samples.end());
  for (const graph::DeviceStats& d : r.devices) {
    wire::DeviceStats* out = m.add_devices();
    out->set_device(d.device);
    out->set_busy_seconds(d.busy_seconds);
    out->set_peak_memory_bytes(d.peak_memory_bytes);
  }
  for (const graph::TransferStats& t : r.transfers) {
    wire::TransferStats* out = m.add_transfers();
    out->set_from(t.from);
    out->set_to(t.to);
    out->set_bytes(t.bytes);
    out->set_count(t.count);
    out->set_seconds(t.seconds);
  }
  for (const graph::TraceEvent& e : r.trace) {
    wire::TraceEvent* out = m.add_trace();
    out->set_lane(e.lane);
    out->set_name(e.name);
    out->set_start_us(e.start_us);
    out->set_duration_us(e.duration_us);
  }
  m.set_final_loss(r.final_loss);
  return Bytes(m);
}

TaggedResult DecodeResult(const std::vector<uint8_t>& bytes) {
  wire::EvaluationResult m;
  Parse(m, bytes, "result");
  TaggedResult tagged{m.id(), m.rank(), {}};
  graph::EvaluationResult& r = tagged.result;
  r.valid = m.valid();
  r.invalid_reason = m.invalid_reason();
  r.step_seconds = m.step_seconds();
  r.min_seconds = m.min_seconds();
  r.max_seconds = m.max_seconds();
  r.step_samples.assign(m.step_samples().begin(), m.step_samples().end());
  for (const wire::DeviceStats& d : m.devices()) {
    r.devices.push_back({d.device(), d.busy_seconds(), d.peak_memory_bytes()});
  }
  for (const wire::TransferStats& t : m.transfers()) {
    r.transfers.push_back({t.from(), t.to(), t.bytes(), t.count(), t.seconds()});
  }
  for (const wire::TraceEvent& e : m.trace()) {
    r.trace.push_back({e.lane(), e.name(), e.start_us(), e.duration_us()});
  }
  r.final_loss = m.final_loss();
  return tagged;
}

}  // namespace placer::proto
