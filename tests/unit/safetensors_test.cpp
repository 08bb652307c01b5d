// safetensors reading and writing: round trips, the on-disk layout, and every header check.
#include "compiler/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io_test_util.h"

namespace kiln::compiler {
namespace {

using ir::DType;
using ir::Tensor;
using ir::TensorType;
using testing_util::error_of;
using testing_util::fresh_test_dir;
using testing_util::read_raw;
using testing_util::write_raw;

// A safetensors file by hand: the 8-byte length of `header` (or `length` when given), the
// header, then `data`.
std::string safetensors_file(const std::string& header, const std::string& data = "",
                             std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

Tensor counting_tensor(TensorType type) {
  Tensor tensor(type);
  for (int64_t i = 0; i < tensor.num_elements(); ++i)
    tensor.set(i, type.dtype == DType::Bool ? i % 2 : double(i) - 2.5);
  return tensor;
}

TEST(Safetensors, RoundTripsEveryDtype) {
  const auto dir = fresh_test_dir();
  std::map<std::string, Tensor> tensors;
  for (DType dtype : ir::kAllDTypes)
    tensors.emplace("t_" + std::string(ir::dtype_name(dtype)), counting_tensor({dtype, {2, 3}}));
  tensors.emplace("scalar", counting_tensor({DType::F32, {}}));
  const std::string path = (dir / "w.safetensors").string();
  write_safetensors(path, tensors);

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.entries().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const SafetensorsEntry* entry = file.find(name);
    ASSERT_NE(entry, nullptr) << name;
    const Tensor back = file.read(name);
    EXPECT_EQ(entry->type, tensor.type()) << name;
    EXPECT_EQ(back.type(), tensor.type()) << name;
    EXPECT_EQ(back.bytes(), tensor.bytes()) << name;
  }
  EXPECT_EQ(file.find("t_bf16")->stored_dtype, "BF16");
  EXPECT_EQ(file.find("t_bool")->stored_dtype, "BOOL");
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(Safetensors, WritesSortedPackedAlignedLayout) {
  const auto dir = fresh_test_dir();
  std::map<std::string, Tensor> tensors;
  tensors.emplace("b", counting_tensor({DType::F16, {3}}));
  tensors.emplace("a", counting_tensor({DType::I64, {2}}));
  write_safetensors((dir / "w.safetensors").string(), tensors);
  const std::string bytes = read_raw(dir / "w.safetensors");
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ((8 + header_size) % 8, 0u);
  const std::string header = bytes.substr(8, header_size);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find("} ") + 1);  // padded with spaces only
  EXPECT_LT(header.find("\"a\""), header.find("\"b\""));
  EXPECT_NE(header.find("\"data_offsets\":[0,16]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[16,22]"), std::string::npos) << header;
  EXPECT_EQ(bytes.size(), 8 + header_size + 22);

  write_safetensors((dir / "empty.safetensors").string(), {});
  EXPECT_TRUE(SafetensorsFile::open((dir / "empty.safetensors").string()).entries().empty());
}

// F64 stays f64 (an f32 parameter stored as F64 is rounded where it loads: parameters_test).
TEST(Safetensors, ReadsF64AsF64AndIgnoresMetadata) {
  const auto dir = fresh_test_dir();
  std::string data(16, '\0');
  const double values[] = {0.1, -3.0};
  std::memcpy(data.data(), values, 16);
  write_raw(dir / "d.safetensors",
            safetensors_file(R"({"__metadata__": {"format": "pt"},
                                 "w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})",
                             data));
  const SafetensorsFile file = SafetensorsFile::open((dir / "d.safetensors").string());
  EXPECT_EQ(file.entries().size(), 1u);
  EXPECT_EQ(file.find("w")->stored_dtype, "F64");
  EXPECT_EQ(file.find("w")->type.to_string(), "f64[2]");
  const Tensor tensor = file.read("w");
  EXPECT_EQ(tensor.type().to_string(), "f64[2]");
  EXPECT_EQ(tensor.get(0), 0.1);
  EXPECT_EQ(tensor.get(1), -3.0);
}

// Writes `contents` and returns the message of the error that opening it gives.
std::string open_error(const std::string& contents) {
  const auto path = fresh_test_dir() / "x.safetensors";
  write_raw(path, contents);
  const Diagnostic diagnostic = error_of([&] { SafetensorsFile::open(path.string()); });
  EXPECT_EQ(diagnostic.location, path.string());
  return diagnostic.message;
}

// One entry `w` with the given fields, over `data_size` bytes of data.
std::string one_entry(const std::string& fields, size_t data_size = 8) {
  return safetensors_file("{\"w\": {" + fields + "}}", std::string(data_size, '\0'));
}

TEST(Safetensors, RejectsBadLengths) {
  EXPECT_EQ(open_error("abc"), "file is truncated: 3 bytes, too short for the 8-byte header length");
  EXPECT_EQ(open_error(safetensors_file("{}", "", 1000)),
            "header length 1000 runs past the end of the file (10 bytes)");
  EXPECT_EQ(open_error(safetensors_file("{}", "", ~uint64_t{0})),
            "header length 18446744073709551615 runs past the end of the file (10 bytes)");

  // A header length over the limit, in a (sparse) file long enough to hold it.
  const auto path = fresh_test_dir() / "huge.safetensors";
  write_raw(path, safetensors_file("{}", "", 200'000'000));
  std::filesystem::resize_file(path, 200'000'008);
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(path.string()); }).message,
            "header length 200000000 is over the 100 MB limit; the file is probably corrupt");
}

TEST(Safetensors, RejectsHeadersThatAreNotJsonObjects) {
  const std::string not_json = open_error(safetensors_file("{\"w\": ", ""));
  EXPECT_EQ(not_json.rfind("header is not valid JSON: parse error at line 1, column 7", 0), 0u)
      << not_json;
  EXPECT_EQ(open_error(safetensors_file("[1, 2]")), "header is not a JSON object");
  EXPECT_EQ(open_error(safetensors_file(R"({"__metadata__": {"a": 1}})")),
            "'__metadata__' must map strings to strings");
  EXPECT_EQ(open_error(safetensors_file(R"({"w": 3})")), "tensor 'w': entry is not a JSON object");
}

TEST(Safetensors, RejectsBadEntries) {
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [2])")),
            "tensor 'w': entry has no 'data_offsets'");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2])")),
            "tensor 'w': unsupported dtype \"F8_E4M3\"; kiln reads F32, F16, BF16, F64, I8, I16, I32, "
            "I64, U8, U16, U32, U64, BOOL");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": 2, "data_offsets": [0, 8])")),
            "tensor 'w': 'shape' is not a list");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [-2], "data_offsets": [0, 8])")),
            "tensor 'w': 'shape' [-2] must hold non-negative integers");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [2.0], "data_offsets": [0, 8])")),
            "tensor 'w': 'shape' [2.0] must hold non-negative integers");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [2, 0], "data_offsets": [0, 0])")),
            "tensor 'w': shape [2,0] has a zero-size dimension; kiln tensors need every "
            "dimension >= 1");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [2], "data_offsets": [0])")),
            "tensor 'w': 'data_offsets' [0] must be two non-negative integers [begin, end]");
}

TEST(Safetensors, RejectsBadOffsets) {
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [2], "data_offsets": [8, 0])")),
            "tensor 'w': data_offsets [8, 0] end before they begin");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [4], "data_offsets": [0, 16])")),
            "tensor 'w': data_offsets [0, 16] run past the end of the data section (8 bytes)");
  EXPECT_EQ(open_error(one_entry(R"("dtype": "F32", "shape": [3], "data_offsets": [0, 8])")),
            "tensor 'w': data_offsets [0, 8] hold 8 bytes, but F32[3] needs 12");
  EXPECT_EQ(open_error(safetensors_file(
                R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]}})",
                std::string(10, '\0'))),
            "tensors 'a' and 'b' overlap: data_offsets [0, 8] and [6, 10]");
}

TEST(Safetensors, ReportsMissingFileAndUnknownTensor) {
  const auto dir = fresh_test_dir();
  const auto path = (dir / "missing.safetensors").string();
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(path); }).message,
            "cannot open file (No such file or directory)");

  write_safetensors((dir / "w.safetensors").string(), {{"a", counting_tensor({DType::F32, {2}})}});
  const SafetensorsFile file = SafetensorsFile::open((dir / "w.safetensors").string());
  EXPECT_EQ(error_of([&] { file.read("b"); }).message, "no tensor named 'b'");
}

TEST(Safetensors, DetectsFileShrunkAfterOpen) {
  const auto dir = fresh_test_dir();
  const std::string path = (dir / "w.safetensors").string();
  write_safetensors(path, {{"a", counting_tensor({DType::F32, {64}})}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const Diagnostic diagnostic = error_of([&] { file.read("a"); });
  EXPECT_EQ(diagnostic.location, path);
  EXPECT_EQ(diagnostic.message,
            "tensor 'a': the file changed since its header was read (156 of 256 bytes could be "
            "read)");
}

TEST(Safetensors, FailedWriteLeavesNothingBehind) {
  const auto path = fresh_test_dir() / "no_such_dir" / "w.safetensors";
  EXPECT_EQ(error_of([&] { write_safetensors(path.string(), {}); }).message,
            "cannot create file (No such file or directory)");
  EXPECT_FALSE(std::filesystem::exists(path.parent_path()));
}

}  // namespace
}  // namespace kiln::compiler
