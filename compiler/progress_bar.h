// The per-epoch progress line of `kiln train`, redrawn in place on a terminal:
//   epoch 1/3 [=========>          ] 4480/6000  loss 0.2316  acc 93.1%  812 img/s  ETA 0:02
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace kiln::compiler {

class ProgressBar {
 public:
  // `enabled` false: every call does nothing (not a terminal, --quiet).
  ProgressBar(std::ostream& out, bool enabled, int64_t epoch, int64_t epochs, int64_t total);
  // `done` samples so far this epoch, with the running mean loss and accuracy. Redraws at most
  // ten times a second, and always for the last sample.
  void update(int64_t done, double loss, double accuracy);
  // Ends the line (the epoch summary is printed after it).
  void finish();

 private:
  std::ostream& out_;
  bool enabled_;
  int64_t epoch_, epochs_, total_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

}  // namespace kiln::compiler
