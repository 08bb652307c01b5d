// Pieces of issue 14's hardening that are easiest to pin down directly: message escaping,
// dtype ranges and spellings, recognizing binary files, and non-files.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/file_kind.h"
#include "compiler/json_text.h"
#include "ir/diagnostic.h"
#include "ir/dtype.h"
#include "ir/utf8.h"

namespace kiln {
namespace {

TEST(EscapeForMessage, ControlCharactersCannotSplitALine) {
  EXPECT_EQ(escape_for_message(std::string("a\nb\0c\x01", 6)), "a\\nb\\0c\\x01");
  EXPECT_EQ(escape_for_message("tab\there"), "tab\\there");
  EXPECT_EQ(escape_for_message(std::string(500, 'x'), 10), std::string(10, 'x') + "...");
}

TEST(EscapeForMessage, KeepsUtf8CharactersAndEscapesInvalidBytes) {
  EXPECT_EQ(escape_for_message("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // é, €
  EXPECT_EQ(escape_for_message("Resize_\xd6."), "Resize_\\xd6.");                    // a lone lead byte
  EXPECT_EQ(escape_for_message("\xc0\xaf"), "\\xc0\\xaf");                              // overlong '/'
  EXPECT_EQ(escape_for_message("\xed\xa0\x80"), "\\xed\\xa0\\x80");                     // a surrogate
  EXPECT_EQ(escape_for_message("\x7f"), "\\x7f");
}

TEST(Utf8, FirstInvalidByte) {
  EXPECT_EQ(invalid_utf8_at("plain ascii"), std::nullopt);
  EXPECT_EQ(invalid_utf8_at("\xf0\x9f\x98\x80 ok"), std::nullopt);  // U+1F600
  EXPECT_EQ(invalid_utf8_at("ab\xf4\x90\x80\x80"), 2u);            // beyond U+10FFFF
  EXPECT_EQ(invalid_utf8_at("abc\xe2\x82"), 3u);                    // cut short
  EXPECT_EQ(invalid_utf8_at("\x80"), 0u);                           // a continuation byte alone
}

TEST(FitsDType, FloatsWithinTheirFiniteRange) {
  EXPECT_TRUE(ir::fits_dtype(3.4e38, ir::DType::F32));
  EXPECT_FALSE(ir::fits_dtype(1e39, ir::DType::F32));
  EXPECT_FALSE(ir::fits_dtype(-1e300, ir::DType::F32));
  EXPECT_TRUE(ir::fits_dtype(std::numeric_limits<double>::infinity(), ir::DType::F32));
  EXPECT_TRUE(ir::fits_dtype(std::nan(""), ir::DType::F16));
  EXPECT_TRUE(ir::fits_dtype(65504, ir::DType::F16));
  EXPECT_FALSE(ir::fits_dtype(70000, ir::DType::F16));
  EXPECT_TRUE(ir::fits_dtype(1e300, ir::DType::F64));
}

TEST(FitsDType, IntegersWholeAndInRange) {
  EXPECT_TRUE(ir::fits_dtype(2147483647, ir::DType::I32));
  EXPECT_FALSE(ir::fits_dtype(2147483648.0, ir::DType::I32));
  EXPECT_FALSE(ir::fits_dtype(1.5, ir::DType::I32));
  EXPECT_FALSE(ir::fits_dtype(std::nan(""), ir::DType::I64));
  EXPECT_TRUE(ir::fits_dtype(-9223372036854775808.0, ir::DType::I64));
  EXPECT_FALSE(ir::fits_dtype(9223372036854775808.0, ir::DType::I64));
}

TEST(ParseDType, CommonSpellings) {
  EXPECT_EQ(ir::parse_dtype("float32"), ir::DType::F32);
  EXPECT_EQ(ir::parse_dtype("f32"), ir::DType::F32);
  EXPECT_EQ(ir::parse_dtype("half"), ir::DType::F16);
  EXPECT_EQ(ir::parse_dtype("bfloat16"), ir::DType::BF16);
  EXPECT_EQ(ir::parse_dtype("int64"), ir::DType::I64);
  EXPECT_EQ(ir::parse_dtype("double"), ir::DType::F64);
  EXPECT_EQ(ir::parse_dtype("uint8"), ir::DType::U8);
  EXPECT_EQ(ir::parse_dtype("u8"), ir::DType::U8);
  EXPECT_EQ(ir::parse_dtype("int16"), ir::DType::I16);
  EXPECT_EQ(ir::parse_dtype("uint64"), ir::DType::U64);
  EXPECT_FALSE(ir::parse_dtype("complex64"));
  EXPECT_FALSE(ir::parse_dtype("c64"));
}

TEST(DetectForeignFormat, NamesWhatABinaryFileLooksLike) {
  using compiler::ForeignFormat;
  auto format = [](std::string_view head, std::string_view path = "model") {
    auto found = compiler::detect_foreign_format(head, path);
    return found ? std::optional<ForeignFormat>(found->format) : std::nullopt;
  };
  EXPECT_EQ(format(std::string_view("\x08\x07\x12\x07pytorch", 11)), ForeignFormat::Onnx);
  EXPECT_EQ(format("anything", "net.onnx"), ForeignFormat::Onnx);
  EXPECT_EQ(format(std::string_view("\x89HDF\r\n\x1a\n", 8)), ForeignFormat::Hdf5);
  EXPECT_EQ(format("\x93NUMPY\x01"), ForeignFormat::Npy);
  EXPECT_EQ(format(std::string_view("\x10\0\0\0\0\0\0\0{\"a\":1}", 15)), ForeignFormat::Safetensors);
  EXPECT_EQ(format("PK\x03\x04rest"), ForeignFormat::Zip);
  EXPECT_EQ(format(std::string_view("\x80\x04\x95", 3)), ForeignFormat::Pickle);
  EXPECT_EQ(format(std::string_view("ab\0cd", 5)), ForeignFormat::Binary);
  EXPECT_EQ(format("graph @g(%x: f32[2]) -> (f32[2]) {\n"), std::nullopt);
  EXPECT_EQ(format("{\"format\": \"kiln.model\"}"), std::nullopt);
}

TEST(CheckReadableFile, NamesDirectoriesAndDevices) {
  try {
    compiler::check_readable_file("/dev/zero", "a model file");
    FAIL() << "no error for a device";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message, "is a character device, not a model file");
  }
  try {
    compiler::check_readable_file("/tmp", "a .npy file");
    FAIL() << "no error for a directory";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message, "is a directory, not a .npy file");
  }
  EXPECT_NO_THROW(compiler::check_readable_file("/nonexistent/file", "x"));  // the open says why
}

TEST(ParseJsonText, DepthAndRangeAreLocated) {
  const std::string deep = "{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}";
  try {
    (void)compiler::parse_json_text(deep, "m.json", compiler::JsonLocation::LineColumn, "not valid JSON");
    FAIL() << "no error for deep nesting";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().location, "m.json:1:70");
  }
  try {
    (void)compiler::parse_json_text("{\"a\":\n [1, -2e400]}", "h", compiler::JsonLocation::ByteOffset,
                                    "header is not valid JSON");
    FAIL() << "no error for -2e400";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message,
              "header is not valid JSON at byte 11: number -2e400 is out of range (beyond the "
              "largest double, ~1.8e308)");
  }
  // Strings may hold anything, brackets and huge-looking numbers included.
  EXPECT_NO_THROW(compiler::parse_json_text("{\"a\": \"[[[[ 1e999\"}", "m", compiler::JsonLocation::LineColumn, "x"));
  EXPECT_EQ(compiler::parse_json_text("[1e-400]", "m", compiler::JsonLocation::LineColumn, "x")[0], 0.0);
}

}  // namespace
}  // namespace kiln
