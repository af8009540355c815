// The options of a built-in model as one list of fields: each options struct (graph/models.h,
// graph/zoo.h) names its configurable fields once, with their bounds and meaning, in a Fields()
// method; the config reader (config/config.cc), the builders' checks (CheckFields) and the schema
// (configs/SCHEMA.md) all visit that list. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// Reads, checks or documents the fields of an options struct.
class FieldVisitor {
 public:
  virtual ~FieldVisitor() = default;
  // An integer of at least `minimum`.
  virtual void Int(std::string_view key, int64_t& value, int64_t minimum,
                   std::string_view meaning) = 0;
  // A finite number greater than 0.
  virtual void Positive(std::string_view key, double& value, std::string_view meaning) = 0;
  // One of `choices`.
  virtual void Choice(std::string_view key, std::string& value,
                      const std::vector<std::string_view>& choices, std::string_view meaning) = 0;
};

// A constraint across fields that does not hold: `fields` are the ones to point at, the first
// a config gives.
struct FieldError {
  std::vector<std::string> fields;
  std::string message;
};

// Throws GraphError naming the field when a field of `options` is out of bounds or its Check()
// fails; every builder of a model with Fields() calls it first.
template <typename Options>
void CheckFields(Options& options);

// What a built-in model is built with besides its sizes.
struct BuildSettings {
  int64_t batch_size = 1;
  double learning_rate = 0.1;
  int64_t loss_normalizer = 0;  // 0: the batch size; data-parallel shards use the global batch
  bool training_step = true;    // false: forward ops and the loss only
};

// The options of one built-in model, whatever its options struct (see builtin_models.h).
class ModelOptions {
 public:
  virtual ~ModelOptions() = default;
  virtual std::unique_ptr<ModelOptions> Clone() const = 0;
  virtual void Fields(FieldVisitor& visitor) = 0;
  virtual std::optional<FieldError> Check() const = 0;
  // The options struct's own minibatch (the papers').
  virtual int64_t default_batch_size() const = 0;
  // The validated graph (the training step unless settings say otherwise).
  virtual Graph Build(const BuildSettings& settings) const = 0;
  // What an expert placement file may condition its variants on (configs/experts/), e.g. the
  // layer count.
  virtual std::map<std::string, std::string> ExpertFacts() const = 0;
  // The options struct itself, when it is a T.
  template <typename T>
  const T* As() const;
};

// ModelOptions over options struct T, built by `builder`.
template <typename T>
class TypedModelOptions final : public ModelOptions {
 public:
  using Builder = Graph (*)(const T&);
  TypedModelOptions(T options, Builder builder) : options_(std::move(options)), builder_(builder) {}
  std::unique_ptr<ModelOptions> Clone() const override {
    return std::make_unique<TypedModelOptions>(*this);
  }
  void Fields(FieldVisitor& visitor) override { options_.Fields(visitor); }
  std::optional<FieldError> Check() const override { return options_.Check(); }
  int64_t default_batch_size() const override { return T{}.batch_size; }
  Graph Build(const BuildSettings& settings) const override {
    T options = options_;
    options.batch_size = settings.batch_size;
    options.learning_rate = settings.learning_rate;
    options.loss_normalizer = settings.loss_normalizer;
    options.training_step = settings.training_step;
    return builder_(options);
  }
  std::map<std::string, std::string> ExpertFacts() const override { return options_.ExpertFacts(); }
  const T& options() const { return options_; }
  T& mutable_options() { return options_; }

 private:
  T options_;
  Builder builder_;
};

template <typename T>
const T* ModelOptions::As() const {
  const auto* typed = dynamic_cast<const TypedModelOptions<T>*>(this);
  return typed ? &typed->options() : nullptr;
}

// ---- CheckFields ----

namespace detail {
class FieldChecker final : public FieldVisitor {
 public:
  void Int(std::string_view key, int64_t& value, int64_t minimum, std::string_view) override;
  void Positive(std::string_view key, double& value, std::string_view) override;
  void Choice(std::string_view key, std::string& value,
              const std::vector<std::string_view>& choices, std::string_view) override;
};
void ThrowFieldError(const FieldError& error);
void CheckBatch(int64_t batch_size);
}  // namespace detail

template <typename Options>
void CheckFields(Options& options) {
  detail::CheckBatch(options.batch_size);
  detail::FieldChecker checker;
  options.Fields(checker);
  if (std::optional<FieldError> error = options.Check()) detail::ThrowFieldError(*error);
}

}  // namespace placer::graph
