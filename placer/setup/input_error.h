// Bad input that is not a config or graph error (a placement file, a device, a flag value): the
// CLI answers it with its message and exit code 2.
#pragma once

#include <stdexcept>

namespace placer::setup {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace placer::setup
