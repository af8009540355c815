// Real training on Fashion-MNIST: the placement must not change what is learned.
#include <gtest/gtest.h>

#include "graph/data_parallel.h"
#include "graph/models.h"
#include "runtime/trainer.h"
#include "tests/support.h"

namespace placer::runtime {
namespace {

using placer::test_support::CpuWorkers;

// LeNet with a larger initial scale than the chapter's, so that 10 steps already learn something
// measurable (with N(0, 0.01^2) the first epoch stays near chance). The run is short on purpose:
// data parallelism sums the same gradients in another order, and SGD at this learning rate
// amplifies those last-bit differences over tens of steps (measured: identical losses for 5
// steps, 4e-4 apart after 10, 7e-3 after 20), so only a short run can be compared tightly.
graph::LeNetOptions ShortRunLeNet() {
  return {.batch_size = 128, .learning_rate = 0.1, .init_stddev = 0.1};
}

class TrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    train_ = new ImageDataset(LoadFashionMnist("train"));
    test_ = new ImageDataset(LoadFashionMnist("test"));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
  }
  EpochReport Run(const TrainingSetup& setup, const graph::DeviceSet& devices, int steps = 10) {
    graph::LeNetOptions eval = ShortRunLeNet();
    eval.training_step = false;
    return Train(setup, graph::BuildLeNet(eval), devices, *train_, *test_,
                 {.epochs = 1, .max_steps_per_epoch = steps, .seed = 3})
        .back();
  }
  static ImageDataset* train_;
  static ImageDataset* test_;
};
ImageDataset* TrainingTest::train_ = nullptr;
ImageDataset* TrainingTest::test_ = nullptr;

TEST_F(TrainingTest, PlacementAndDataParallelismDoNotChangeAccuracy) {
  graph::Graph model = graph::BuildLeNet(ShortRunLeNet());
  EpochReport single =
      Run(SingleModelSetup(model, graph::Placement::AllOn(model, {"cpu:0", "cpu:1"}, 0)),
          CpuWorkers(2));
  EXPECT_GT(single.test_accuracy, 0.2) << "10 steps should learn beyond chance (0.1)";

  graph::Placement split = graph::Placement::AllOn(model, {"cpu:0", "cpu:1"}, 0);
  for (const char* op : {"conv2", "relu2", "pool2", "fc2"}) {
    split.device_of_op[static_cast<size_t>(*model.FindOp(op))] = 1;
  }
  EpochReport placed = Run(SingleModelSetup(model, split), CpuWorkers(2));

  graph::DataParallelGraph dp = graph::BuildDataParallel(
      [](int64_t batch, int64_t normalizer) {
        graph::LeNetOptions o = ShortRunLeNet();
        o.batch_size = batch;
        o.loss_normalizer = normalizer;
        o.training_step = false;
        return graph::BuildLeNet(o);
      },
      128, {"cpu:0", "cpu:1"}, {1, 1}, 0.1);
  EpochReport data_parallel = Run(DataParallelSetup(dp), CpuWorkers(2));
  // Float sums in another order may flip a handful of borderline predictions, no more.
  EXPECT_NEAR(placed.test_accuracy, single.test_accuracy, 0.005);
  EXPECT_NEAR(data_parallel.test_accuracy, single.test_accuracy, 0.005);
  EXPECT_NEAR(placed.train_loss, single.train_loss, 1e-3);
  EXPECT_NEAR(data_parallel.train_loss, single.train_loss, 1e-3);
}

}  // namespace
}  // namespace placer::runtime
