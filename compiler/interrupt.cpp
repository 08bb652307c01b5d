#include "compiler/interrupt.h"

#include <csignal>

namespace kiln::compiler {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_interrupt(int signal) {
  if (g_signal != 0) {  // the second one: the default action, now
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  g_signal = signal;
}

}  // namespace

InterruptScope::InterruptScope() {
  g_signal = 0;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGTERM, on_interrupt);
}

InterruptScope::~InterruptScope() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

bool interrupted() { return g_signal != 0; }

const char* interrupt_signal_name() { return g_signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace kiln::compiler
