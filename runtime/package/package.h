// A kiln package (`kiln compile MODEL -o model.kiln`): everything needed to run — or train — a
// compiled model, in one file, with no compiler present on the CUDA backend.
//
// A package holds one or two programs ("inference"; a training package adds "train_step"),
// each with its kernel table and memory plan (codegen::Program), its CUDA source (the host
// backend compiles it once into the kernel cache) and NVRTC's output (PTX for the lowest arch
// plus a cubin per arch, with the ptxas report); the weights every program starts from, by
// name; and a versioned manifest saying what was compiled from what (kiln version, model hash,
// archs, pipeline, options). Its byte layout is in package.cpp and docs/packages.md.
//
// Reading checks everything before anything runs: the magic, the format version, the file's
// size, a CRC-32 per section, and that the kernel tables are consistent (every buffer id in
// range, every arena slice inside the arena). Each failure is a kiln::Error naming the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::runtime {

// The newest format this kiln reads and the one it writes. Bump on any change of layout or
// meaning; readers refuse newer versions with a message that says so.
// 2: a kernel may launch an earlier kernel's function (its "entry").
// 3: f32 parameters' weights may be stored in bf16 or f16 (kiln compile --weights-dtype).
// 4: weights that are mostly zeros (pruned) may be stored as a bitmask and their nonzeros.
inline constexpr uint32_t kPackageFormatVersion = 4;

inline constexpr std::string_view kInferenceProgram = "inference";
inline constexpr std::string_view kTrainStepProgram = "train_step";

struct PackageProgram {
  std::string role;          // kInferenceProgram or kTrainStepProgram
  codegen::Program program;  // the kernel table, memory plan and CUDA source
  CudaBinary binary;         // PTX (may be empty: --no-ptx) and one cubin per arch
};

struct PackageManifest {
  uint32_t format_version = kPackageFormatVersion;
  std::string kiln_version;            // of the kiln that wrote it
  std::string model;                   // the model's file name, as given to kiln compile
  std::string model_hash;              // XXH3-64 of the model file's bytes (16 hex digits)
  std::vector<std::string> archs;      // cubins present, "sm_80", ...
  std::vector<std::string> pipeline;   // the passes that ran, in order
  nlohmann::ordered_json options;      // how it was compiled (-O, --library, training options)
  // What the compiler decided and the report shows (fusion refusals, ...); the runtime does
  // not read it.
  nlohmann::ordered_json report;
};

struct Package {
  PackageManifest manifest;
  std::vector<PackageProgram> programs;
  std::map<std::string, ir::Tensor> weights;  // every parameter of every program, by name
  // How the f32 weights are stored in the file: f32, or bf16 / f16 (--weights-dtype: half the
  // bytes). `weights` always holds them as the programs take them (f32), already rounded to
  // this dtype by whoever built the package, so writing and reading back changes nothing.
  ir::DType weights_dtype = ir::DType::F32;

  // The program with this role, or nullptr.
  const PackageProgram* find(std::string_view role) const;
  // Parameter tensors of `program` in graph order, from `weights`. kiln::Error naming `path`
  // when one is missing or has another type.
  std::vector<ir::Tensor> parameters(const codegen::Program& program, const std::string& path) const;
  // The weights of one parameter buffer, checked the same way.
  const ir::Tensor& weights_for(const codegen::Buffer& buffer, const std::string& path) const;
};

// What the weights take in the package's file (kiln compile's report): in all, as dense tensors
// of their stored dtype, and how many are stored as a bitmask of their nonzeros (pruned).
struct StoredWeights {
  int64_t bytes = 0;
  int64_t dense_bytes = 0;
  int sparse = 0;
};
StoredWeights stored_weights(const Package& package);

// The package's bytes (written with compiler::write_file_atomically, so that a failure leaves
// no partial file and an existing file as it was).
std::string serialize_package(const Package& package);

// Reads and checks a package. `path` names the file in errors.
Package read_package(const std::string& path);
Package parse_package(std::string_view bytes, const std::string& path);

// Whether the file is meant as a package: it is called *.kiln, or starts with a package's magic
// bytes whatever it is called (false when it cannot be read). How `kiln run`, `train` and
// `inspect` tell packages from models.
bool is_package_file(const std::string& path);

// kiln::Error naming `path` unless `binary` has code a GPU of compute capability `sm`
// (10 * major + minor) loads: its cubin, or the PTX (runtime/cuda/plan.h decides). What a
// package compiled with --no-ptx for other archs gets, before any device memory is touched.
void require_code_for(const CudaBinary& binary, int sm, const std::string& path);

}  // namespace kiln::runtime
