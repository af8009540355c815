// Reading ONNX protobufs: the model file, and a TensorProto's data (raw bytes or typed fields, in
// every element type the loader accepts) as a value known at load time.
#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "graph/onnx/loader.h"
#include "placer_onnx.pb.h"

namespace placer::graph::onnx {

namespace pb = ::placer::onnxpb;

namespace {

// float16 and bfloat16 bit patterns to float.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mantissa;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else {
    bits = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float Bfloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
std::vector<T> RawValues(const std::string& raw, int64_t count, const std::string& name) {
  if (raw.size() % sizeof(T) != 0 || static_cast<uint64_t>(count) != raw.size() / sizeof(T)) {
    throw GraphError(fmt::format("tensor '{}' holds {} bytes of data, its {} elements need {} each",
                                 name, raw.size(), count, sizeof(T)));
  }
  std::vector<T> values(static_cast<size_t>(count));
  if (count > 0) std::memcpy(values.data(), raw.data(), raw.size());  // little-endian, as ONNX
  return values;
}

}  // namespace

// A TensorProto to a Known value. Data may be missing (a stripped weight): has_data is then false.
Known FromTensorProto(const pb::TensorProto& t, const std::string& name) {
  if (t.data_location() == pb::TensorProto_DataLocation_EXTERNAL) {
    throw GraphError(
        fmt::format("tensor '{}' keeps its data in an external file, which is not "
                    "supported (export with external_data=False)",
                    name));
  }
  const int type = t.data_type();
  if (!IsFloatType(type) && !IsIntType(type)) {
    throw GraphError(fmt::format("tensor '{}' has element type {}; only numbers are supported",
                                 name, TypeName(type)));
  }
  Known k;
  k.type = type;
  k.name = name;
  for (int64_t d : t.dims()) {
    if (d < 0) throw GraphError(fmt::format("tensor '{}' has a negative extent", name));
    k.shape.push_back(d);
  }
  const int64_t n = NumElements(k.shape);
  auto check = [&](int64_t held) {
    if (held != n) {
      throw GraphError(fmt::format("tensor '{}' holds {} values, its shape {} needs {}", name, held,
                                   ToString(k.shape), n));
    }
  };
  const bool raw = t.has_raw_data();
  const int typed = t.float_data_size() + t.int32_data_size() + t.int64_data_size() +
                    t.double_data_size() + t.uint64_data_size();
  if (n > 0 && !raw && typed == 0) {
    k.has_data = false;
    return k;
  }
  const std::string& bytes = t.raw_data();
  switch (type) {
    case kFloat:
      if (raw) {
        for (float v : RawValues<float>(bytes, n, name)) k.f.push_back(v);
      } else {
        check(t.float_data_size());
        k.f.assign(t.float_data().begin(), t.float_data().end());
      }
      break;
    case kDouble:
      if (raw) {
        k.f = RawValues<double>(bytes, n, name);
      } else {
        check(t.double_data_size());
        k.f.assign(t.double_data().begin(), t.double_data().end());
      }
      break;
    case kFloat16:
    case kBfloat16: {
      auto convert = type == kFloat16 ? HalfToFloat : Bfloat16ToFloat;
      if (raw) {
        for (uint16_t v : RawValues<uint16_t>(bytes, n, name)) k.f.push_back(convert(v));
      } else {
        check(t.int32_data_size());
        for (int32_t v : t.int32_data()) k.f.push_back(convert(static_cast<uint16_t>(v)));
      }
      break;
    }
    case kInt64:
      if (raw) {
        k.i = RawValues<int64_t>(bytes, n, name);
      } else {
        check(t.int64_data_size());
        k.i.assign(t.int64_data().begin(), t.int64_data().end());
      }
      break;
    case pb::TensorProto_DataType_UINT32:
    case pb::TensorProto_DataType_UINT64:
      if (raw && type == pb::TensorProto_DataType_UINT32) {
        for (uint32_t v : RawValues<uint32_t>(bytes, n, name)) k.i.push_back(v);
      } else if (raw) {
        for (uint64_t v : RawValues<uint64_t>(bytes, n, name))
          k.i.push_back(static_cast<int64_t>(v));
      } else {
        check(t.uint64_data_size());
        for (uint64_t v : t.uint64_data()) k.i.push_back(static_cast<int64_t>(v));
      }
      break;
    default:  // int32, int16, int8, uint16, uint8, bool: int32_data, or raw bytes of their size
      if (raw) {
        switch (type) {
          case pb::TensorProto_DataType_INT32:
            for (int32_t v : RawValues<int32_t>(bytes, n, name)) k.i.push_back(v);
            break;
          case pb::TensorProto_DataType_INT16:
            for (int16_t v : RawValues<int16_t>(bytes, n, name)) k.i.push_back(v);
            break;
          case pb::TensorProto_DataType_UINT16:
            for (uint16_t v : RawValues<uint16_t>(bytes, n, name)) k.i.push_back(v);
            break;
          case pb::TensorProto_DataType_INT8:
            for (int8_t v : RawValues<int8_t>(bytes, n, name)) k.i.push_back(v);
            break;
          default:  // uint8, bool
            for (uint8_t v : RawValues<uint8_t>(bytes, n, name)) k.i.push_back(v);
            break;
        }
      } else {
        check(t.int32_data_size());
        k.i.assign(t.int32_data().begin(), t.int32_data().end());
      }
      break;
  }
  return k;
}

namespace {

std::ifstream OpenFile(const std::filesystem::path& file) {
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) {
    throw GraphError(fmt::format("{}: cannot read: it is a directory", file.string()));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw GraphError(fmt::format("{}: cannot read: {}", file.string(), std::strerror(errno)));
  }
  return in;
}

}  // namespace

std::string ReadFile(const std::filesystem::path& file) {
  std::ifstream in = OpenFile(file);
  std::string bytes;
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(file, error);
  if (!error) bytes.reserve(size);
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) bytes.append(buffer, in.gcount());
  if (in.bad()) throw GraphError(fmt::format("{}: cannot read", file.string()));
  return bytes;
}

// Parsed from the stream: a file read into memory first would be held twice, and an export's
// weights are most of it (1.3 GB for OPT-350m).
pb::ModelProto ParseModel(const std::filesystem::path& file) {
  std::ifstream in = OpenFile(file);
  const bool empty = in.peek() == std::ifstream::traits_type::eof();
  pb::ModelProto model;
  if (empty || !model.ParseFromIstream(&in) || !model.has_graph()) {
    throw GraphError(fmt::format(
        "{}: not an ONNX model: the file is {}", file.string(),
        empty ? "empty" : "truncated, corrupt or of another format (protobuf parse failed)"));
  }
  return model;
}

}  // namespace placer::graph::onnx
