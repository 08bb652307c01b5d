// Embedding kiln: load a compiled package (or a model, compiled at start-up), run it on inputs
// from .npy files, write every output as .npy; with a training package, take a few training
// steps first on a batch read from .npy.
//
//   embed MODEL.kiln OUT_DIR NAME=INPUT.npy...
//   embed TRAIN.kiln OUT_DIR NAME=INPUT.npy... --train BATCH.npy LABELS.npy STEPS
#include <kiln/kiln.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: embed MODEL OUT_DIR NAME=INPUT.npy... [--train BATCH.npy LABELS.npy STEPS]\n";
    return 2;
  }
  try {
    kiln::Options options;
    options.backend = kiln::Backend::Auto;
    kiln::Model model = kiln::Model::load(argv[1], options);
    std::cout << "model " << model.name() << " on the " << model.backend() << " backend\n";
    const std::string out_dir = argv[2];
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--train" && i + 3 < argc) {
        const kiln::Tensor batch = kiln::read_npy(argv[i + 1]);
        const kiln::Tensor labels = kiln::read_npy(argv[i + 2]);
        for (int step = 0; step < std::atoi(argv[i + 3]); ++step)
          std::cout << "step " << step + 1 << ": loss " << model.train_step(batch, labels) << "\n";
        i += 3;
        continue;
      }
      const size_t equals = arg.find('=');
      if (equals == std::string::npos) throw kiln::Error(arg, "expected NAME=INPUT.npy");
      model.set_input(arg.substr(0, equals), kiln::read_npy(arg.substr(equals + 1)));
    }
    model.run();
    for (const kiln::TensorInfo& output : model.outputs()) {
      const kiln::Tensor& value = model.output(output.name);
      kiln::write_npy(out_dir + "/" + output.name + ".npy", value);
      std::cout << output.name << ": " << value.type_string() << "\n";
    }
  } catch (const kiln::Error& error) {
    std::cerr << error.what() << "\n";
    return 1;
  }
  return 0;
}
