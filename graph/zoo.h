// The model zoo of the placement papers (ColocRL 2017, the hierarchical planner 2018, and their
// successors): Inception-V3, an LSTM language model, an attentional LSTM encoder-decoder for
// translation, and a BERT-shaped transformer encoder. Each builder returns the whole validated
// training step (forward, loss, backward, SGD update), like BuildLeNet, so that the same graph can
// be placed, simulated and executed.
//
// Op names are structured by layer so that expert placements (configs/experts/) and humans can
// address them with glob patterns:
//   Inception-V3   stem/conv2d_1a_3x3/{conv,bn,relu}, mixed_5b/branch5x5_2/conv, mixed_5b/concat,
//                  head/fc, loss
//   RNNLM          embed, embed/t3, l1/t3/lstm (or l1/t3/gate_f/x ...), softmax/t3/logits
//   NMT            enc/embed, enc/l2/t7/..., dec/l0/t3/..., attention/t3/..., softmax/t3/loss
//   Transformer    embeddings/..., l5/attention/scores, l5/ffn/gelu, head/classifier, loss
// (<layer>/t<t>/... is time step t of a recurrent layer.)
// Recurrent models are unrolled over their time steps (as the TensorFlow graphs of the papers
// were): every time step of every layer is its own ops, and a layer's weights are shared by its
// steps (they live on the device of the layer's first step).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "graph/ir.h"
#include "graph/model_options.h"

namespace placer::graph {

// How an LSTM time step appears in the graph.
enum class LstmCellKind {
  // One LstmCell op per step and layer: the fewest ops, the fastest to execute.
  kFused,
  // Each gate as its own ops, as in Keras' LSTMCell "implementation 1" and the op-level graphs
  // the placement papers placed: per gate g in (i, f, g, o) a Linear of the input (with bias), a
  // Linear of the previous state, their sum and the activation; then c' = f*c + i*g and
  // h' = o*tanh(c'). 21 ops per step and layer, the four gates independent of each other. The
  // weights are the fused cell's, one [H, I], [H, H] and [H] block per gate.
  kGates,
};
const char* ToString(LstmCellKind kind);

// The configurable fields of every options struct below (model_options.h): Fields() lists them
// with their bounds; Check() the constraints across fields; ExpertFacts() what expert placements
// may condition on.

// torchvision's Inception-V3 (Szegedy et al. 2016) without the auxiliary classifier: every
// convolution is BasicConv2d (conv without bias, batch norm with epsilon 0.001, ReLU); dropout is
// left out (it changes no shape and no placement). At 299x299 and 1000 classes it has exactly
// torchvision's parameters less the auxiliary classifier's.
struct InceptionV3Options {
  int64_t batch_size = 32;
  int64_t image_size = 299;  // at least 75 (smaller inputs vanish before the last stage)
  int64_t classes = 1000;
  // Scales every layer's channel count (rounded, at least 1), for small test networks.
  double width_multiplier = 1.0;
  double learning_rate = 0.1;
  int64_t loss_normalizer = 0;  // 0: the batch size; data-parallel shards use the global batch
  bool training_step = true;    // false: forward ops and the loss only
  void Fields(FieldVisitor& v);
  std::optional<FieldError> Check() const;
  std::map<std::string, std::string> ExpertFacts() const;
};
Graph BuildInceptionV3(const InceptionV3Options& options);

// A stacked-LSTM language model unrolled over `time_steps` (Zaremba et al. 2014; the RNNLM of
// ColocRL): token embedding, `layers` LSTM layers starting from zero state, and at every step a
// softmax output layer over the vocabulary with its own cross-entropy loss (the per-step losses
// are summed, each averaged over the batch).
struct RnnLmOptions {
  int64_t batch_size = 64;
  int64_t time_steps = 40;
  int64_t layers = 2;
  int64_t hidden = 2048;
  int64_t embedding = 1024;
  int64_t vocab = 40000;
  LstmCellKind cell = LstmCellKind::kGates;
  double learning_rate = 0.1;
  int64_t loss_normalizer = 0;
  bool training_step = true;
  void Fields(FieldVisitor& v);
  std::optional<FieldError> Check() const;
  std::map<std::string, std::string> ExpertFacts() const;
};
Graph BuildRnnLm(const RnnLmOptions& options);

// An attentional LSTM encoder-decoder for translation (Luong et al. 2015, the GNMT-style NMT of
// the placement papers), unrolled over `source_steps` and `target_steps`:
//   encoder   source embedding, `layers` LSTM layers from zero state; residual connections from
//             the third layer on (GNMT)
//   decoder   target embedding (teacher forcing), `layers` LSTM layers starting from the encoder's
//             final states, residual connections likewise
//   attention at every target step, dot-product attention of the top decoder output over the top
//             encoder outputs; the context is concatenated with the decoder output and projected
//             (Linear, tanh) to the attentional state
//   softmax   at every target step, a projection to the target vocabulary and a cross-entropy loss
// With the default sizes and 8 layers the training step has more than 50,000 ops: the size of
// graph the hierarchical planner was built for.
struct NmtOptions {
  int64_t batch_size = 128;
  int64_t layers = 2;
  // The papers unroll 40 to 50 steps. The default is longer because this IR has one backward op
  // per forward op where TensorFlow's gradient graphs have two to four, and it is the op count
  // that the benchmarks need to match: with 8 layers, 72 steps give 52,343 ops (50 steps: 36,415).
  int64_t source_steps = 72;
  int64_t target_steps = 72;
  int64_t hidden = 1024;
  int64_t embedding = 1024;
  int64_t source_vocab = 32000;
  int64_t target_vocab = 32000;
  LstmCellKind cell = LstmCellKind::kGates;
  double learning_rate = 0.1;
  int64_t loss_normalizer = 0;
  bool training_step = true;
  void Fields(FieldVisitor& v);
  std::optional<FieldError> Check() const;
  std::map<std::string, std::string> ExpertFacts() const;
};
Graph BuildNmt(const NmtOptions& options);

// A BERT-shaped transformer encoder (Devlin et al. 2019; defaults are BERT-base): word, position
// and token-type embeddings (Gather on int64 ids; positions are the first seq_length rows of the
// position table), embedding LayerNorm, `layers` post-LN encoder layers (multi-head self-attention
// with MatMul/Softmax, residual, LayerNorm, GELU feed-forward, residual, LayerNorm; LayerNorm
// epsilon 1e-12), BERT's pooler (Linear + tanh on the first token) and a classifier with a
// softmax cross-entropy loss. Dropout is left out. Without the classifier it has exactly the
// parameters of BERT-base's BertModel.
struct TransformerOptions {
  int64_t batch_size = 32;
  int64_t seq_length = 128;
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;  // must divide hidden
  int64_t ffn = 3072;
  int64_t vocab = 30522;
  int64_t max_positions = 512;  // at least seq_length
  int64_t type_vocab = 2;
  int64_t classes = 2;
  double learning_rate = 0.1;
  int64_t loss_normalizer = 0;
  bool training_step = true;
  void Fields(FieldVisitor& v);
  std::optional<FieldError> Check() const;
  std::map<std::string, std::string> ExpertFacts() const;
};
Graph BuildTransformerEncoder(const TransformerOptions& options);

}  // namespace placer::graph
