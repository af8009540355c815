// The Fashion-MNIST loader against the real Debian dataset, and against small IDX files that are
// broken in one way each: every failure is a DatasetError that names the offending file.
#include "runtime/fashion_mnist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <fstream>

namespace placer::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const fs::path kDataset = "/usr/share/datasets/fashion-mnist";

std::array<int, 10> Histogram(const std::vector<uint8_t>& labels) {
  std::array<int, 10> counts{};
  for (uint8_t label : labels) ++counts.at(label);
  return counts;
}

TEST(FashionMnistTest, RealTrainSplit) {
  ASSERT_TRUE(fs::is_directory(kDataset))
      << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const ImageDataset train = LoadFashionMnist("train");
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(train.rows, 28);
  EXPECT_EQ(train.cols, 28);
  EXPECT_EQ(train.pixels.size(), 60000u * 28 * 28);
  ASSERT_EQ(train.labels.size(), 60000u);
  EXPECT_EQ(train.labels[0], 9);  // Ankle boot, as in the dataset's documentation.
  EXPECT_THAT(Histogram(train.labels), ::testing::Each(6000));
  const auto [lo, hi] = std::minmax_element(train.pixels.begin(), train.pixels.end());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
}

TEST(FashionMnistTest, RealTestSplit) {
  ASSERT_TRUE(fs::is_directory(kDataset))
      << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const ImageDataset test = LoadFashionMnist("test", kDataset);
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(test.rows, 28);
  EXPECT_EQ(test.cols, 28);
  EXPECT_EQ(test.pixels.size(), 10000u * 28 * 28);
  ASSERT_EQ(test.labels.size(), 10000u);
  EXPECT_THAT(std::vector<uint8_t>(test.labels.begin(), test.labels.begin() + 5),
              ::testing::ElementsAre(9, 2, 1, 1, 6));
  EXPECT_THAT(Histogram(test.labels), ::testing::Each(1000));
  const auto [lo, hi] = std::minmax_element(test.pixels.begin(), test.pixels.end());
  EXPECT_EQ(*lo, 0);
  EXPECT_EQ(*hi, 255);
}

TEST(FashionMnistTest, RejectsUnknownSplitAndMissingDirectory) {
  EXPECT_THROW(LoadFashionMnist("validation"), DatasetError);
  try {
    LoadFashionMnist("train", "/nonexistent/fashion-mnist");
    ADD_FAILURE() << "no error";
  } catch (const DatasetError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/fashion-mnist"));
  }
}

// Small IDX files in a fresh directory per test.
class IdxFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("fashion_mnist_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Big-endian magic and dimensions, then the data; gzip-compressed when the name ends in ".gz".
  fs::path Write(const std::string& name, std::vector<uint32_t> header,
                 const std::vector<uint8_t>& data) {
    std::string bytes;
    for (uint32_t v : header) {
      for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(v >> shift));
    }
    bytes.append(data.begin(), data.end());
    const fs::path path = dir_ / name;
    if (path.extension() == ".gz") {
      gzFile file = gzopen(path.c_str(), "wb");
      EXPECT_NE(file, nullptr);
      EXPECT_EQ(gzwrite(file, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
      EXPECT_EQ(gzclose(file), Z_OK);
    } else {
      std::ofstream(path, std::ios::binary) << bytes;
    }
    return path;
  }
  fs::path Images(uint32_t count, std::vector<uint8_t> pixels, uint32_t magic = 2051) {
    return Write("images.gz", {magic, count, 2, 2}, pixels);
  }
  fs::path Labels(std::vector<uint8_t> labels, uint32_t magic = 2049) {
    return Write("labels", {magic, static_cast<uint32_t>(labels.size())}, labels);
  }

  // LoadIdx fails, naming `file` and saying `what`.
  static void ExpectError(const fs::path& images, const fs::path& labels, const fs::path& file,
                          const std::string& what) {
    try {
      LoadIdx(images, labels);
      ADD_FAILURE() << "no error";
    } catch (const DatasetError& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr(file.string()), HasSubstr(what)));
    }
  }

  fs::path dir_;
};

TEST_F(IdxFilesTest, ReadsGzipAndPlainFiles) {
  std::vector<uint8_t> pixels(12);
  for (int i = 0; i < 12; ++i) pixels[i] = static_cast<uint8_t>(i * 20);
  const ImageDataset data = LoadIdx(Images(3, pixels), Labels({7, 0, 9}));
  EXPECT_EQ(data.count, 3);
  EXPECT_EQ(data.rows, 2);
  EXPECT_EQ(data.cols, 2);
  EXPECT_EQ(data.pixels, pixels);
  EXPECT_THAT(data.labels, ::testing::ElementsAre(7, 0, 9));
}

TEST_F(IdxFilesTest, WrongMagic) {
  const fs::path labels = Labels({1, 2, 3});
  ExpectError(Images(3, std::vector<uint8_t>(12), 2049), labels, dir_ / "images.gz",
              "bad magic number 2049");
  ExpectError(Images(3, std::vector<uint8_t>(12)), Labels({1, 2, 3}, 2051), labels,
              "bad magic number 2051");
}

TEST_F(IdxFilesTest, TruncatedPixelData) {
  ExpectError(Images(3, std::vector<uint8_t>(10)), Labels({1, 2, 3}), dir_ / "images.gz",
              "truncated: pixel data ends after 10 of 12 bytes");
}

TEST_F(IdxFilesTest, TruncatedGzipStream) {
  const fs::path images = Images(100, std::vector<uint8_t>(400, 7));
  fs::resize_file(images, fs::file_size(images) - 10);  // Cuts into the deflate data and trailer.
  ExpectError(images, Labels(std::vector<uint8_t>(100)), images, "truncated");
}

TEST_F(IdxFilesTest, CorruptGzipStream) {
  std::vector<uint8_t> pixels(4000);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7919 % 251);
  const fs::path images = Images(1000, pixels);
  std::fstream(images, std::ios::in | std::ios::out | std::ios::binary).seekp(40) << "garbage!";
  ExpectError(images, Labels(std::vector<uint8_t>(1000)), images, "cannot read: ");
}

TEST_F(IdxFilesTest, TrailingData) {
  ExpectError(Images(2, std::vector<uint8_t>(12)), Labels({1, 2}), dir_ / "images.gz",
              "after the last item");
}

TEST_F(IdxFilesTest, CountMismatch) {
  ExpectError(Images(3, std::vector<uint8_t>(12)), Labels({1, 2}), dir_ / "labels",
              "2 labels, but " + (dir_ / "images.gz").string() + " has 3 images");
}

TEST_F(IdxFilesTest, LabelOutOfRange) {
  ExpectError(Images(3, std::vector<uint8_t>(12)), Labels({1, 10, 3}), dir_ / "labels",
              "label 10 at index 1 is out of range");
}

TEST_F(IdxFilesTest, MissingFile) {
  ExpectError(Images(3, std::vector<uint8_t>(12)), dir_ / "absent", dir_ / "absent",
              "cannot open: No such file or directory");
}

TEST_F(IdxFilesTest, AbsurdDimensionsFailBeforeAllocating) {
  const fs::path images = Write("huge", {2051, 0xffffffff, 0xffffffff, 0xffffffff}, {});
  ExpectError(images, Write("huge-labels", {2049, 0xffffffff}, {}), images, "exceed the limit");
  ExpectError(Write("flat", {2051, 1, 0, 28}, {}), Labels({}), dir_ / "flat",
              "bad image size 0x28");
}

}  // namespace
}  // namespace placer::runtime
