#include "cli/inspect.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "graph/ops.h"

namespace placer::cli {
namespace {

std::string HumanBytes(double bytes) {
  constexpr std::array<const char*, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < kUnits.size()) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

std::string HumanCount(double count) {
  if (count >= 1e9) return fmt::format("{:.2f} G", count / 1e9);
  if (count >= 1e6) return fmt::format("{:.2f} M", count / 1e6);
  if (count >= 1e3) return fmt::format("{:.1f} k", count / 1e3);
  return fmt::format("{:.0f}", count);
}

}  // namespace

void PrintInspection(const graph::Graph& g, std::ostream& out) {
  using graph::Phase;
  std::string header =
      fmt::format("{:>3}  {:<22} {:<19} {:<8} {:<16} {:>9} {:>10} {:>10}\n", "#", "op", "type",
                  "phase", "output shape", "params", "FLOPs", "out bytes");
  out << header << std::string(header.size() - 1, '-') << '\n';
  std::array<double, 3> phase_flops{};
  std::vector<graph::OpId> order = g.TopologicalOrder();
  for (size_t i = 0; i < order.size(); ++i) {
    const graph::Op& op = g.op(order[i]);
    int64_t params = 0;
    if (op.phase == Phase::kForward) {
      for (graph::TensorId in : op.inputs) {
        if (g.tensor(in).kind == graph::TensorKind::kParameter) {
          params += graph::NumElements(g.tensor(in).shape);
        }
      }
    }
    std::string shape = op.outputs.empty() ? "-" : graph::ToString(g.tensor(op.outputs[0]).shape);
    if (op.outputs.size() > 1) shape += fmt::format(" +{}", op.outputs.size() - 1);
    double flops = graph::OpFlops(g, op);
    phase_flops[static_cast<size_t>(op.phase)] += flops;
    out << fmt::format("{:>3}  {:<22} {:<19} {:<8} {:<16} {:>9} {:>10} {:>10}\n", i, op.name,
                       op.type, graph::ToString(op.phase), shape,
                       params ? HumanCount(static_cast<double>(params)) : "", HumanCount(flops),
                       HumanBytes(static_cast<double>(graph::OpOutputBytes(g, op))));
  }
  int64_t param_bytes = 0;
  for (graph::TensorId id : g.Parameters()) param_bytes += g.tensor(id).bytes();
  out << '\n'
      << fmt::format("ops: {} ({} forward, {} backward, {} update)\n", g.num_ops(),
                     g.OpsInPhase(Phase::kForward).size(), g.OpsInPhase(Phase::kBackward).size(),
                     g.OpsInPhase(Phase::kUpdate).size())
      << fmt::format("parameters: {} in {} tensors ({})\n", g.ParameterCount(),
                     g.Parameters().size(), HumanBytes(static_cast<double>(param_bytes)))
      << fmt::format("FLOPs per training step: {} forward, {} backward, {} update\n",
                     HumanCount(phase_flops[0]), HumanCount(phase_flops[1]),
                     HumanCount(phase_flops[2]));
}

void PrintGroups(const graph::Graph& g, const graph::Grouping& grouping, const std::string& name,
                 std::ostream& out) {
  std::vector<double> flops(static_cast<size_t>(grouping.num_groups()), 0);
  double total = 0;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    const graph::Op& op = g.op(id);
    const graph::OpId anchor = op.phase == graph::Phase::kForward ? id : op.forward_op;
    const int group =
        anchor == graph::kNoOp ? -1 : grouping.group_of_op[static_cast<size_t>(anchor)];
    const double f = graph::OpFlops(g, op);
    if (group >= 0) flops[static_cast<size_t>(group)] += f;
    total += f;
  }
  out << '\n' << fmt::format("groups: {} ({})\n", grouping.num_groups(), name);
  std::string header = fmt::format("{:>5}  {:>6}  {:<30} {:<30} {:>7}\n", "group", "ops",
                                   "first op", "last op", "FLOPs");
  out << header << std::string(header.size() - 1, '-') << '\n';
  for (int k = 0; k < grouping.num_groups(); ++k) {
    const auto& members = grouping.members[static_cast<size_t>(k)];
    out << fmt::format("{:>5}  {:>6}  {:<30} {:<30} {:>6.2f}%\n", k, members.size(),
                       g.op(members.front()).name, g.op(members.back()).name,
                       total > 0 ? 100 * flops[static_cast<size_t>(k)] / total : 0.0);
  }
}

}  // namespace placer::cli
