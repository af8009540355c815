#include "runtime/fashion_mnist.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <system_error>

namespace placer::runtime {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // 0x0803: unsigned bytes, 3 dimensions.
constexpr uint32_t kLabelsMagic = 2049;  // 0x0801: unsigned bytes, 1 dimension.
// Fashion-MNIST's train split holds 47M pixels; a header asking for more than this is corrupt, and
// must fail before it allocates.
constexpr int64_t kMaxPixels = 100'000'000;

// One IDX file read through zlib, which passes plain files through unchanged (it detects gzip by
// its magic bytes), so both forms share one path.
class IdxReader {
 public:
  explicit IdxReader(const std::filesystem::path& path)
      : path_(path.string()), file_(gzopen(path_.c_str(), "rb")) {
    if (!file_) {
      Fail(errno ? fmt::format("cannot open: {}", std::generic_category().message(errno))
                 : std::string("cannot open"));
    }
    gzbuffer(file_.get(), 1 << 17);  // The default 8 KiB makes the 26 MB train images slow.
  }

  [[noreturn]] void Fail(const std::string& what) const {
    throw DatasetError(fmt::format("{}: {}", path_, what));
  }

  void ExpectMagic(uint32_t expected, const char* kind) {
    const uint32_t magic = ReadU32("magic number");
    if (magic != expected) {
      Fail(fmt::format("bad magic number {} (expected {}, an IDX {} file)", magic, expected, kind));
    }
  }

  // IDX stores integers big-endian.
  uint32_t ReadU32(const char* what) {
    uint8_t b[4];
    Read(b, 4, what);
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
  }

  // Reads exactly n bytes; anything less means the file (or its gzip stream) ends early.
  void Read(uint8_t* out, int64_t n, const char* what) {
    for (int64_t done = 0; done < n;) {
      const auto chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
      const int got = gzread(file_.get(), out + done, chunk);
      if (got <= 0) {
        // A cut-off gzip stream reports Z_BUF_ERROR, which is truncation too.
        int err = Z_OK;
        std::string message = gzerror(file_.get(), &err);
        if (err != Z_OK && err != Z_BUF_ERROR) {
          // zlib prefixes its message with the path; Fail adds that already. `what` is left out:
          // zlib inflates ahead, so a bad CRC in a small file surfaces while reading the magic.
          if (message.starts_with(path_ + ": ")) message.erase(0, path_.size() + 2);
          Fail("cannot read: " + message);
        }
        Fail(fmt::format("truncated: {} ends after {} of {} bytes", what, done, n));
      }
      done += got;
    }
  }

  // Extra bytes mean the header's count is wrong, so the data cannot be trusted either.
  void ExpectEnd() {
    uint8_t extra;
    if (gzread(file_.get(), &extra, 1) > 0) Fail("unexpected data after the last item");
  }

 private:
  struct Close {
    void operator()(gzFile file) const { gzclose(file); }
  };
  std::string path_;
  std::unique_ptr<gzFile_s, Close> file_;
};

}  // namespace

ImageDataset LoadIdx(const std::filesystem::path& images, const std::filesystem::path& labels) {
  // Both headers first, so that a mismatch fails before the pixels are read.
  IdxReader image_file(images), label_file(labels);
  image_file.ExpectMagic(kImagesMagic, "image");
  label_file.ExpectMagic(kLabelsMagic, "label");
  ImageDataset data;
  data.count = image_file.ReadU32("image count");
  data.rows = image_file.ReadU32("row count");
  data.cols = image_file.ReadU32("column count");
  const int64_t label_count = label_file.ReadU32("label count");
  if (data.rows == 0 || data.cols == 0) {
    image_file.Fail(fmt::format("bad image size {}x{}", data.rows, data.cols));
  }
  // Checked factor by factor so that no product overflows (UBSan caught 2^32 - 1 squared): rows
  // and columns <= 10^8 make their product fit, and count < 2^32 times a product <= 10^8 fits.
  if (data.rows > kMaxPixels || data.cols > kMaxPixels || data.rows * data.cols > kMaxPixels ||
      data.count * data.rows * data.cols > kMaxPixels) {
    image_file.Fail(
        fmt::format("{} images of {}x{} exceed the limit of {} pixels (corrupt header?)",
                    data.count, data.rows, data.cols, kMaxPixels));
  }
  if (label_count != data.count) {
    label_file.Fail(
        fmt::format("{} labels, but {} has {} images", label_count, images.string(), data.count));
  }
  data.pixels.resize(data.count * data.rows * data.cols);
  image_file.Read(data.pixels.data(), std::ssize(data.pixels), "pixel data");
  image_file.ExpectEnd();
  data.labels.resize(data.count);
  label_file.Read(data.labels.data(), data.count, "label data");
  label_file.ExpectEnd();
  const auto bad =
      std::find_if(data.labels.begin(), data.labels.end(), [](uint8_t l) { return l >= 10; });
  if (bad != data.labels.end()) {
    label_file.Fail(
        fmt::format("label {} at index {} is out of range 0..9", *bad, bad - data.labels.begin()));
  }
  return data;
}

ImageDataset LoadFashionMnist(const std::string& split, const std::filesystem::path& directory) {
  if (split != "train" && split != "test") {
    throw DatasetError(
        fmt::format("fashion-mnist: unknown split '{}' (expected train or test)", split));
  }
  if (!std::filesystem::is_directory(directory)) {
    throw DatasetError(
        fmt::format("fashion-mnist: {} is not a directory (the Debian package "
                    "dataset-fashion-mnist installs it)",
                    directory.string()));
  }
  // The Debian package ships gzip files; accept a gunzipped copy too, as other downloaders leave.
  const std::string prefix = split == "train" ? "train" : "t10k";
  const auto file = [&](const std::string& name) {
    const std::filesystem::path gz = directory / (name + ".gz"), plain = directory / name;
    return !std::filesystem::exists(gz) && std::filesystem::exists(plain) ? plain : gz;
  };
  return LoadIdx(file(prefix + "-images-idx3-ubyte"), file(prefix + "-labels-idx1-ubyte"));
}

}  // namespace placer::runtime
