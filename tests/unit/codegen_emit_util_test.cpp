// The helpers every kernel emitter shares (codegen/kernels/emit_util.h): the body writer, the
// identifier check behind its dropped declarations, and the index-type thresholds.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "codegen/kernels/emit_util.h"

namespace kiln::codegen {
namespace {

TEST(CodegenEmitUtil, WriterIndentsBlocks) {
  BodyWriter w;
  w.line("int x = {};", 1);
  w.open("if (x > {})", 0);
  w.line("x = 0;");
  w.reopen("else");
  w.blank();
  w.close();
  w.open("auto f = [&]()");
  w.line("return x;");
  w.close(";");
  EXPECT_EQ(w.take(),
            "  int x = 1;\n"
            "  if (x > 0) {\n"
            "    x = 0;\n"
            "  } else {\n"
            "\n"
            "  }\n"
            "  auto f = [&]() {\n"
            "    return x;\n"
            "  };\n");
}

TEST(CodegenEmitUtil, FragmentsAndHooks) {
  // A fragment written at depth 0 keeps its own indentation when another writer places it.
  BodyWriter fragment(0);
  fragment.open("if (row < kM)");
  fragment.line("value += bias[row];");
  fragment.close();
  const std::string hook = fragment.take();
  EXPECT_EQ(hook, "if (row < kM) {\n  value += bias[row];\n}\n");

  BodyWriter w;
  w.open("for (int i = 0; i < 4; ++i)");
  w.lines(hook + "\n\nvalue *= 2.0f;");  // empty lines are dropped, the last needs no newline
  w.close();
  EXPECT_EQ(w.take(),
            "  for (int i = 0; i < 4; ++i) {\n"
            "    if (row < kM) {\n"
            "      value += bias[row];\n"
            "    }\n"
            "    value *= 2.0f;\n"
            "  }\n");
}

TEST(CodegenEmitUtil, UnusedDeclarationsAreDropped) {
  BodyWriter w;
  w.declare("kInner", "constexpr int kInner = 4;");
  w.declare("kOuter", "constexpr int kOuter = 2 * kInner;");  // only kStride reads it
  w.declare("kStride", "constexpr int kStride = kOuter;");    // nobody reads it
  w.declare("kUsed", "constexpr int kUsed = 3;");
  w.declare("lane", "const int lane = threadIdx.x % 32;");
  w.line("out[0] = kUsed;  // lane and kInner are mentioned in comments only");
  w.line("out[1] = kUsed_2;");  // not a whole-word mention of kUsed or lane
  EXPECT_EQ(w.take(),
            "  constexpr int kUsed = 3;\n"
            "  out[0] = kUsed;  // lane and kInner are mentioned in comments only\n"
            "  out[1] = kUsed_2;\n");
}

TEST(CodegenEmitUtil, Mentions) {
  EXPECT_TRUE(mentions("const int a = row + 1;", "row"));
  EXPECT_FALSE(mentions("const int a = rows + 1;", "row"));
  EXPECT_FALSE(mentions("const int a = b_row;", "row"));
  EXPECT_FALSE(mentions("const int a = 1;  // row", "row"));
  EXPECT_TRUE(mentions("// a comment line\nvalue = x[row];\n", "row"));
  EXPECT_FALSE(mentions("", "row"));
}

TEST(CodegenEmitUtil, IndexTypes) {
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // Grid-stride kernels: one grid stride of headroom past the last element.
  EXPECT_EQ(index_type(kIntMax - kMaxGridThreads), "int");
  EXPECT_EQ(index_type(kIntMax - kMaxGridThreads + 1), "long long");
  // The nn kernels: twice the largest tensor must stay within 2^31.
  EXPECT_EQ(index_type_with_overhang(int64_t{1} << 30), "int");
  EXPECT_EQ(index_type_with_overhang((int64_t{1} << 30) + 1), "long long");
  EXPECT_EQ(index_type_with_overhang(1), "int");
}

TEST(CodegenEmitUtil, ShapeHelpers) {
  const ir::Shape shape{2, 3, 4, 5};
  EXPECT_EQ(ir::num_elements(shape, 0, 4), 120);
  EXPECT_EQ(ir::num_elements(shape, 1, 3), 12);
  EXPECT_EQ(ir::num_elements(shape, 2, 2), 1);
}

}  // namespace
}  // namespace kiln::codegen
