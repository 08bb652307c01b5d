// .npy reading and writing: round trips, header variants, every error, and NumPy interop.
#include "compiler/npy.h"
#include "compiler/tensor_file_util.h"

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

// A .npy file by hand: `header` is the dict text (a newline is appended).
std::string npy_file(std::string header, const std::string& data, int major = 1) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  header += '\n';
  const int length_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < length_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <typename T>
std::string raw_values(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

Tensor counting_tensor(TensorType type) {
  Tensor tensor(type);
  for (int64_t i = 0; i < tensor.num_elements(); ++i)
    tensor.set(i, type.dtype == DType::Bool ? i % 3 == 0 : double(i) * 1.5 - 7);
  return tensor;
}

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  const auto dir = fresh_test_dir();
  for (DType dtype : {DType::F32, DType::F16, DType::I32, DType::I64, DType::Bool, DType::I8,
                      DType::U8, DType::I16, DType::U16, DType::U32, DType::U64}) {
    for (const ir::Shape& shape : {ir::Shape{}, ir::Shape{3}, ir::Shape{2, 3, 4}}) {
      const Tensor tensor = counting_tensor({dtype, shape});
      const std::string path = (dir / "t.npy").string();
      write_npy(path, tensor);
      const Tensor back = read_npy(path);
      EXPECT_EQ(back.type(), tensor.type()) << tensor.type().to_string();
      EXPECT_EQ(back.bytes(), tensor.bytes()) << tensor.type().to_string();
    }
  }
  // Only the file itself is left: the temporary was renamed into place.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

TEST(Npy, WritesAlignedVersionOneHeader) {
  const auto dir = fresh_test_dir();
  write_npy((dir / "a.npy").string(), counting_tensor({DType::F32, {2, 3}}));
  const std::string bytes = read_raw(dir / "a.npy");
  ASSERT_GT(bytes.size(), 10u);
  EXPECT_EQ(bytes[6], 1);
  const size_t header_size = uint8_t(bytes[8]) | (uint8_t(bytes[9]) << 8);
  EXPECT_EQ((10 + header_size) % 64, 0u);
  EXPECT_EQ(bytes[10 + header_size - 1], '\n');
  EXPECT_NE(bytes.find("'shape': (2, 3)"), std::string::npos);
}

TEST(Npy, WritesBf16AsF32) {
  const auto dir = fresh_test_dir();
  const Tensor tensor = ir::Tensor::from_doubles({DType::BF16, {3}}, {1.5, -2.0, 0.25});
  write_npy((dir / "b.npy").string(), tensor);
  const Tensor back = read_npy((dir / "b.npy").string());
  EXPECT_EQ(back.type().to_string(), "f32[3]");
  EXPECT_EQ(back.to_doubles(), (std::vector<double>{1.5, -2.0, 0.25}));
}

// <f8 stays f64; an f32 input given it (NumPy's default float) takes it rounded, and a value
// beyond f32's range is an error naming the element, not an infinity.
TEST(Npy, ReadsF64AsF64AndAnF32InputRoundsIt) {
  const auto dir = fresh_test_dir();
  write_raw(dir / "d.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                    raw_values<double>({0.5, 1e-3})));
  const Tensor tensor = read_npy((dir / "d.npy").string());
  EXPECT_EQ(tensor.type().to_string(), "f64[2]");
  EXPECT_EQ(tensor.get(1), 1e-3);
  const Tensor as_f32 = compiler::conform_input(tensor, {ir::DType::F32, {2}}, "d.npy");
  EXPECT_EQ(as_f32.type().to_string(), "f32[2]");
  EXPECT_EQ(as_f32.get(1), double(1e-3f));
  // An f64 input keeps it; another shape or an integer input is left to the caller's check.
  EXPECT_EQ(compiler::conform_input(tensor, {ir::DType::F64, {2}}, "d.npy").get(1), 1e-3);
  EXPECT_EQ(compiler::conform_input(tensor, {ir::DType::F32, {1, 2}}, "d.npy").dtype(), ir::DType::F64);
  EXPECT_EQ(compiler::conform_input(tensor, {ir::DType::I32, {2}}, "d.npy").dtype(), ir::DType::F64);
  const Tensor huge = Tensor::from_doubles({ir::DType::F64, {2}}, {1.0, 1e300});
  try {
    (void)compiler::conform_input(huge, {ir::DType::F32, {2}}, "d.npy");
    ADD_FAILURE() << "1e300 became an f32";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("d.npy: error: f64 element 1 (1.0000000000000001e+300) "
                                             "is beyond the range of f32"),
              std::string::npos)
        << error.what();
  }
}

TEST(Npy, ReadsVersionsTwoAndThreeAndHeaderVariants) {
  const auto dir = fresh_test_dir();
  const std::string data = raw_values<int32_t>({1, 2, 3, 4, 5, 6});
  // Other key orders, double quotes, no trailing comma, Python 2 longs, extra spaces.
  const std::string headers[] = {
      "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }",
      "{\"shape\": (2,3), \"descr\": \"<i4\", \"fortran_order\": False}",
      "{ 'fortran_order' : False , 'shape' : ( 2L , 3L ) , 'descr' : '<i4' }",
  };
  for (int major : {1, 2, 3}) {
    for (const std::string& header : headers) {
      write_raw(dir / "v.npy", npy_file(header, data, major));
      const Tensor tensor = read_npy((dir / "v.npy").string());
      EXPECT_EQ(tensor.type().to_string(), "i32[2,3]") << header;
      EXPECT_EQ(tensor.get(5), 6) << header;
    }
  }
}

TEST(Npy, ReadsScalarAndNormalizesBools) {
  const auto dir = fresh_test_dir();
  write_raw(dir / "s.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                                    raw_values<float>({2.5f})));
  const Tensor scalar = read_npy((dir / "s.npy").string());
  EXPECT_EQ(scalar.type().to_string(), "f32[]");
  EXPECT_EQ(scalar.get(0), 2.5);

  write_raw(dir / "b.npy", npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                    std::string("\x00\x01\x07", 3)));
  const Tensor bools = read_npy((dir / "b.npy").string());
  EXPECT_EQ(bools.bytes()[2], std::byte{1});
}

// Writes `contents` to a file and returns the message of the error that reading it gives.
std::string read_error(const std::string& contents) {
  const auto path = fresh_test_dir() / "x.npy";
  write_raw(path, contents);
  const Diagnostic diagnostic = error_of([&] { read_npy(path.string()); });
  EXPECT_EQ(diagnostic.location, path.string());
  return diagnostic.message;
}

std::string header_for(const std::string& descr, const std::string& shape,
                       const std::string& order = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
}

TEST(Npy, RejectsUnsupportedDtypes) {
  const std::string kiln_reads = "kiln reads <f4, <f2, <f8, |i1, <i2, <i4, <i8, |u1, <u2, <u4, <u8, |b1";
  EXPECT_EQ(read_error(npy_file(header_for(">f4", "(1,)"), "abcd")),
            "unsupported dtype '>f4' (big-endian); " + kiln_reads);
  EXPECT_EQ(read_error(npy_file(header_for("<c8", "(1,)"), "abcdefgh")),
            "unsupported dtype '<c8'; " + kiln_reads);
  EXPECT_EQ(read_error(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, "
                                "'shape': (1,), }",
                                "abcd")),
            "unsupported dtype: structured arrays are not supported; " + kiln_reads);
}

TEST(Npy, RejectsFortranOrder) {
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(1,)", "True"), "abcd")),
            "Fortran-order arrays are not supported");
}

TEST(Npy, RejectsBadMagicAndVersion) {
  EXPECT_EQ(read_error("PK\x03\x04 this is a zip"), "not a .npy file (bad magic)");
  EXPECT_EQ(read_error("\x93NUM"), "not a .npy file (bad magic)");
  EXPECT_EQ(read_error(""), "not a .npy file (bad magic)");
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(1,)"), "abcd", 4)),
            "unsupported .npy format version 4.0; kiln reads 1.0, 2.0 and 3.0");
}

TEST(Npy, RejectsTruncatedAndOverlongData) {
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(28, 28)"), std::string(100, 'x'))),
            "file is truncated: header says 784 elements (3136 bytes), 100 bytes of data");
  EXPECT_EQ(read_error(npy_file(header_for("<i8", "()"), std::string(12, 'x'))),
            "file is longer than its header says: header says 1 element (8 bytes), 12 bytes of "
            "data");
  // The header length points past the end of the file.
  EXPECT_EQ(read_error(std::string("\x93NUMPY\x01\x00\xff\x00{'descr'", 17)),
            "file is truncated: the header length is 255 bytes, the file has 17 bytes in all");
  EXPECT_EQ(read_error(std::string("\x93NUMPY\x02\x00\x10", 9)),
            "file is truncated: it ends inside the header length");
}

TEST(Npy, RejectsZeroSizeDimsButNotScalars) {
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(0, 3)"), "")),
            "shape (0, 3) has a zero-size dimension; kiln tensors need every dimension >= 1");
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(0,)"), "")),
            "shape (0,) has a zero-size dimension; kiln tensors need every dimension >= 1");
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(16777216, 16777216, 2)"), "")),
            "shape (16777216, 16777216, 2) has more than 2^48 elements");
}

TEST(Npy, RejectsMalformedHeaders) {
  EXPECT_EQ(read_error(npy_file("{'descr': '<f4', 'shape': (1,)}", "abcd")),
            "malformed header: it needs the keys 'descr', 'fortran_order' and 'shape'");
  EXPECT_EQ(read_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                "'extra': 1}",
                                "abcd")),
            "malformed header: unexpected key 'extra'");
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "(-1,)"), "abcd")),
            "malformed header: 'shape' must hold non-negative integers");
  EXPECT_EQ(read_error(npy_file(header_for("<f4", "'3'"), "abcd")),
            "malformed header: 'shape' is not a tuple");
  EXPECT_EQ(read_error(npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", "abcd")),
            "malformed header: 'fortran_order' is not True or False");
  const std::string unterminated = read_error(npy_file("{'descr': '<f4", "abcd"));
  EXPECT_EQ(unterminated.rfind("malformed header: unterminated string at offset 14 in {", 0), 0u)
      << unterminated;
  const std::string junk = read_error(npy_file("{'descr': <f4}", "abcd"));
  EXPECT_EQ(junk.rfind("malformed header: unexpected character '<'", 0), 0u) << junk;
}

TEST(Npy, ReportsMissingFile) {
  const auto path = fresh_test_dir() / "missing.npy";
  const Diagnostic diagnostic = error_of([&] { read_npy(path.string()); });
  EXPECT_EQ(diagnostic.location, path.string());
  EXPECT_EQ(diagnostic.message, "cannot open file (No such file or directory)");
}

TEST(Npy, FailedWriteLeavesNothingBehind) {
  const auto dir = fresh_test_dir();
  const auto path = dir / "no_such_dir" / "t.npy";
  const Diagnostic diagnostic =
      error_of([&] { write_npy(path.string(), counting_tensor({DType::F32, {2}})); });
  EXPECT_EQ(diagnostic.location, path.string());
  EXPECT_EQ(diagnostic.message, "cannot create file (No such file or directory)");
  EXPECT_FALSE(std::filesystem::exists(path));

  // Overwriting replaces the old contents whole.
  write_npy((dir / "t.npy").string(), counting_tensor({DType::F32, {100}}));
  write_npy((dir / "t.npy").string(), counting_tensor({DType::I64, {2}}));
  EXPECT_EQ(read_npy((dir / "t.npy").string()).type().to_string(), "i64[2]");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
}

// Files written by NumPy itself, and kiln's files read by NumPy.
TEST(Npy, InteroperatesWithNumpy) {
  if (!testing_util::have_numpy()) GTEST_SKIP() << "/usr/bin/python3 cannot import numpy";
  const auto dir = fresh_test_dir();
  const std::string script =
      "import numpy as np, sys\n"
      "d = sys.argv[1]\n"
      "np.save(d + '/f32.npy', np.arange(6, dtype='<f4').reshape(2, 3) / 4)\n"
      "np.save(d + '/f16.npy', np.array([0.5, -1.25], dtype='<f2'))\n"
      "np.save(d + '/f64.npy', np.array([[1e-3], [2.5]], dtype='<f8'))\n"
      "np.save(d + '/i32.npy', np.array([-7, 7], dtype='<i4'))\n"
      "np.save(d + '/i64.npy', np.array([2**40], dtype='<i8'))\n"
      "np.save(d + '/bool.npy', np.array([True, False, True]))\n"
      "np.save(d + '/i8.npy', np.array([-128, 127], dtype='i1'))\n"
      "np.save(d + '/u8.npy', np.array([0, 255], dtype='u1'))\n"
      "np.save(d + '/i16.npy', np.array([-32768], dtype='<i2'))\n"
      "np.save(d + '/u16.npy', np.array([65535], dtype='<u2'))\n"
      "np.save(d + '/u32.npy', np.array([2**32 - 1], dtype='<u4'))\n"
      "np.save(d + '/u64.npy', np.array([2**64 - 1, 2**63 + 1], dtype='<u8'))\n"
      "np.save(d + '/scalar.npy', np.float32(3.5))\n"
      "np.save(d + '/fortran.npy', np.asfortranarray(np.ones((2, 3), dtype='<f4')))\n"
      "np.save(d + '/big.npy', np.ones(3, dtype='>f4'))\n"
      "with open(d + '/v2.npy', 'wb') as f:\n"
      "    np.lib.format.write_array(f, np.arange(4, dtype='<i8'), version=(2, 0))\n";
  write_raw(dir / "make.py", script);
  ASSERT_EQ(std::system(("/usr/bin/python3 " + (dir / "make.py").string() + " " + dir.string())
                            .c_str()),
            0);
  auto read = [&](const char* name) { return read_npy((dir / name).string()); };
  EXPECT_EQ(read("f32.npy").type().to_string(), "f32[2,3]");
  EXPECT_EQ(read("f32.npy").get(5), 1.25);
  EXPECT_EQ(read("f16.npy").to_doubles(), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(read("f64.npy").type().to_string(), "f64[2,1]");
  EXPECT_EQ(read("f64.npy").get(0), 1e-3);
  EXPECT_EQ(read("i32.npy").to_doubles(), (std::vector<double>{-7, 7}));
  EXPECT_EQ(read("i64.npy").get(0), double(int64_t{1} << 40));
  EXPECT_EQ(read("bool.npy").to_doubles(), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(read("i8.npy").to_doubles(), (std::vector<double>{-128, 127}));
  EXPECT_EQ(read("u8.npy").to_doubles(), (std::vector<double>{0, 255}));
  EXPECT_EQ(read("i16.npy").to_doubles(), (std::vector<double>{-32768}));
  EXPECT_EQ(read("u16.npy").to_doubles(), (std::vector<double>{65535}));
  EXPECT_EQ(read("u32.npy").to_doubles(), (std::vector<double>{4294967295.0}));
  {  // u64 is kept bit for bit (a double could not hold 2^63 + 1)
    const Tensor u64 = read("u64.npy");
    EXPECT_EQ(u64.type().to_string(), "u64[2]");
    uint64_t values[2];
    std::memcpy(values, u64.data(), sizeof values);
    EXPECT_EQ(values[0], ~uint64_t{0});
    EXPECT_EQ(values[1], (uint64_t{1} << 63) + 1);
  }
  EXPECT_EQ(read("scalar.npy").type().to_string(), "f32[]");
  EXPECT_EQ(read("v2.npy").to_doubles(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(error_of([&] { read("fortran.npy"); }).message,
            "Fortran-order arrays are not supported");
  EXPECT_EQ(error_of([&] { read("big.npy"); }).message.rfind("unsupported dtype '>f4'", 0), 0u);

  // NumPy reads what kiln writes, every dtype, bit for bit.
  write_npy((dir / "k_f32.npy").string(), counting_tensor({DType::F32, {2, 2}}));
  write_npy((dir / "k_f16.npy").string(), counting_tensor({DType::F16, {3}}));
  write_npy((dir / "k_i64.npy").string(), counting_tensor({DType::I64, {}}));
  write_npy((dir / "k_bool.npy").string(), counting_tensor({DType::Bool, {4}}));
  write_npy((dir / "k_u8.npy").string(), Tensor::from_doubles({DType::U8, {3}}, {0, 7, 255}));
  write_npy((dir / "k_i16.npy").string(), Tensor::from_doubles({DType::I16, {2}}, {-300, 300}));
  const std::string check =
      "import numpy as np, sys\n"
      "d = sys.argv[1]\n"
      "a = np.load(d + '/k_f32.npy'); assert a.dtype == '<f4' and a.shape == (2, 2)\n"
      "assert a.tolist() == [[-7.0, -5.5], [-4.0, -2.5]], a\n"
      "a = np.load(d + '/k_f16.npy'); assert a.dtype == '<f2' and a.tolist() == [-7, -5.5, -4]\n"
      "a = np.load(d + '/k_i64.npy'); assert a.dtype == '<i8' and a.shape == () and a == -7\n"
      "a = np.load(d + '/k_bool.npy'); assert a.dtype == bool\n"
      "assert a.tolist() == [True, False, False, True], a\n"
      "a = np.load(d + '/k_u8.npy'); assert a.dtype == 'u1' and a.tolist() == [0, 7, 255], a\n"
      "a = np.load(d + '/k_i16.npy'); assert a.dtype == '<i2' and a.tolist() == [-300, 300], a\n";
  write_raw(dir / "check.py", check);
  EXPECT_EQ(std::system(("/usr/bin/python3 " + (dir / "check.py").string() + " " + dir.string())
                            .c_str()),
            0);
}

}  // namespace
}  // namespace kiln::compiler
