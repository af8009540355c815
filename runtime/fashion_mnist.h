// Fashion-MNIST (and any MNIST-style IDX pair) loaded into memory. Torch-free: the caller decides
// how to turn the bytes into tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace placer::runtime {

// `count` images of rows x cols pixels, row-major, image after image; labels[i] is in 0..9.
struct ImageDataset {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
};

class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Reads an IDX image file and its label file (gzip or plain). Checks magic numbers (2051 images,
// 2049 labels), dimensions, that counts agree, that the file is not truncated, and that labels are
// < 10; errors name the file and what is wrong.
ImageDataset LoadIdx(const std::filesystem::path& images, const std::filesystem::path& labels);

// split: "train" or "test"; directory defaults to where Debian's dataset-fashion-mnist installs.
ImageDataset LoadFashionMnist(const std::string& split, const std::filesystem::path& directory =
                                                            "/usr/share/datasets/fashion-mnist");

}  // namespace placer::runtime
