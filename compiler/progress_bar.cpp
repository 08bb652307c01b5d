#include "compiler/progress_bar.h"

#include <fmt/format.h>

#include <ostream>

namespace kiln::compiler {

std::string format_duration(double seconds) {
  const int64_t total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

ProgressBar::ProgressBar(std::ostream& out, bool enabled, int64_t epoch, int64_t epochs,
                         int64_t total)
    : out_(out), enabled_(enabled), epoch_(epoch), epochs_(epochs), total_(total),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void ProgressBar::update(int64_t done, double loss, double accuracy) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  // \r and a trailing clear-to-end-of-line: the line is redrawn in place.
  out_ << fmt::format("\repoch {}/{} [{}] {}/{}  loss {:.4f}  acc {:.1f}%  {:.0f} img/s  ETA {}\x1b[K",
                      epoch_, epochs_, bar, done, total_, loss, 100 * accuracy, rate,
                      format_duration(eta))
       << std::flush;
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) out_ << "\r\x1b[K" << std::flush;
}

}  // namespace kiln::compiler
