// The package format (runtime/package/package.h): a round trip keeps every table, binary and
// weight; every way a file can be damaged is a kiln::Error that names the file and says what.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <zlib.h>

#include <cstring>

#include "codegen/emit.h"
#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "ir/float_storage.h"
#include "ir/parser.h"
#include "passes/pass_manager.h"
#include "runtime/package/package.h"
#include "runtime/package/program_json.h"
#include "runtime/package/sparse_weights.h"
#include "tests/unit/io_test_util.h"

namespace kiln::runtime {
namespace {

// The seed CNN at -O1 (fused, planned), with a fake binary: NVRTC is not what is tested here.
Package make_package() {
  ir::Graph graph = compiler::load_model(KILN_SOURCE_DIR "/examples/mnist_cnn.json");
  compiler::load_parameter_data(graph);
  std::ostringstream log;
  passes::PassManager manager({}, log);
  manager.add_all(passes::inference_pipeline(1));
  manager.run(graph);
  Package package;
  package.manifest.kiln_version = "0.1.0";
  package.manifest.model = "mnist_cnn.json";
  package.manifest.model_hash = "0123456789abcdef";
  package.manifest.archs = {"sm_80", "sm_90"};
  package.manifest.pipeline = passes::inference_pipeline(1);
  package.manifest.options = {{"opt_level", 1}};
  package.manifest.report = {{"fusion_decisions", Json::array()}};
  PackageProgram program{std::string(kInferenceProgram), codegen::emit_program(graph), {}};
  program.binary.ptx = ".version 9.0\n.target sm_80\n";
  program.binary.ptx_arch = "compute_80";
  program.binary.cubins = {{"sm_80", std::string("\x7f" "ELF\0cubin 80", 14)},
                           {"sm_90", std::string("\x7f" "ELF\0cubin 90", 14)}};
  program.binary.resources = {{"conv2d_bias_relu_0", "sm_80", 40, 0, 0, 0, 0, 0, 1}};
  program.binary.compiler = "nvrtc 13.0";
  package.programs.push_back(std::move(program));
  for (const ir::Value* param : graph.parameters) package.weights.emplace(param->name, *param->data);
  return package;
}

std::string error_of(std::string_view bytes) {
  try {
    parse_package(bytes, "m.kiln");
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

void put_u32(std::string& bytes, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[offset + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

// Rewrites the header's own checksum after a change to bytes 0..35.
void reseal_header(std::string& bytes) {
  put_u32(bytes, 36, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), 36)));
}

TEST(Package, RoundTripKeepsEverything) {
  const Package package = make_package();
  const std::string bytes = serialize_package(package);
  const Package read = parse_package(bytes, "m.kiln");
  EXPECT_EQ(read.manifest.model_hash, "0123456789abcdef");
  EXPECT_EQ(read.manifest.archs, package.manifest.archs);
  EXPECT_EQ(read.manifest.pipeline, package.manifest.pipeline);
  EXPECT_EQ(read.manifest.options, package.manifest.options);
  ASSERT_EQ(read.programs.size(), 1u);
  const PackageProgram& a = package.programs[0];
  const PackageProgram& b = read.programs[0];
  EXPECT_EQ(program_to_json(a.program), program_to_json(b.program));
  EXPECT_EQ(a.program.source, b.program.source);
  EXPECT_EQ(a.binary.ptx, b.binary.ptx);
  EXPECT_EQ(a.binary.cubins, b.binary.cubins);  // binary bytes, NUL included
  EXPECT_EQ(resources_to_json(a.binary.resources), resources_to_json(b.binary.resources));
  ASSERT_EQ(read.weights.size(), package.weights.size());
  for (const auto& [name, tensor] : package.weights) {
    EXPECT_EQ(read.weights.at(name).type(), tensor.type()) << name;
    EXPECT_EQ(read.weights.at(name).bytes(), tensor.bytes()) << name;
  }
  // Deterministic: the same package gives the same bytes.
  EXPECT_EQ(serialize_package(read), bytes);
}

// Backward convolutions on cuDNN keep their direction and dy through the program's JSON, and
// pass validation (a backward call reads no x or no weight: -1 there).
// --weights-dtype: f32 weights stored in 16 bits (half the weights section) and widened back
// to the programs' f32 on reading, exactly when they were rounded before (as build_package
// does); f32 packages keep every bit.
TEST(Package, WeightsStoredNarrowWidenBack) {
  const Package wide = make_package();
  const size_t wide_bytes = serialize_package(wide).size();
  for (ir::DType dtype : {ir::DType::BF16, ir::DType::F16}) {
    Package package = make_package();
    package.weights_dtype = dtype;
    for (auto& [name, tensor] : package.weights) {
      std::string error;
      tensor = ir::widened_from_storage(*ir::narrowed_for_storage(tensor, dtype, &error), tensor.type());
    }
    const std::string bytes = serialize_package(package);
    int64_t weight_bytes = 0;
    for (const auto& [name, tensor] : wide.weights) weight_bytes += static_cast<int64_t>(tensor.byte_size());
    EXPECT_LE(bytes.size() + static_cast<size_t>(weight_bytes / 2) - 4096, wide_bytes) << ir::dtype_name(dtype);
    const Package read = parse_package(bytes, "m.kiln");
    EXPECT_EQ(read.weights_dtype, dtype);
    for (const auto& [name, tensor] : package.weights) {
      const ir::Tensor& got = read.weights.at(name);
      EXPECT_EQ(got.type(), tensor.type()) << name;  // f32, as the program takes it
      EXPECT_EQ(got.bytes(), tensor.bytes()) << name;
      if (name.ends_with(".weight")) {  // random; the biases start at zero, exact in any dtype
        EXPECT_NE(got.bytes(), wide.weights.at(name).bytes()) << name << " was not rounded";
      }
    }
  }
  EXPECT_EQ(parse_package(serialize_package(wide), "m.kiln").weights_dtype, ir::DType::F32);
}

// Pruned weights (mostly zeros) are stored as a bitmask and their nonzeros: the weights section
// shrinks with the zeros and every bit comes back, -0.0 included (which the encoding keeps as a
// value: kiln compile turns it into +0.0 before, package_builder.cpp).
TEST(Package, PrunedWeightsStoredSparse) {
  const Package dense = make_package();
  Package pruned = make_package();
  ir::Tensor& fc1 = pruned.weights.at("fc1.weight");
  for (int64_t i = 0; i < fc1.num_elements(); ++i)
    if (i % 5 != 0) fc1.set(i, i % 7 == 0 ? -0.0 : 0.0);  // 80 % zeros, some of them -0.0
  const std::string bytes = serialize_package(pruned);
  // fc1 holds 80 % zeros: of its 4 bytes per element, the file keeps the 1/5 of them that are
  // not zeros (and the -0.0s), plus a bit each.
  const int64_t elements = fc1.num_elements();
  int64_t kept = 0;
  for (int64_t i = 0; i < elements; ++i) kept += i % 5 == 0 || i % 7 == 0;
  const int64_t saved = 4 * elements - (4 * kept + (elements + 7) / 8);
  EXPECT_LE(bytes.size() + static_cast<size_t>(saved) - 64, serialize_package(dense).size());
  const Package read = parse_package(bytes, "m.kiln");
  for (const auto& [name, tensor] : pruned.weights) EXPECT_EQ(read.weights.at(name).bytes(), tensor.bytes()) << name;
  EXPECT_EQ(serialize_package(read), bytes);
  const StoredWeights stored = stored_weights(pruned);
  EXPECT_EQ(stored.sparse, stored_weights(dense).sparse + 1);  // fc1.weight, and the zero biases
  EXPECT_LT(stored.bytes, stored.dense_bytes - saved + 1);
}

TEST(SparseWeights, RoundTripAndDenseTensorsStayDense) {
  ir::Tensor sparse(ir::TensorType{ir::DType::I32, {3, 5}});
  sparse.set(4, 7);
  sparse.set(14, -1);
  const std::optional<BitmaskEncoded> encoded = encode_bitmask(sparse);
  ASSERT_TRUE(encoded);
  EXPECT_EQ(encoded->nonzeros, 2);
  EXPECT_EQ(encoded->bytes.size(), 2u + 2 * 4);  // 15 bits, two int32 values
  std::string error;
  const std::optional<ir::Tensor> decoded = decode_bitmask(encoded->bytes, sparse.type(), 2, &error);
  ASSERT_TRUE(decoded) << error;
  EXPECT_EQ(decoded->bytes(), sparse.bytes());

  ir::Tensor dense(ir::TensorType{ir::DType::F32, {8}});
  for (int64_t i = 0; i < 8; ++i) dense.set(i, i == 0 ? 0.0 : 1.5);
  // One zero in 8 saves 4 bytes for a bitmask of 1: 29 bytes for 32.
  ASSERT_TRUE(encode_bitmask(dense));
  EXPECT_EQ(encode_bitmask(dense)->bytes.size(), 29u);
  dense.set(0, 1.0);
  EXPECT_FALSE(encode_bitmask(dense)) << "no zeros: stored dense";
}

TEST(SparseWeights, InconsistentEncodingsAreErrors) {
  const ir::TensorType type{ir::DType::F32, {10}};
  std::string error;
  std::string bytes(2 + 4, '\0');
  bytes[0] = 0x01;  // element 0 set, one value
  EXPECT_TRUE(decode_bitmask(bytes, type, 1, &error)) << error;
  EXPECT_FALSE(decode_bitmask(bytes, type, 2, &error));
  EXPECT_EQ(error, "6 bytes do not hold the bitmask of a f32[10] and 2 nonzeros (10 bytes)");
  bytes[0] = 0x03;  // two set, one value
  EXPECT_FALSE(decode_bitmask(bytes, type, 1, &error));
  EXPECT_EQ(error, "the bitmask marks 2 elements, the entry says 1 nonzeros");
  bytes[0] = 0x00;
  bytes[1] = 0x04;  // element 10 of 10
  EXPECT_FALSE(decode_bitmask(bytes, type, 1, &error));
  EXPECT_EQ(error, "the bitmask marks elements past the last of 10");
  EXPECT_FALSE(decode_bitmask(bytes, type, 11, &error));
  EXPECT_EQ(error, "11 nonzeros in a tensor of 10 elements");
}

// A reader meets an encoding it does not know (a newer writer's) as the file's error.
TEST(Package, UnknownWeightEncodingIsNamed) {
  Package package = make_package();
  std::string bytes = serialize_package(package);
  const size_t at = bytes.find("\"encoding\":\"bitmask\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + 12, 7, "runs_of");  // same length: the sections stay where they are
  uint64_t manifest_size = 0;
  std::memcpy(&manifest_size, bytes.data() + 24, 8);
  put_u32(bytes, 32, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + 64),
                                                 static_cast<uInt>(manifest_size))));
  reseal_header(bytes);
  const std::string error = error_of(bytes);
  EXPECT_NE(error.find("weights 'conv1.bias': unknown encoding 'runs_of' (this kiln reads 'bitmask')"),
            std::string::npos)
      << error;
}

TEST(Package, BackwardLibraryCallsRoundTrip) {
  ir::Graph graph = ir::parse_graph(R"(graph @g(%dy: f32[2,16,8,8], %w: f32[16,4,3,3], %x: f32[2,8,16,16])
    -> (f32[2,8,16,16], f32[16,4,3,3]) {
  %dx = conv2d_grad_input(%dy, %w) {shape = [2,8,16,16], stride = [2,2], pad = [1,1,1,1], groups = 2} : f32[2,8,16,16]
  %dw = conv2d_grad_weight(%dy, %x) {shape = [16,4,3,3], stride = [2,2], pad = [1,1,1,1], groups = 2} : f32[16,4,3,3]
  return %dx, %dw
})", "grads.ir");
  const codegen::Program program = codegen::emit_program(graph, codegen::LibrarySelection{false, true});
  ASSERT_EQ(program.kernels.size(), 2u);
  const Json json = program_to_json(program);
  const std::string path = "grads.kiln";
  const codegen::Program read = program_from_json(JsonAt(json, "", path));
  validate_program(read, path, "program");
  EXPECT_EQ(program_to_json(read), json);
  const codegen::ConvDirection want[] = {codegen::ConvDirection::BackwardData,
                                         codegen::ConvDirection::BackwardFilter};
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(read.kernels[i].library.has_value()) << read.kernels[i].name;
    EXPECT_EQ(read.kernels[i].library->conv()->direction, want[i]);
    EXPECT_EQ(read.kernels[i].library->dy_arg, 0);
  }
}

// An NHWC convolution's call keeps its layout through the program's JSON (cuDNN then takes NHWC
// descriptors); an unknown layout is the file's error.
TEST(Package, NhwcLibraryCallsRoundTrip) {
  ir::Graph graph = ir::parse_graph(R"(graph @g(%x: f32[2,16,16,8], %w: f32[16,3,3,8]) -> (f32[2,8,8,16]) {
  %y = conv2d(%x, %w) {layout = "nhwc", stride = [2,2], pad = [1,1,1,1]} : f32[2,8,8,16]
  return %y
})", "nhwc.ir");
  const codegen::Program program = codegen::emit_program(graph, codegen::LibrarySelection{false, true});
  ASSERT_EQ(program.kernels.size(), 1u);
  ASSERT_TRUE(program.kernels[0].library.has_value());
  const codegen::ConvCall& conv = *program.kernels[0].library->conv();
  EXPECT_TRUE(conv.nhwc);
  // The logical dims, as cuDNN's NHWC descriptors take them.
  EXPECT_EQ((std::vector<int64_t>{conv.n, conv.c, conv.h, conv.w, conv.k, conv.r, conv.s, conv.p, conv.q}),
            (std::vector<int64_t>{2, 8, 16, 16, 16, 3, 3, 8, 8}));
  Json json = program_to_json(program);
  const std::string path = "nhwc.kiln";
  const codegen::Program read = program_from_json(JsonAt(json, "", path));
  validate_program(read, path, "program");
  EXPECT_EQ(program_to_json(read), json);
  EXPECT_TRUE(read.kernels[0].library->conv()->nhwc);
  json["kernels"][0]["library"]["conv"]["layout"] = "chwn";
  try {
    program_from_json(JsonAt(json, "", path));
    ADD_FAILURE() << "an unknown layout was read";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("unknown layout 'chwn'; expected nchw or nhwc"), std::string::npos)
        << error.what();
  }
}

// A library call on bf16 tensors keeps its dtype; one whose dtype is not its buffers' (the
// library would read f32 bytes as bf16) is the file's error, as is a dtype no call takes.
TEST(Package, SixteenBitLibraryCallsRoundTripAndAreChecked) {
  ir::Graph graph = ir::parse_graph(R"(graph @g(%x: bf16[8,64], %w: bf16[10,64], %b: bf16[10]) -> (bf16[8,10]) {
  %y = dense(%x, %w, %b) : bf16[8,10]
  return %y
})", "dense.ir");
  const codegen::Program program =
      codegen::emit_program(graph, codegen::LibrarySelection{true, false}, codegen::Precision::Bf16);
  ASSERT_EQ(program.kernels.size(), 1u);
  ASSERT_TRUE(program.kernels[0].library.has_value());
  const std::string path = "dense.kiln";
  Json json = program_to_json(program);
  EXPECT_EQ(json["kernels"][0]["library"]["dtype"], "bf16");
  const codegen::Program read = program_from_json(JsonAt(json, "", path));
  validate_program(read, path, "program");
  EXPECT_EQ(read.kernels[0].library->dtype, ir::DType::BF16);
  EXPECT_EQ(program_to_json(read), json);

  json["kernels"][0]["library"]["dtype"] = "f16";
  const codegen::Program damaged = program_from_json(JsonAt(json, "", path));
  std::string message = testing_util::error_of([&] { validate_program(damaged, path, "program"); }).message;
  EXPECT_NE(message.find("kernel 'dense_0': library call on f16 tensors, and its argument 3 is bf16"),
            std::string::npos)
      << message;
  json["kernels"][0]["library"]["dtype"] = "i32";
  message = testing_util::error_of([&] { program_from_json(JsonAt(json, "", path)); }).message;
  EXPECT_NE(message.find("library calls take f32, bf16 or f16 tensors, not 'i32'"), std::string::npos)
      << message;
}

TEST(Package, TruncatedAnywhereIsTruncated) {
  const std::string bytes = serialize_package(make_package());
  for (size_t size : {size_t{10}, size_t{63}, size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string error = error_of(std::string_view(bytes).substr(0, size));
    EXPECT_NE(error.find("m.kiln: error: truncated package"), std::string::npos) << size << ": " << error;
  }
}

TEST(Package, WrongMagic) {
  std::string bytes = serialize_package(make_package());
  bytes[1] = 'X';
  EXPECT_EQ(error_of(bytes),
            "m.kiln: error: not a kiln package (wrong magic bytes); `kiln compile MODEL -o FILE.kiln` makes one");
  EXPECT_NE(error_of("{\"format\": \"kiln.model\"}").find("not a kiln package"), std::string::npos);
}

TEST(Package, NewerFormatVersion) {
  std::string bytes = serialize_package(make_package());
  put_u32(bytes, 8, kPackageFormatVersion + 1);
  reseal_header(bytes);
  EXPECT_EQ(error_of(bytes), fmt::format("m.kiln: error: package format version {} is newer than this kiln "
                                         "reads ({}); use a newer kiln, or recompile the model with this one",
                                         kPackageFormatVersion + 1, kPackageFormatVersion));
}

TEST(Package, ChecksumMismatchNamesTheSection) {
  const std::string good = serialize_package(make_package());
  // One flipped bit in the last byte: the weights section comes last.
  std::string bytes = good;
  bytes.back() = static_cast<char>(bytes.back() ^ 1);
  EXPECT_NE(error_of(bytes).find("m.kiln: error: corrupt package: checksum mismatch in section 'weights'"),
            std::string::npos)
      << error_of(bytes);
  // In the manifest.
  bytes = good;
  bytes[100] = static_cast<char>(bytes[100] ^ 1);
  EXPECT_EQ(error_of(bytes), "m.kiln: error: corrupt package: checksum mismatch in the manifest");
  // In the header (say, the file size).
  bytes = good;
  bytes[16] = static_cast<char>(bytes[16] ^ 1);
  EXPECT_EQ(error_of(bytes), "m.kiln: error: corrupt package: the header's checksum does not match");
}

TEST(Package, LargeSectionsChecksumInPieces) {
  // A weights section past 16 MB has its CRC-32 computed in pieces on several threads and
  // joined: the stored value is still zlib's CRC of the whole section, and a flipped bit in
  // either half is caught.
  Package package = make_package();
  ir::Tensor big(ir::TensorType{ir::DType::F32, {5 << 20}});  // 20 MB
  for (int64_t i = 0; i < big.num_elements(); ++i) big.set(i, static_cast<double>(i % 9973) - 4000.0);
  package.weights.emplace("extra", big);
  const std::string good = serialize_package(package);
  uint64_t manifest_size = 0;  // the header's little-endian u64 at byte 24
  for (int i = 7; i >= 0; --i) manifest_size = (manifest_size << 8) | static_cast<unsigned char>(good[24 + i]);
  const Json manifest = Json::parse(std::string_view(good).substr(64, manifest_size));
  bool found = false;
  for (const Json& section : manifest.at("sections")) {
    if (section.at("name") != "weights") continue;
    found = true;
    const size_t offset = section.at("offset").get<size_t>(), size = section.at("bytes").get<size_t>();
    ASSERT_GT(size, size_t{16} << 20);
    const uLong serial = crc32(0, reinterpret_cast<const Bytef*>(good.data() + offset), static_cast<uInt>(size));
    EXPECT_EQ(section.at("crc32").get<uint32_t>(), static_cast<uint32_t>(serial));
    for (size_t at : {offset + size / 4, offset + size - size / 4}) {
      std::string bytes = good;
      bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
      EXPECT_NE(error_of(bytes).find("checksum mismatch in section 'weights'"), std::string::npos) << at;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(parse_package(good, "m.kiln").weights.at("extra").byte_size(), big.byte_size());
}

TEST(Package, ArchMissingWithoutPtx) {
  CudaBinary binary = make_package().programs[0].binary;
  EXPECT_NO_THROW(require_code_for(binary, 90, "m.kiln"));
  EXPECT_NO_THROW(require_code_for(binary, 86, "m.kiln"));  // the PTX, JIT-compiled
  binary.ptx.clear();
  binary.cubins.erase("sm_90");
  EXPECT_NO_THROW(require_code_for(binary, 80, "m.kiln"));
  try {
    require_code_for(binary, 90, "m.kiln");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "m.kiln: error: the package has no code for this GPU (sm_90): it holds "
                               "cubins for sm_80; recompile it with `kiln compile --arch sm_90`, or "
                               "without --no-ptx");
  }
}

TEST(Package, InconsistentKernelTableIsTheFilesError) {
  Package package = make_package();
  package.programs[0].program.kernels[1].args[0] = 999;
  const std::string error = error_of(serialize_package(package));
  EXPECT_NE(error.find("m.kiln: error: inference program 'mnist_cnn': kernel 'max_pool2d_1' names "
                       "buffer 999"),
            std::string::npos)
      << error;
}

// Kernels of identical code share one function (Kernel::entry): it survives the round trip, and a
// kernel that launches a function no earlier kernel defines is the file's error.
TEST(Package, SharedFunctionsRoundTripAndAreChecked) {
  ir::Graph graph = ir::parse_graph(R"(graph @g(%x: f32[4,16], %a: f32[16,16], %b: f32[16,16]) -> (f32[4,16]) {
  %h = matmul(%x, %a) : f32[4,16]
  %y = matmul(%h, %b) : f32[4,16]
  return %y
})", "twice.ir");
  const codegen::Program program = codegen::emit_program(graph);
  ASSERT_EQ(program.kernels.size(), 2u);
  EXPECT_EQ(program.kernels[0].function(), "matmul_0");
  EXPECT_EQ(program.kernels[1].entry, "matmul_0");
  EXPECT_EQ(program.source.find("matmul_1("), std::string::npos) << "the second body is not emitted";
  const std::string path = "twice.kiln";
  const codegen::Program read = program_from_json(JsonAt(program_to_json(program), "", path));
  validate_program(read, path, "program");
  EXPECT_EQ(read.kernels[1].function(), "matmul_0");

  Json json = program_to_json(program);
  json["kernels"][0]["entry"] = "matmul_1";  // the first kernel launches one defined after it
  const codegen::Program damaged = program_from_json(JsonAt(json, "", path));
  const std::string message = testing_util::error_of([&] { validate_program(damaged, path, "program"); }).message;
  EXPECT_NE(message.find("kernel 'matmul_0' launches function 'matmul_1', which no earlier kernel defines"),
            std::string::npos)
      << message;
}

TEST(Package, MissingWeightsAreNamed) {
  Package package = make_package();
  package.weights.erase(package.weights.begin());
  const std::string error = error_of(serialize_package(package));
  EXPECT_NE(error.find("m.kiln: error: the package has no weights for parameter"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln::runtime
