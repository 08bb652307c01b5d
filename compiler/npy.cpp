// NumPy .npy reading and writing.
//
// Layout (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html): the magic
// "\x93NUMPY", a major and minor version byte, the header length (2 bytes little-endian in 1.0,
// 4 bytes in 2.0 and 3.0), then the header: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and a newline, then the raw data. The header is parsed with a small
// Python-literal parser rather than pattern matching, so key order, spacing, quotes and the
// trailing comma may vary as they do between NumPy versions and other writers. The parser does
// not recurse: a header holds one dict whose values are scalars or a flat tuple (the shape); a
// value nested deeper (a structured dtype's field list) is skipped with a depth counter and
// refused for what it is. A key given twice is an error.
#include "compiler/npy.h"

#include <cctype>
#include <fstream>
#include <set>
#include <variant>

#include "compiler/file_kind.h"
#include "compiler/json_text.h"
#include "compiler/tensor_file_util.h"
#include "ir/diagnostic.h"

namespace kiln::compiler {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kPreambleSize = 8;      // magic + major + minor
constexpr size_t kHeaderAlignment = 64;  // NumPy aligns the data start for memory mapping

struct NpyDType {
  std::string_view descr;
  ir::DType dtype;
  size_t item_size;  // bytes per stored element
};

// <f8 reads as f64; an f32 input given f64 data rounds it where it binds (conform_input).
constexpr NpyDType kNpyDTypes[] = {
    {"<f4", ir::DType::F32, 4}, {"<f2", ir::DType::F16, 2}, {"<i4", ir::DType::I32, 4},
    {"<i8", ir::DType::I64, 8}, {"|b1", ir::DType::Bool, 1}, {"<f8", ir::DType::F64, 8},
    {"|i1", ir::DType::I8, 1},  {"|u1", ir::DType::U8, 1},   {"<i2", ir::DType::I16, 2},
    {"<u2", ir::DType::U16, 2}, {"<u4", ir::DType::U32, 4},  {"<u8", ir::DType::U64, 8},
    {"<i1", ir::DType::I8, 1},  {"<u1", ir::DType::U8, 1},  // NumPy writes '|', accepts both
};
constexpr std::string_view kSupportedList = "<f4, <f2, <f8, |i1, <i2, <i4, <i8, |u1, <u2, <u4, <u8, |b1";

// A Python literal as it appears in a .npy header. Tuples and lists are both `items`.
struct PyValue {
  enum class Kind { String, Bool, Int, Sequence, None } kind = Kind::None;
  std::string text;
  bool flag = false;
  int64_t number = 0;
  std::vector<PyValue> items;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  std::vector<std::pair<std::string, PyValue>> parse_dict() {
    expect('{');
    std::vector<std::pair<std::string, PyValue>> entries;
    std::set<std::string> seen;
    while (!consume('}')) {
      const size_t key_pos = pos_;
      PyValue key = parse_value();
      if (key.kind != PyValue::Kind::String) fail("expected a string key");
      if (!seen.insert(key.text).second) {
        pos_ = key_pos;
        fail("key '" + escape_for_message(key.text, 40) + "' appears twice");
      }
      expect(':');
      entries.emplace_back(key.text, parse_value());
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the dict");
    return entries;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_, "malformed header: " + what + " at offset " + std::to_string(pos_) +
                           " in " + escape_for_message(text_, 200));
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  bool consume_word(std::string_view word) {
    skip_space();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // A value of the dict; `nested` inside a tuple, where only scalars may appear.
  PyValue parse_value(bool nested = false) {
    skip_space();
    if (pos_ >= text_.size()) fail("unexpected end");
    const char c = text_[pos_];
    PyValue value;
    if (c == '\'' || c == '"') {
      value.kind = PyValue::Kind::String;
      value.text = parse_string(c);
    } else if ((c == '(' || c == '[') && nested) {
      // A structured dtype's field list ([('a', '<f4')]) or a nested shape: skipped without
      // recursion and reported by interpret_header as what it is.
      value.kind = PyValue::Kind::Sequence;
      skip_nested();
    } else if (c == '(' || c == '[') {
      value.kind = PyValue::Kind::Sequence;
      value.items = parse_sequence(c == '(' ? ')' : ']');
    } else if (consume_word("True")) {
      value.kind = PyValue::Kind::Bool;
      value.flag = true;
    } else if (consume_word("False")) {
      value.kind = PyValue::Kind::Bool;
    } else if (consume_word("None")) {
      value.kind = PyValue::Kind::None;
    } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      value.kind = PyValue::Kind::Int;
      value.number = parse_int();
    } else {
      fail("unexpected character '" + std::string(1, c) + "'");
    }
    return value;
  }

  std::string parse_string(char quote) {
    ++pos_;
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      out += text_[pos_++];
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  // Skips a bracketed value with a depth counter (strings may hold brackets).
  void skip_nested() {
    int depth = 0;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\'' || c == '"') {
        parse_string(c);
        continue;
      }
      ++pos_;
      if (c == '(' || c == '[') ++depth;
      if ((c == ')' || c == ']') && --depth == 0) return;
    }
    fail("unbalanced brackets");
  }

  std::vector<PyValue> parse_sequence(char close) {
    ++pos_;
    std::vector<PyValue> items;
    while (!consume(close)) {
      items.push_back(parse_value(/*nested=*/true));
      if (!consume(',')) {
        expect(close);
        break;
      }
    }
    return items;
  }

  int64_t parse_int() {
    const bool negative = text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_])))
      fail("expected a digit");
    int64_t value = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      // Anything this large is rejected as a shape later; stop before int64 overflows.
      if (value > (int64_t{1} << 56)) fail("integer too large");
      value = value * 10 + (text_[pos_++] - '0');
    }
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 writers: (3L, 4L)
    return negative ? -value : value;
  }

  const std::string& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

std::string python_shape(const ir::Shape& shape) {
  if (shape.size() == 1) return "(" + std::to_string(shape[0]) + ",)";
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + ")";
}

const NpyDType& lookup_descr(const std::string& path, const std::string& descr) {
  for (const NpyDType& entry : kNpyDTypes)
    if (entry.descr == descr) return entry;
  std::string why;
  if (!descr.empty() && descr[0] == '>') why = " (big-endian)";
  throw Error(path, "unsupported dtype '" + escape_for_message(descr, 40) + "'" + why + "; kiln reads " +
                        std::string(kSupportedList));
}

struct NpyHeader {
  const NpyDType* dtype = nullptr;
  ir::Shape shape;
};

// Interprets the parsed header dict: exactly the keys descr, fortran_order and shape.
NpyHeader interpret_header(const std::string& path,
                           const std::vector<std::pair<std::string, PyValue>>& entries) {
  NpyHeader header;
  bool have_order = false;
  bool have_shape = false;
  for (const auto& [key, value] : entries) {
    if (key == "descr") {
      if (value.kind != PyValue::Kind::String)
        throw Error(path, "unsupported dtype: structured arrays are not supported; kiln reads " +
                              std::string(kSupportedList));
      header.dtype = &lookup_descr(path, value.text);
    } else if (key == "fortran_order") {
      if (value.kind != PyValue::Kind::Bool)
        throw Error(path, "malformed header: 'fortran_order' is not True or False");
      if (value.flag) throw Error(path, "Fortran-order arrays are not supported");
      have_order = true;
    } else if (key == "shape") {
      if (value.kind != PyValue::Kind::Sequence)
        throw Error(path, "malformed header: 'shape' is not a tuple");
      for (const PyValue& dim : value.items) {
        if (dim.kind != PyValue::Kind::Int || dim.number < 0)
          throw Error(path, "malformed header: 'shape' must hold non-negative integers");
        header.shape.push_back(dim.number);
      }
      have_shape = true;
    } else {
      throw Error(path, "malformed header: unexpected key '" + escape_for_message(key, 40) + "'");
    }
  }
  if (header.dtype == nullptr || !have_order || !have_shape)
    throw Error(path, "malformed header: it needs the keys 'descr', 'fortran_order' and 'shape'");
  for (int64_t dim : header.shape)
    if (dim == 0)
      throw Error(path, "shape " + python_shape(header.shape) +
                            " has a zero-size dimension; kiln tensors need every dimension >= 1");
  if (!ir::checked_num_elements(header.shape))
    throw Error(path, "shape " + python_shape(header.shape) + " has more than 2^48 elements");
  return header;
}

uint32_t read_little_endian(const unsigned char* bytes, size_t count) {
  uint32_t value = 0;
  for (size_t i = 0; i < count; ++i) value |= uint32_t{bytes[i]} << (8 * i);
  return value;
}

}  // namespace

ir::Tensor read_npy(const std::string& path) {
  check_readable_file(path, "a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open file (" + errno_text(errno) + ")");
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);

  unsigned char preamble[kPreambleSize + 4] = {};
  in.read(reinterpret_cast<char*>(preamble), kPreambleSize);
  if (static_cast<size_t>(in.gcount()) < kMagic.size() ||
      std::string_view(reinterpret_cast<char*>(preamble), kMagic.size()) != kMagic)
    throw Error(path, "not a .npy file (bad magic)");
  if (static_cast<size_t>(in.gcount()) < kPreambleSize)
    throw Error(path, "file is truncated: it ends inside the format version");
  const int major = preamble[6];
  const int minor = preamble[7];
  if (major < 1 || major > 3 || minor != 0)
    throw Error(path, "unsupported .npy format version " + std::to_string(major) + "." +
                          std::to_string(minor) + "; kiln reads 1.0, 2.0 and 3.0");

  const size_t length_size = major == 1 ? 2 : 4;
  in.read(reinterpret_cast<char*>(preamble + kPreambleSize), std::streamsize(length_size));
  if (static_cast<size_t>(in.gcount()) < length_size)
    throw Error(path, "file is truncated: it ends inside the header length");
  const uint64_t header_size = read_little_endian(preamble + kPreambleSize, length_size);
  const uint64_t data_start = kPreambleSize + length_size + header_size;
  if (data_start > file_size)
    throw Error(path, "file is truncated: the header length is " + std::to_string(header_size) +
                          " bytes, the file has " + std::to_string(file_size) + " bytes in all");

  std::string header_text(header_size, '\0');
  in.read(header_text.data(), std::streamsize(header_size));
  while (!header_text.empty() && std::isspace(static_cast<unsigned char>(header_text.back())))
    header_text.pop_back();
  const NpyHeader header = interpret_header(path, HeaderParser(path, header_text).parse_dict());

  const ir::TensorType type{header.dtype->dtype, header.shape};
  const uint64_t count = static_cast<uint64_t>(ir::num_elements(header.shape));
  const uint64_t data_size = count * header.dtype->item_size;
  const uint64_t available = file_size - data_start;
  const std::string expected = "header says " + std::to_string(count) + " element" +
                               (count == 1 ? "" : "s") + " (" + std::to_string(data_size) +
                               " bytes)";
  if (available < data_size)
    throw Error(path, "file is truncated: " + expected + ", " + std::to_string(available) +
                          " bytes of data");
  if (available > data_size)
    throw Error(path, "file is longer than its header says: " + expected + ", " +
                          std::to_string(available) + " bytes of data");

  std::vector<std::byte> bytes(data_size);
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(data_size));
  if (static_cast<uint64_t>(in.gcount()) != data_size)
    throw Error(path, "read failed (" + errno_text(errno) + ")");
  return tensor_from_stored_bytes(type, std::move(bytes));
}

void write_npy(const std::string& path, const ir::Tensor& tensor) {
  // bf16 has no NumPy dtype: widen it to f32, which holds every bf16 value exactly.
  const ir::Tensor* source = &tensor;
  ir::Tensor widened;
  if (tensor.dtype() == ir::DType::BF16) {
    widened = ir::Tensor::from_doubles({ir::DType::F32, tensor.shape()}, tensor.to_doubles());
    source = &widened;
  }
  const NpyDType* dtype = nullptr;
  for (const NpyDType& entry : kNpyDTypes)
    if (entry.dtype == source->dtype()) {
      dtype = &entry;
      break;
    }
  KILN_CHECK(dtype != nullptr) << "no .npy dtype for " << ir::dtype_name(source->dtype());

  std::string header = "{'descr': '" + std::string(dtype->descr) +
                       "', 'fortran_order': False, 'shape': " + python_shape(source->shape()) +
                       ", }";
  const size_t unpadded = kPreambleSize + 2 + header.size() + 1;  // +1: the final newline
  header += std::string((kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment, ' ');
  header += '\n';
  KILN_CHECK(header.size() <= 0xFFFF) << "npy header too long for format 1.0";

  std::string preamble(kMagic);
  preamble += '\x01';
  preamble += '\x00';
  preamble += static_cast<char>(header.size() & 0xFF);
  preamble += static_cast<char>(header.size() >> 8);
  write_file_atomically(path, {preamble, header, tensor_bytes_view(*source)});
}

}  // namespace kiln::compiler
