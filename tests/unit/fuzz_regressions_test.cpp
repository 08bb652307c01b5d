// Every input under tests/fuzz/regressions/ once crashed a parser or an importer (a fuzz
// finding, or a case written next to one). Each must now load or fail with a located
// kiln::Error; under the sanitizer build (CI's first test stage) anything else is a report.
// The written cases also pin the message.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "compiler/model_loader.h"
#include "kiln/error.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// What the load must say, for the cases written by hand; the others only must not crash.
const std::map<std::string, std::string> kExpected = {
    {"onnx-conv-weight-rank-1", "weight f32[3] must have the input's rank, 4"},
    {"onnx-conv-transpose-weight-rank-1", "weight f32[3] must have the input's rank, 4"},
    {"onnx-conv-transpose-short-output-shape", "output_shape must have a value per spatial dim"},
    {"onnx-conv-stride-2e62", "strides value 4611686018427387904 is outside [1, 2^24]"},
    {"onnx-tile-repeats-2e62", "the result would have more than 2^48 elements"},
    {"onnx-range-1e300", "too many to build at import"},
    {"onnx-unsqueeze-repeated-axis", "axis 0 is listed twice"},
    {"onnx-eye-like-2e48", "the identity matrix would be f32[16777216,16777216], over the 64 MiB"},
    {"onnx-empty-concat", "every input is empty (kiln tensors have at least one element)"},
    {"onnx-empty-operand", "input 1 is an empty tensor (kiln tensors have at least one element)"},
    {"onnx-empty-output", "output 'y': error: is an empty tensor"},
    {"onnx-depth-to-space-blocksize-2e62", "channels must be divisible by blocksize^2"},
    {"onnx-trilu-2e48", "the triangle mask would be bool[16777216,16777216], over the 64 MiB"},
    {"onnx-einsum-outer-product-2e90", "the contraction's result would have more than 2^48 elements"},
    {"onnx-lstm-4096-steps-bidirectional", "a sequence of 4096 steps would unroll to about 262144 nodes"},
    {"onnx-resize-cubic-huge-sizes", "the result [3876353,1,4108,197632] has more than 2^48 elements"},
    {"keras-functional-name-not-a-string", "the Functional model's name must be a string"},
    {"keras-sequential-name-not-a-string", "the Sequential model's name must be a string"},
    {"onnx-initializer-gigabyte-without-values", "holds 0 values, u8[115,116,10,52,8,1,18] needs 998899200"},
    {"onnx-resize-sizes-nan", "sizes (input 3 'sizes'): element 0 is NaN where an integer is expected"},
    {"onnx-name-invalid-utf8", "node 0: error: name 'Resize_\\xd6' is not valid UTF-8 (at byte 7)"},
};

TEST(FuzzRegressions, EachLoadsOrFailsWithALocatedError) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests/fuzz/regressions";
  int checked = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    std::string message;
    try {
      (void)compiler::load_model(entry.path().string());
    } catch (const Error& error) {
      message = error.what();
      EXPECT_NE(message.find(name), std::string::npos) << "the error names the file: " << message;
    }
    if (const auto expected = kExpected.find(name); expected != kExpected.end()) {
      EXPECT_NE(message.find(expected->second), std::string::npos) << message;
    }
    ++checked;
  }
  EXPECT_GE(checked, static_cast<int>(kExpected.size()) + 1);
}

}  // namespace
}  // namespace kiln
