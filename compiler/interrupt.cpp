#include "compiler/interrupt.h"

#include <csignal>

namespace kiln::compiler {
namespace {

volatile std::sig_atomic_t g_signal = 0;
// The handlers before the scope (the defaults in the tool; Python's in the Python module),
// put back when it ends.
struct sigaction g_previous_int, g_previous_term;

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
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptScope::~InterruptScope() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool interrupted() { return g_signal != 0; }

const char* interrupt_signal_name() { return g_signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace kiln::compiler
