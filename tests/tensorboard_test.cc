// The TensorBoard event file as TensorBoard reads it: TFRecord framing with masked CRC32C of the
// length and of the data, then Event protos (first the file version, then scalar summaries).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "proto/writers.h"
#include "tensorboard.pb.h"
#include "tests/temp_dir.h"

namespace placer::proto {
namespace {

std::vector<tensorboard::Event> ReadEvents(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<tensorboard::Event> events;
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t length;
    uint32_t length_crc, data_crc;
    EXPECT_LE(at + 12, bytes.size());
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, MaskedCrc32c(bytes.data() + at, 8)) << "record at " << at;
    std::string data = bytes.substr(at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, MaskedCrc32c(data.data(), data.size())) << "record at " << at;
    tensorboard::Event event;
    EXPECT_TRUE(event.ParseFromString(data));
    events.push_back(event);
    at += 12 + length + 4;
  }
  return events;
}

TEST(TensorBoardWriterTest, WritesFramedEventsThatParseBack) {
  const test_support::TempDir temp("placer_tensorboard_test");
  const std::filesystem::path dir = temp / "events";
  std::filesystem::path file;
  {
    TensorBoardWriter writer(dir);
    file = writer.path();
    writer.AddScalar("step_time_ms/best", 0, 12.5);
    writer.AddScalar("step_time_ms/best", 1, 11.25);
  }
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::vector<tensorboard::Event> events = ReadEvents(file);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[2].step(), 1);
  ASSERT_EQ(events[2].summary().value_size(), 1);
  EXPECT_EQ(events[2].summary().value(0).tag(), "step_time_ms/best");
  EXPECT_FLOAT_EQ(events[2].summary().value(0).simple_value(), 11.25f);
  EXPECT_GT(events[1].wall_time(), 1.7e9);
}

TEST(TensorBoardWriterTest, MaskedCrc32cOfTheStandardCheckValue) {
  // CRC-32C("123456789") = 0xE3069283 (the Castagnoli check value), masked as TFRecord does.
  uint32_t crc = 0xE3069283u;
  EXPECT_EQ(MaskedCrc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

}  // namespace
}  // namespace placer::proto
