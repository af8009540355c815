// The minibatch of a micro-batched graph (graph/micro_batches.h): each input and label cut into
// M equal row blocks, block k fed as "m<k>/<name>".
#pragma once

#include "runtime/executor.h"

namespace placer::runtime {

// Throws StepFailure naming the tensor when its rows do not split into `micro_batches` equal
// blocks.
TensorMap SplitIntoMicroBatches(const TensorMap& batch, int micro_batches);

}  // namespace placer::runtime
