// Training data: the IDX reader (every error), gzip, the .npy directory loader, subsets, the
// seeded batch iterator, and the real MNIST / Fashion-MNIST files when they are installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include "compiler/dataset_dir.h"
#include "compiler/npy.h"
#include "io_test_util.h"
#include "runtime/data/dataset.h"
#include "runtime/data/idx.h"
#include "runtime/data/text.h"

namespace kiln::data {
namespace {

using testing_util::error_of;
using testing_util::fresh_test_dir;
using testing_util::read_raw;
using testing_util::write_raw;

std::string be32(uint32_t v) {
  return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

// An IDX header: two zero bytes, the type code, the rank, big-endian dims.
std::string idx_header(uint8_t type, std::vector<uint32_t> dims) {
  std::string bytes = {0, 0, char(type), char(dims.size())};
  for (uint32_t dim : dims) bytes += be32(dim);
  return bytes;
}

std::string idx_u8(std::vector<uint32_t> dims, const std::vector<uint8_t>& values) {
  return idx_header(0x08, dims) + std::string(values.begin(), values.end());
}

// gzip is an essential Debian package; -n keeps the output free of names and times.
void gzip_file(const std::filesystem::path& path) {
  const std::string command = "gzip -n -f '" + path.string() + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

std::string message_of_read(const std::string& bytes) {
  const auto dir = fresh_test_dir();
  write_raw(dir / "f.idx", bytes);
  return error_of([&] { read_idx((dir / "f.idx").string()); }).message;
}

TEST(DataIdx, ReadsMnistStyleImages) {
  const auto dir = fresh_test_dir();
  std::vector<uint8_t> pixels(2 * 2 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 20);
  write_raw(dir / "images", idx_u8({2, 2, 3}, pixels));
  const IdxArray array = read_idx_images((dir / "images").string());
  EXPECT_EQ(array.type, IdxType::U8);
  EXPECT_EQ(array.dims, (std::vector<int64_t>{2, 2, 3}));
  ASSERT_EQ(array.num_elements(), 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(array.get(i), i * 20);
}

TEST(DataIdx, ReadsEveryTypeBigEndian) {
  const auto dir = fresh_test_dir();
  struct Case { uint8_t code; std::string payload; double first, second; };
  const float f32 = 1.5f;
  const double f64 = -2.25;
  uint32_t f32_bits;
  uint64_t f64_bits;
  std::memcpy(&f32_bits, &f32, 4);
  std::memcpy(&f64_bits, &f64, 8);
  const Case cases[] = {
      {0x08, "\xff\x01", 255, 1},
      {0x09, "\xff\x7f", -1, 127},
      {0x0B, std::string("\x01\x02\xff\xfe", 4), 258, -2},
      {0x0C, be32(70000) + be32(uint32_t(-5)), 70000, -5},
      {0x0D, be32(f32_bits) + be32(f32_bits), 1.5, 1.5},
      {0x0E, be32(uint32_t(f64_bits >> 32)) + be32(uint32_t(f64_bits)) +
                 be32(uint32_t(f64_bits >> 32)) + be32(uint32_t(f64_bits)), -2.25, -2.25},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(int(c.code));
    write_raw(dir / "a.idx", idx_header(c.code, {2}) + c.payload);
    const IdxArray array = read_idx((dir / "a.idx").string());
    EXPECT_EQ(uint8_t(array.type), c.code);
    EXPECT_EQ(array.get(0), c.first);
    EXPECT_EQ(array.get(1), c.second);
  }
}

TEST(DataIdx, ErrorsNameTheFileAndTheProblem) {
  const auto dir = fresh_test_dir();
  write_raw(dir / "short", std::string("\0\0\x08", 3));
  const Diagnostic d = error_of([&] { read_idx((dir / "short").string()); });
  EXPECT_EQ(d.location, (dir / "short").string());
  EXPECT_NE(d.message.find("truncated IDX file: 3 bytes"), std::string::npos) << d.message;

  EXPECT_NE(message_of_read("").find("truncated IDX file: 0 bytes"), std::string::npos);
  EXPECT_NE(message_of_read("PK\x03\x04 a zip").find("not an IDX file: magic number 0x504B0304"),
            std::string::npos);
  EXPECT_NE(message_of_read(idx_header(0x0A, {1}) + "x").find("unknown element type code 0x0A at byte offset 2"),
            std::string::npos);
  EXPECT_NE(message_of_read(idx_header(0x08, {})).find("rank 0"), std::string::npos);
  EXPECT_NE(message_of_read(idx_header(0x08, {60000, 28, 28}).substr(0, 10))
                .find("truncated IDX header: rank 3 needs 16 header bytes, the file has 10"),
            std::string::npos);
  EXPECT_NE(message_of_read(idx_u8({2, 2}, {1, 2, 3}))
                .find("truncated IDX file: dims 2x2 of u8 need 4 data bytes after the 12-byte "
                      "header, the file has 3"),
            std::string::npos);
  EXPECT_NE(message_of_read(idx_u8({2}, {1, 2, 3})).find("trailing bytes in IDX file"),
            std::string::npos);
  EXPECT_NE(message_of_read(idx_header(0x08, {0x80000000u}))
                .find("dimension 0 (byte offset 4) is 2147483648; kiln reads at most 2^31-1"),
            std::string::npos);
  EXPECT_NE(message_of_read(idx_header(0x08, {65536, 65536})).find("more than 2^31-1 elements"),
            std::string::npos);

  const Diagnostic missing = error_of([&] { read_idx((dir / "nope").string()); });
  EXPECT_NE(missing.message.find("cannot open file (No such file or directory)"),
            std::string::npos);
}

TEST(DataIdx, MnistExpectationsCheckTypeAndRank) {
  const auto dir = fresh_test_dir();
  write_raw(dir / "labels", idx_u8({3}, {1, 2, 3}));
  write_raw(dir / "images", idx_u8({1, 2, 2}, {0, 0, 0, 0}));
  write_raw(dir / "i32labels", idx_header(0x0C, {1}) + be32(7));
  EXPECT_EQ(error_of([&] { read_idx_images((dir / "labels").string()); }).message,
            "expected images: IDX magic 0x00000803 (u8, rank 3, [N,rows,cols]), found 0x00000801 "
            "(u8, rank 1)");
  EXPECT_NE(error_of([&] { read_idx_labels((dir / "images").string()); })
                .message.find("found 0x00000803 (u8, rank 3)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_idx_labels((dir / "i32labels").string()); })
                .message.find("found 0x00000C01 (i32, rank 1)"),
            std::string::npos);
}

TEST(DataIdx, ReadsGzipTransparently) {
  const auto dir = fresh_test_dir();
  std::vector<uint8_t> pixels(5 * 4 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 3);
  const std::string plain = idx_u8({5, 4, 4}, pixels);
  write_raw(dir / "images", plain);
  gzip_file(dir / "images");
  const std::string gz = read_raw(dir / "images.gz");
  ASSERT_EQ(gz.substr(0, 2), "\x1f\x8b");
  const IdxArray array = read_idx_images((dir / "images.gz").string());
  EXPECT_EQ(array.dims, (std::vector<int64_t>{5, 4, 4}));
  EXPECT_EQ(array.get(79), 79 * 3);

  // Two gzip members back to back are one stream (`cat a.gz b.gz`).
  write_raw(dir / "head", plain.substr(0, 20));
  write_raw(dir / "tail", plain.substr(20));
  gzip_file(dir / "head");
  gzip_file(dir / "tail");
  write_raw(dir / "two.gz", read_raw(dir / "head.gz") + read_raw(dir / "tail.gz"));
  EXPECT_EQ(read_idx((dir / "two.gz").string()).data, array.data);

  // The IDX error after decompression still names the .gz file.
  write_raw(dir / "bad", idx_u8({9}, {1}));
  gzip_file(dir / "bad");
  const Diagnostic bad = error_of([&] { read_idx((dir / "bad.gz").string()); });
  EXPECT_EQ(bad.location, (dir / "bad.gz").string());
  EXPECT_NE(bad.message.find("truncated IDX file"), std::string::npos);
}

TEST(DataIdx, TruncatedAndCorruptGzipAreErrors) {
  const auto dir = fresh_test_dir();
  std::vector<uint8_t> pixels(50 * 8 * 8);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t((i * 2654435761u) >> 13);
  write_raw(dir / "images", idx_u8({50, 8, 8}, pixels));
  gzip_file(dir / "images");
  const std::string gz = read_raw(dir / "images.gz");

  write_raw(dir / "cut.gz", gz.substr(0, gz.size() / 2));
  EXPECT_NE(error_of([&] { read_idx((dir / "cut.gz").string()); })
                .message.find("gzip data is truncated"),
            std::string::npos);

  std::string corrupt = gz;
  for (size_t i = 10; i < 40 && i < corrupt.size(); ++i) corrupt[i] = char(0xff);
  write_raw(dir / "corrupt.gz", corrupt);
  EXPECT_NE(error_of([&] { read_idx((dir / "corrupt.gz").string()); })
                .message.find("corrupt gzip data near compressed byte"),
            std::string::npos);
}

TEST(DataIdx, IdxDatasetScalesPixelsAndAddsAChannel) {
  const auto dir = fresh_test_dir();
  write_raw(dir / "images", idx_u8({2, 1, 2}, {0, 255, 51, 102}));
  write_raw(dir / "labels", idx_u8({2}, {7, 3}));
  const Dataset dataset =
      load_idx_dataset((dir / "images").string(), (dir / "labels").string());
  EXPECT_EQ(dataset.images.type().to_string(), "f32[2,1,1,2]");
  EXPECT_EQ(dataset.labels.type().to_string(), "i32[2]");
  EXPECT_EQ(dataset.images.to_doubles(), (std::vector<double>{0, 1, 0.2f, 0.4f}));
  EXPECT_EQ(dataset.labels.to_doubles(), (std::vector<double>{7, 3}));

  // The first N samples only (--train-samples N); more than the file has means all of them.
  const Dataset first = load_idx_dataset((dir / "images").string(), (dir / "labels").string(), 1);
  EXPECT_EQ(first.images.type().to_string(), "f32[1,1,1,2]");
  EXPECT_EQ(first.images.to_doubles(), (std::vector<double>{0, 1}));
  EXPECT_EQ(first.labels.to_doubles(), (std::vector<double>{7}));
  EXPECT_EQ(load_idx_dataset((dir / "images").string(), (dir / "labels").string(), 5).size(), 2);

  write_raw(dir / "labels3", idx_u8({3}, {7, 3, 1}));
  EXPECT_NE(error_of([&] {
              load_idx_dataset((dir / "images").string(), (dir / "labels3").string());
            }).message.find("3 labels for 2 images"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_idx_dataset((dir / "images").string(), (dir / "labels3").string(), 1);
            }).message.find("3 labels for 2 images"),
            std::string::npos);

  write_raw(dir / "empty", idx_u8({0, 28, 28}, {}));
  EXPECT_NE(error_of([&] {
              load_idx_dataset((dir / "empty").string(), (dir / "labels").string());
            }).message.find("the file holds no pixels (dims 0x28x28)"),
            std::string::npos);
}

// --- a directory of .npy files ---------------------------------------------------------------

ir::Tensor tensor(ir::DType dtype, ir::Shape shape, std::vector<double> values) {
  return ir::Tensor::from_doubles({dtype, std::move(shape)}, values);
}

TEST(DataDir, LoadsNpyPairsPerSplit) {
  const auto dir = fresh_test_dir();
  compiler::write_npy((dir / "train.x.npy").string(),
                      tensor(ir::DType::F16, {3, 2}, {0.5, 1, 1.5, 2, 2.5, 3}));
  compiler::write_npy((dir / "train.y.npy").string(), tensor(ir::DType::I64, {3}, {2, 0, 1}));
  compiler::write_npy((dir / "test.x.npy").string(), tensor(ir::DType::F32, {1, 2}, {9, 8}));
  compiler::write_npy((dir / "test.y.npy").string(), tensor(ir::DType::I32, {1}, {4}));

  const Dataset train = compiler::load_dataset(dir.string(), Split::Train);
  EXPECT_EQ(train.images.type().to_string(), "f32[3,2]");
  EXPECT_EQ(train.images.to_doubles(), (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ(train.labels.type().to_string(), "i32[3]");
  EXPECT_EQ(train.labels.to_doubles(), (std::vector<double>{2, 0, 1}));
  const Dataset test = compiler::load_dataset(dir.string(), Split::Test);
  EXPECT_EQ(test.size(), 1);
  EXPECT_EQ(test.labels.to_doubles(), (std::vector<double>{4}));
}

TEST(DataDir, ErrorsSayWhatIsWrong) {
  const auto dir = fresh_test_dir();
  compiler::write_npy((dir / "train.x.npy").string(), tensor(ir::DType::F32, {2, 1}, {1, 2}));
  EXPECT_NE(error_of([&] { compiler::load_dataset(dir.string(), Split::Train); })
                .message.find("train.y.npy does not exist"),
            std::string::npos);

  compiler::write_npy((dir / "train.y.npy").string(), tensor(ir::DType::I32, {3}, {0, 1, 2}));
  const Diagnostic count = error_of([&] { compiler::load_dataset(dir.string(), Split::Train); });
  EXPECT_EQ(count.location, (dir / "train.y.npy").string());
  EXPECT_NE(count.message.find("3 labels for 2 samples"), std::string::npos) << count.message;

  compiler::write_npy((dir / "train.y.npy").string(), tensor(ir::DType::I32, {2}, {0, -1}));
  EXPECT_NE(error_of([&] { compiler::load_dataset(dir.string(), Split::Train); })
                .message.find("label -1 of sample 1 is not a class index"),
            std::string::npos);

  compiler::write_npy((dir / "train.y.npy").string(), tensor(ir::DType::F32, {2}, {0, 1}));
  EXPECT_NE(error_of([&] { compiler::load_dataset(dir.string(), Split::Train); })
                .message.find("labels must be an integer array"),
            std::string::npos);

  compiler::write_npy((dir / "train.x.npy").string(), tensor(ir::DType::F32, {}, {1}));
  EXPECT_NE(error_of([&] { compiler::load_dataset(dir.string(), Split::Train); })
                .message.find("inputs must be a floating-point array [N,...] or token ids"),
            std::string::npos);

  EXPECT_NE(error_of([&] { compiler::load_dataset("mnistt", Split::Train); })
                .message.find("'mnistt' is neither a known dataset"),
            std::string::npos);
}

// Token ids with a label per position: what a language model trains on from .npy files.
TEST(DataDir, LoadsTokensWithALabelPerPosition) {
  const auto dir = fresh_test_dir();
  compiler::write_npy((dir / "train.x.npy").string(), tensor(ir::DType::I64, {2, 3}, {1, 2, 3, 4, 5, 6}));
  compiler::write_npy((dir / "train.y.npy").string(), tensor(ir::DType::I32, {2, 3}, {2, 3, 4, 5, 6, 7}));
  const Dataset train = compiler::load_dataset(dir.string(), Split::Train);
  EXPECT_EQ(train.images.type().to_string(), "i32[2,3]");
  EXPECT_EQ(train.size(), 2);
  EXPECT_EQ(train.labels_per_sample(), 3);
  EXPECT_TRUE(train.is_tokens());
  compiler::write_npy((dir / "train.x.npy").string(), tensor(ir::DType::I64, {2, 1}, {1, -4}));
  compiler::write_npy((dir / "train.y.npy").string(), tensor(ir::DType::I32, {2}, {0, 1}));
  EXPECT_NE(error_of([&] { compiler::load_dataset(dir.string(), Split::Train); })
                .message.find("token id -4 at element 1 is not in 0..2^31-1"),
            std::string::npos);
}

// --- byte-level text -------------------------------------------------------------------------

TEST(DataText, WindowsPredictTheNextByteAndEveryTenthIsTest) {
  const auto dir = fresh_test_dir();
  std::string text;
  for (int i = 0; i < 64; ++i) text += static_cast<char>('a' + i % 26);
  { std::ofstream(dir / "b.txt") << text.substr(32); }
  { std::ofstream(dir / "a.txt") << text.substr(0, 32); }
  { std::ofstream(dir / "index.dat", std::ios::binary) << std::string("x\0y", 3); }  // binary
  // 64 bytes in windows of 4 + 1: 15 windows; window 9 is the test split's only one.
  const Dataset train = data::load_text_dataset("text:" + dir.string(), Split::Train, 4);
  const Dataset test = data::load_text_dataset("text:" + dir.string(), Split::Test, 4);
  EXPECT_EQ(train.images.type().to_string(), "i32[14,4]");
  EXPECT_EQ(train.labels.type().to_string(), "i32[14,4]");
  EXPECT_EQ(test.size(), 1);
  // Files in name order (a.txt first); labels are the next bytes.
  EXPECT_EQ(train.images.to_doubles()[0], 'a');
  EXPECT_EQ(train.labels.to_doubles()[0], 'b');
  EXPECT_EQ(train.labels.to_doubles()[3], 'e');
  EXPECT_EQ(test.images.to_doubles()[0], 'a' + 36 % 26);
  EXPECT_NE(test.source.find("64 bytes of 2 text files"), std::string::npos) << test.source;

  EXPECT_NE(error_of([&] { data::load_text_dataset("text:" + dir.string(), Split::Train, 7); })
                .message.find("make 9 windows of 8 bytes; at least 10 are needed"),
            std::string::npos);
  EXPECT_NE(error_of([&] { data::load_text_dataset("text:/nonexistent/x", Split::Train, 4); })
                .message.find("text:/nonexistent/x: no such file or directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { data::load_text_dataset("text:" + dir.string(), Split::Train, 0); })
                .message.find("the model's input must be token ids [batch, sequence]"),
            std::string::npos);
}

// --- subsets and batches ---------------------------------------------------------------------

// N samples whose image i is [i, 10*i] and label i % 7, so a batch shows which samples it took.
Dataset numbered(int64_t n) {
  Dataset dataset;
  dataset.images = ir::Tensor({ir::DType::F32, {n, 2}});
  dataset.labels = ir::Tensor({ir::DType::I32, {n}});
  for (int64_t i = 0; i < n; ++i) {
    dataset.images.set(2 * i, double(i));
    dataset.images.set(2 * i + 1, 10.0 * double(i));
    dataset.labels.set(i, double(i % 7));
  }
  dataset.source = "numbered";
  return dataset;
}

// The sample indices of every batch of one epoch, checking images and labels agree.
std::vector<std::vector<int64_t>> epoch_batches(const Dataset& dataset, int64_t batch,
                                                uint64_t seed, int64_t epoch, bool drop_last) {
  BatchIterator it(dataset, batch, seed, epoch, drop_last);
  std::vector<std::vector<int64_t>> batches;
  ir::Tensor images, labels;
  while (it.next(images, labels)) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < labels.num_elements(); ++i) {
      const auto id = static_cast<int64_t>(images.get(2 * i));
      EXPECT_EQ(images.get(2 * i + 1), 10.0 * double(id));
      EXPECT_EQ(labels.get(i), double(id % 7));
      ids.push_back(id);
    }
    EXPECT_EQ(images.shape()[0], labels.num_elements());
    batches.push_back(ids);
  }
  EXPECT_EQ(int64_t(batches.size()), it.num_batches());
  return batches;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& batch : batches) all.insert(all.end(), batch.begin(), batch.end());
  return all;
}

TEST(DataBatch, EveryEpochVisitsEverySampleOnce) {
  const Dataset dataset = numbered(10);
  const auto batches = epoch_batches(dataset, 3, 1, 0, false);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches.back().size(), 1u);
  std::vector<int64_t> all = flatten(batches);
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(all[size_t(i)], i);

  const auto dropped = epoch_batches(dataset, 3, 1, 0, true);
  ASSERT_EQ(dropped.size(), 3u);
  for (const auto& batch : dropped) EXPECT_EQ(batch.size(), 3u);
  // Dropping the last batch leaves the order of the others as it was.
  const std::vector<int64_t> all_order = flatten(batches);
  EXPECT_EQ(flatten(dropped), std::vector<int64_t>(all_order.begin(), all_order.begin() + 9));
}

TEST(DataBatch, OrderDependsOnSeedAndEpochOnly) {
  const Dataset dataset = numbered(100);
  const auto a = flatten(epoch_batches(dataset, 16, 7, 0, false));
  EXPECT_EQ(a, flatten(epoch_batches(dataset, 16, 7, 0, false)));
  EXPECT_EQ(a, flatten(epoch_batches(dataset, 5, 7, 0, false)));  // batch size does not matter
  EXPECT_NE(a, flatten(epoch_batches(dataset, 16, 7, 1, false)));
  EXPECT_NE(a, flatten(epoch_batches(dataset, 16, 8, 0, false)));
  std::vector<int64_t> identity(100);
  for (int64_t i = 0; i < 100; ++i) identity[size_t(i)] = i;
  EXPECT_NE(a, identity);
  // Seeds that differ only in their high half still differ (both halves feed the generator).
  EXPECT_NE(epoch_permutation(100, 1, 0), epoch_permutation(100, 1 | (uint64_t{1} << 32), 0));
}

TEST(DataBatch, PermutationIsPinnedAcrossMachines) {
  // Fixed by the documented rule (mt19937_64, seed_seq, rejection draws, Fisher-Yates); if this
  // changes, runs recorded with a seed no longer reproduce.
  EXPECT_EQ(epoch_permutation(10, 42, 0), (std::vector<int64_t>{0, 6, 5, 1, 3, 9, 7, 8, 4, 2}));
  EXPECT_EQ(epoch_permutation(10, 42, 3), (std::vector<int64_t>{5, 1, 6, 2, 4, 3, 8, 7, 0, 9}));
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), (std::vector<int64_t>{0}));
}

TEST(DataBatch, BadBatchSizesAreErrors) {
  const Dataset dataset = numbered(4);
  EXPECT_NE(error_of([&] { BatchIterator(dataset, 0, 1, 0, false); })
                .message.find("at least 1, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { BatchIterator(dataset, 5, 1, 0, true); })
                .message.find("no batch is left"),
            std::string::npos);
  EXPECT_EQ(epoch_batches(dataset, 5, 1, 0, false).size(), 1u);
}

TEST(DataBatch, TakeFirstKeepsTheLeadingSamples) {
  const Dataset dataset = numbered(10);
  const Dataset first = take_first(dataset, 4);
  EXPECT_EQ(first.images.type().to_string(), "f32[4,2]");
  EXPECT_EQ(first.labels.to_doubles(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(first.images.get(7), 30.0);
  EXPECT_NE(error_of([&] { take_first(dataset, 11); })
                .message.find("asked for the first 11 samples; the dataset has 10"),
            std::string::npos);
}

// --- the built-in datasets -------------------------------------------------------------------

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1); else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DataBuiltin, OverrideDirectoryIsUsedOrReported) {
  const auto dir = fresh_test_dir();
  {
    ScopedEnv env("KILN_MNIST_DIR", dir.string());
    const Diagnostic d = error_of([] { load_builtin_dataset("mnist", Split::Test); });
    EXPECT_EQ(d.location, "KILN_MNIST_DIR=" + dir.string());
    EXPECT_NE(d.message.find("t10k-images-idx3-ubyte[.gz]"), std::string::npos) << d.message;
  }
  write_raw(dir / "t10k-images-idx3-ubyte", idx_u8({1, 1, 1}, {255}));
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_u8({1}, {10}));
  gzip_file(dir / "t10k-images-idx3-ubyte");
  ScopedEnv env("KILN_FASHION_MNIST_DIR", dir.string());
  EXPECT_NE(error_of([] { load_builtin_dataset("fashion-mnist", Split::Test); })
                .message.find("label 10 of sample 0 is outside 0..9"),
            std::string::npos);
  write_raw(dir / "t10k-labels-idx1-ubyte", idx_u8({1}, {9}));
  const Dataset dataset = load_builtin_dataset("fashion-mnist", Split::Test);
  EXPECT_EQ(dataset.images.to_doubles(), (std::vector<double>{1.0}));
  EXPECT_NE(dataset.source.find("fashion-mnist test"), std::string::npos);
}

// The real files, as scripts/setup.sh installs them; skipped (with where kiln looked) if absent.
void check_real(std::string_view name) {
  std::filesystem::path dir;
  try {
    dir = find_builtin_dataset_dir(name, Split::Train);
    find_builtin_dataset_dir(name, Split::Test);
  } catch (const Error& error) {
    GTEST_SKIP() << name << " is not installed (scripts/setup.sh installs it): "
                 << error.diagnostic().render();
  }
  for (Split split : {Split::Train, Split::Test}) {
    const Dataset dataset = load_builtin_dataset(name, split);
    const int64_t n = split == Split::Train ? 60000 : 10000;
    EXPECT_EQ(dataset.images.type().to_string(), "f32[" + std::to_string(n) + ",1,28,28]");
    EXPECT_EQ(dataset.labels.type().to_string(), "i32[" + std::to_string(n) + "]");
    const auto* labels = reinterpret_cast<const int32_t*>(dataset.labels.data());
    std::set<int32_t> classes(labels, labels + n);
    EXPECT_EQ(classes, (std::set<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    const auto* pixels = reinterpret_cast<const float*>(dataset.images.data());
    const auto [lo, hi] = std::minmax_element(pixels, pixels + dataset.images.num_elements());
    EXPECT_EQ(*lo, 0.0f);
    EXPECT_EQ(*hi, 1.0f);
  }
}

TEST(DataBuiltin, RealMnistSplits) { check_real("mnist"); }
TEST(DataBuiltin, RealFashionMnistSplits) { check_real("fashion-mnist"); }

}  // namespace
}  // namespace kiln::data
