// The one parser of device names (graph/device.h), which the config, the executor, the simulator
// and the workers all ask.
#include "graph/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace placer::graph {
namespace {

TEST(DeviceNameTest, TakesApartEveryFormOfName) {
  const std::optional<DeviceName> cpu = ParseDeviceName("cpu:0");
  ASSERT_TRUE(cpu.has_value());
  EXPECT_EQ(cpu->process, -1);
  EXPECT_EQ(cpu->type, DeviceType::kCpu);
  EXPECT_EQ(cpu->index, 0);

  const std::optional<DeviceName> gpu = ParseDeviceName("cuda:12");
  ASSERT_TRUE(gpu.has_value());
  EXPECT_EQ(gpu->type, DeviceType::kCuda);
  EXPECT_EQ(gpu->index, 12);

  const std::optional<DeviceName> remote = ParseDeviceName("w3/cuda:1");
  ASSERT_TRUE(remote.has_value());
  EXPECT_EQ(remote->process, 3);
  EXPECT_EQ(remote->type, DeviceType::kCuda);
  EXPECT_EQ(remote->index, 1);
}

TEST(DeviceNameTest, RefusesAnythingElse) {
  for (const char* name : {"", "cpu", "cpu:", ":0", "gpu:0", "CPU:0", "cpu:-1", "cpu:+1", "cpu: 1",
                           "cpu:1x", "cuda:0:1", "w/cpu:0", "wx/cpu:0", "w1cpu:0", "w1/",
                           "w1/w2/cpu:0", "x1/cpu:0", "cpu:1234567", "w1234567/cpu:0"}) {
    EXPECT_FALSE(ParseDeviceName(name).has_value()) << "'" << name << "'";
  }
}

TEST(DeviceNameTest, NamesTheProcessOfADevice) {
  EXPECT_EQ(DeviceProcess("w0/cpu:0"), 0);
  EXPECT_EQ(DeviceProcess("w17/cuda:3"), 17);
  EXPECT_EQ(DeviceProcess("cpu:0"), -1);
  EXPECT_EQ(DeviceProcess("w1/gpu:0"), -1);  // not a device name: no process either
}

TEST(DeviceNameTest, BuildsADeviceOrSaysWhichNameIsWrong) {
  const Device device = DeviceFromName("w1/cuda:2");
  EXPECT_EQ(device.name, "w1/cuda:2");
  EXPECT_EQ(device.type, DeviceType::kCuda);
  EXPECT_EQ(device.index, 2);
  EXPECT_EQ(device.threads, 1);
  try {
    DeviceFromName("tpu:0");
    FAIL() << "tpu:0 was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("'tpu:0' is not a device name"));
  }
}

TEST(DeviceNameTest, KindNamesRoundTrip) {
  for (const DeviceType type : {DeviceType::kCpu, DeviceType::kCuda}) {
    EXPECT_EQ(ParseDeviceType(DeviceTypeName(type)), type);
  }
  EXPECT_FALSE(ParseDeviceType("gpu").has_value());
  EXPECT_EQ(DeviceNames({DeviceFromName("cpu:1"), DeviceFromName("cuda:0")}),
            (std::vector<std::string>{"cpu:1", "cuda:0"}));
}

}  // namespace
}  // namespace placer::graph
