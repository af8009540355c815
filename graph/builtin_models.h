// The built-in models as a registry: one entry per model, whose options struct (graph/models.h,
// graph/zoo.h) is the single source of its defaults, bounds and builder. The config reads a
// model's section into its options (config/config.cc), the CLI builds from them
// (placer/setup/model_factory.cc), and configs/SCHEMA.md's model sections are generated from the
// entries (config_test checks them). Adding a model is one entry here. Torch-free.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/model_options.h"

namespace placer::graph {

struct ModelEntry {
  std::string_view name;         // model.builtin, and the name of its section (model.<name>)
  std::string_view description;  // what it is: the schema's paragraph about its section
  // The model's default options.
  std::function<std::unique_ptr<ModelOptions>()> defaults;
};

// In the order the schema lists them.
const std::vector<ModelEntry>& BuiltinModels();
// nullptr when there is no such model.
const ModelEntry* FindBuiltinModel(std::string_view name);
std::vector<std::string_view> BuiltinModelNames();

}  // namespace placer::graph
