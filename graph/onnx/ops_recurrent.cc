// ONNX recurrent layers (LSTM, GRU, RNN), unrolled into one IR cell per time step and direction
// (LstmCell, GruCell, RnnCell), as the zoo's recurrent models are.
#include <fmt/format.h>

#include "graph/onnx/loader.h"
#include "graph/ops.h"
#include "graph/shared_values.h"

namespace placer::graph::onnx {
namespace {

namespace t = op_types;

// An LSTM, GRU or RNN is unrolled into one cell per step and direction.
constexpr int64_t kMaxUnrolledCells = 100000;

// How one kind of recurrent layer maps onto its IR cell.
struct CellKind {
  const char* ir;
  int64_t gates;
  std::vector<int64_t> from_onnx;  // PyTorch's gate g is ONNX's gate from_onnx[g]
  bool sum_biases;                 // one bias input (LSTM) or input and recurrent ones (GRU, RNN)
  size_t states;                   // h (and c)
  std::vector<std::string> activations;  // ONNX's defaults, the only ones supported
};

const CellKind& KindOf(const std::string& type) {
  // ONNX orders LSTM gates i, o, f, c and GRU gates z, r, h; PyTorch i, f, g, o and r, z, n.
  static const CellKind lstm{t::kLstmCell, 4, {0, 2, 3, 1}, true, 2, {"Sigmoid", "Tanh", "Tanh"}};
  static const CellKind gru{t::kGruCell, 3, {1, 0, 2}, false, 1, {"Sigmoid", "Tanh"}};
  static const CellKind rnn{t::kRnnCell, 1, {0}, false, 1, {"Tanh"}};
  return type == "LSTM" ? lstm : type == "GRU" ? gru : rnn;
}

// ONNX weights [directions, gates * hidden, columns] (or biases [directions, 2 * gates * hidden])
// as per-direction tensors in PyTorch's gate order: a weight initializer is reordered at load time
// (the parameter then holds PyTorch's layout), a runtime tensor by Split and Concat ops. Biases
// come as two parameters per direction (input and recurrent, as PyTorch has them), summed by an
// IR op for the LSTM cell, which takes one.
std::vector<std::vector<TensorId>> Weights(Loader& l, const CellKind& kind, size_t input,
                                           int64_t directions, int64_t hidden, bool bias) {
  const Loader::Value& v = l.In(input);
  const Shape shape = l.InShape(input);
  const int64_t gates = kind.gates;
  const int64_t rows = bias ? 2 * gates * hidden : gates * hidden;
  if (shape.size() != (bias ? 2u : 3u) || shape[0] != directions || shape[1] != rows) {
    throw GraphError(fmt::format("{} input '{}' has shape {}, expected [{}, {}{}]", l.type(),
                                 l.InputName(input), ToString(shape), directions, rows,
                                 bias ? "" : ", ..."));
  }
  const int64_t columns = bias ? 1 : shape[2];
  const char* direction_names[2] = {"forward", "reverse"};
  std::vector<std::vector<TensorId>> out(static_cast<size_t>(directions));
  const Shape param_shape = bias ? Shape{gates * hidden} : Shape{gates * hidden, columns};
  if (v.known && v.known->trainable) {
    const Known& k = *v.known;
    for (int64_t d = 0; d < directions; ++d) {
      for (int half = 0; half < (bias ? 2 : 1); ++half) {
        const std::string suffix = bias ? (half == 0 ? ".input" : ".recurrent") : "";
        const std::string name = directions == 1
                                     ? k.name + suffix
                                     : fmt::format("{}.{}{}", k.name, direction_names[d], suffix);
        Initializer init;
        if (k.has_data) {
          std::vector<float> values;
          for (int64_t g = 0; g < gates; ++g) {
            const int64_t row0 =
                d * rows + half * gates * hidden + kind.from_onnx[static_cast<size_t>(g)] * hidden;
            for (int64_t e = row0 * columns; e < (row0 + hidden) * columns; ++e) {
              values.push_back(static_cast<float>(k.f[static_cast<size_t>(e)]));
            }
          }
          init.kind = Initializer::Kind::kValues;
          init.values = SharedValues(std::move(values));
        } else if (bias) {
          init.kind = Initializer::Kind::kZeros;
        } else {
          init.kind = Initializer::Kind::kNormal;
          init.stddev = l.options().init_stddev;
        }
        Graph& g = l.mutable_graph();
        out[static_cast<size_t>(d)].push_back(
            g.AddTensor({.name = g.FindTensor(name) ? l.UniqueTensorName(name) : name,
                         .shape = param_shape,
                         .kind = TensorKind::kParameter,
                         .init = init}));
      }
    }
  } else {
    // Runtime (or constant) weights: reordered with ops.
    TensorId w = l.Tensor(input, Role::kConstant);
    const std::string tag = bias ? "B" : (input == 1 ? "W" : "R");
    std::vector<TensorId> halves = {w};
    if (bias) {
      halves = {l.SliceAxis(tag + "/input", w, 1, 0, gates * hidden),
                l.SliceAxis(tag + "/recurrent", w, 1, gates * hidden, 2 * gates * hidden)};
    }
    for (size_t h = 0; h < halves.size(); ++h) {
      const std::string part = halves.size() == 1 ? tag : fmt::format("{}{}", tag, h);
      TensorId reordered = halves[h];
      if (gates > 1) {
        Attributes split;
        split.Set("axis", int64_t{1});
        split.Set("sizes", std::vector<int64_t>(static_cast<size_t>(gates), hidden));
        std::vector<std::string> names;
        for (int64_t g = 0; g < gates; ++g) {
          names.push_back(fmt::format("{}/{}/gate{}", l.NodeBase(), part, g));
        }
        std::vector<TensorId> pieces =
            l.Emit(l.NodeBase() + "/" + part + "/split", t::kSplit, {halves[h]}, split, names);
        std::vector<TensorId> ordered;
        for (int64_t g : kind.from_onnx) ordered.push_back(pieces[static_cast<size_t>(g)]);
        Attributes concat;
        concat.Set("axis", int64_t{1});
        reordered = l.Sub(part + "/reorder", t::kConcat, ordered, std::move(concat));
      }
      for (int64_t d = 0; d < directions; ++d) {
        TensorId one = directions == 1
                           ? reordered
                           : l.SliceAxis(fmt::format("{}/dir{}", part, d), reordered, 0, d, d + 1);
        out[static_cast<size_t>(d)].push_back(
            l.ReshapeTo(fmt::format("{}/dir{}/matrix", part, d), one, param_shape));
      }
    }
  }
  if (bias && kind.sum_biases) {
    for (int64_t d = 0; d < directions; ++d) {
      auto& pair = out[static_cast<size_t>(d)];
      pair = {l.Sub(fmt::format("bias{}", d), t::kAdd, {pair[0], pair[1]})};
    }
  }
  return out;
}

void ConvertRecurrent(Loader& l) {
  const CellKind& kind = KindOf(l.type());
  const std::string direction = l.AttrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    throw GraphError(fmt::format("unknown direction '{}'", direction));
  }
  const int64_t directions = direction == "bidirectional" ? 2 : 1;
  const bool lstm = l.type() == "LSTM";
  if (lstm && l.HasInput(7)) l.Unsupported("LSTM peepholes (input P)");
  if (l.HasAttr("clip")) l.Unsupported(l.type() + " cell clipping");
  if (lstm && l.AttrInt("input_forget", 0) != 0) l.Unsupported("LSTM input_forget");
  std::string rnn_activation = "tanh";
  if (std::optional<std::vector<std::string>> activations = l.AttrStrings("activations")) {
    for (size_t k = 0; k < activations->size(); ++k) {
      const std::string& a = (*activations)[k];
      const std::string& standard = kind.activations[k % kind.activations.size()];
      if (l.type() == "RNN" && a == "Relu") {
        if (k > 0 && rnn_activation != "relu") l.Unsupported("RNN directions of two activations");
        rnn_activation = "relu";
      } else if (a != standard) {
        l.Unsupported(fmt::format("{} activation {}", l.type(), a));
      } else if (l.type() == "RNN" && k > 0 && rnn_activation != "tanh") {
        l.Unsupported("RNN directions of two activations");
      }
    }
  }
  const bool batch_major = l.AttrInt("layout", 0) != 0;
  const Shape x = l.InShape(0);
  if (x.size() != 3)
    throw GraphError(fmt::format("{} input X has shape {}", l.type(), ToString(x)));
  const int64_t steps = batch_major ? x[1] : x[0], batch = batch_major ? x[0] : x[1],
                features = x[2];
  const int64_t hidden = l.AttrInt("hidden_size", l.InShape(2).size() == 3 ? l.InShape(2)[2] : 0);
  if (hidden <= 0 || hidden > (int64_t{1} << 30)) {
    throw GraphError(fmt::format("{} hidden_size {} is missing or out of range", l.type(), hidden));
  }
  if (steps * directions > kMaxUnrolledCells) {
    throw GraphError(fmt::format("{} steps are too many to unroll", steps));
  }
  if (l.HasInput(4)) {
    for (int64_t length : l.KnownInts(4, "sequence_lens")) {
      if (length != steps) l.Unsupported("sequences of different lengths (sequence_lens)");
    }
  }
  const auto w = Weights(l, kind, 1, directions, hidden, false);
  const auto r = Weights(l, kind, 2, directions, hidden, false);
  const auto b = l.HasInput(3)
                     ? Weights(l, kind, 3, directions, hidden, true)
                     : std::vector<std::vector<TensorId>>(static_cast<size_t>(directions));

  // Initial states per direction: given [directions, batch, hidden] (batch-major: [batch,
  // directions, hidden]), or zeros.
  auto initial = [&](size_t input, const char* what) {
    if (!l.HasInput(input)) {
      TensorId zeros = l.ZerosOp(fmt::format("{}/{}0", l.NodeBase(), what), {batch, hidden});
      return std::vector<TensorId>(static_cast<size_t>(directions), zeros);
    }
    std::vector<TensorId> out;
    TensorId all = l.Tensor(input, Role::kConstant);
    for (int64_t d = 0; d < directions; ++d) {
      TensorId one = directions == 1 ? all
                                     : l.SliceAxis(fmt::format("{}0/dir{}", what, d), all,
                                                   batch_major ? 1 : 0, d, d + 1);
      out.push_back(l.ReshapeTo(fmt::format("{}0/dir{}/matrix", what, d), one, {batch, hidden}));
    }
    return out;
  };
  const std::vector<TensorId> h0 = initial(5, "h");
  const std::vector<TensorId> c0 = lstm ? initial(6, "c") : std::vector<TensorId>();

  // x_t [batch, features] for every step.
  const TensorId xin = l.Tensor(0);
  const int64_t time_axis = batch_major ? 1 : 0;
  std::vector<TensorId> pieces;
  if (steps == 1) {
    pieces = {xin};
  } else {
    Attributes split;
    split.Set("axis", time_axis);
    split.Set("sizes", std::vector<int64_t>(static_cast<size_t>(steps), 1));
    std::vector<std::string> names;
    for (int64_t s = 0; s < steps; ++s) names.push_back(fmt::format("{}/x{}", l.NodeBase(), s));
    pieces = l.Emit(l.NodeBase() + "/split_time", t::kSplit, {xin}, std::move(split), names);
  }
  std::vector<TensorId> xs;
  for (int64_t s = 0; s < steps; ++s) {
    xs.push_back(l.ReshapeTo(fmt::format("x{}/matrix", s), pieces[static_cast<size_t>(s)],
                             {batch, features}));
  }

  // Unrolled: one cell per direction and step.
  std::vector<std::vector<TensorId>> hs(static_cast<size_t>(directions),
                                        std::vector<TensorId>(static_cast<size_t>(steps)));
  std::vector<TensorId> h_last(static_cast<size_t>(directions)),
      c_last(static_cast<size_t>(directions));
  for (int64_t d = 0; d < directions; ++d) {
    const auto u = static_cast<size_t>(d);
    const bool reverse = direction == "reverse" || d == 1;
    TensorId h = h0[u], c = lstm ? c0[u] : -1;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t step = reverse ? steps - 1 - s : s;
      std::vector<TensorId> inputs = {xs[static_cast<size_t>(step)], h};
      if (lstm) inputs.push_back(c);
      inputs.push_back(w[u][0]);
      inputs.push_back(r[u][0]);
      for (TensorId bias : b[u]) inputs.push_back(bias);
      Attributes attrs;
      if (l.type() == "GRU") attrs.Set("linear_before_reset", l.AttrInt("linear_before_reset", 0));
      if (l.type() == "RNN") attrs.Set("activation", rnn_activation);
      const std::string name = fmt::format("{}/d{}/t{}", l.NodeBase(), d, step);
      std::vector<std::string> names = {name + "/h"};
      if (lstm) names.push_back(name + "/c");
      std::vector<TensorId> out = l.Emit(name, kind.ir, inputs, std::move(attrs), names);
      h = out[0];
      if (lstm) c = out[1];
      hs[u][static_cast<size_t>(step)] = h;
    }
    h_last[u] = h;
    c_last[u] = c;
  }

  // Y: [steps, directions, batch, hidden] (batch-major: [batch, steps, directions, hidden]).
  if (l.OutputLive(0)) {
    std::vector<TensorId> per_direction;
    for (int64_t d = 0; d < directions; ++d) {
      Attributes attrs;
      attrs.Set("axis", int64_t{batch_major ? 1 : 0});
      TensorId joined = steps == 1 ? hs[static_cast<size_t>(d)][0]
                                   : l.Sub(fmt::format("Y/dir{}/concat", d), t::kConcat,
                                           hs[static_cast<size_t>(d)], std::move(attrs));
      const Shape shape =
          batch_major ? Shape{batch, steps, 1, hidden} : Shape{steps, 1, batch, hidden};
      per_direction.push_back(directions == 1
                                  ? l.ReshapeTo("Y", joined, shape, l.OutputName(0))
                                  : l.ReshapeTo(fmt::format("Y/dir{}", d), joined, shape));
    }
    if (directions == 1) {
      l.Define(0, per_direction[0]);
    } else {
      Attributes attrs;
      attrs.Set("axis", int64_t{batch_major ? 2 : 1});
      l.Define(0, l.Emit1(l.NodeBase() + "/Y", t::kConcat, per_direction, std::move(attrs),
                          l.OutputName(0)));
    }
  }
  // Y_h (, Y_c): [directions, batch, hidden] (batch-major: [batch, directions, hidden]).
  auto final_state = [&](size_t output, const std::vector<TensorId>& last, const char* what) {
    if (!l.OutputLive(output)) return;
    TensorId joined = last[0];
    if (directions > 1) {
      Attributes attrs;
      attrs.Set("axis", int64_t{batch_major ? 1 : 0});
      joined = l.Sub(fmt::format("{}/concat", what), t::kConcat, last, std::move(attrs));
    }
    const Shape shape =
        batch_major ? Shape{batch, directions, hidden} : Shape{directions, batch, hidden};
    l.Define(output, l.ReshapeTo(what, joined, shape, l.OutputName(output)));
  };
  final_state(1, h_last, "Y_h");
  if (lstm) final_state(2, c_last, "Y_c");
}

}  // namespace

void AddRecurrentOps(OpTable& table) {
  for (const char* type : {"LSTM", "GRU", "RNN"}) table[type] = {nullptr, ConvertRecurrent};
}

}  // namespace placer::graph::onnx
