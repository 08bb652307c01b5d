// Ctrl-C (SIGINT) and SIGTERM during a long command (kiln train): the command notices at a safe
// point, cleans up and exits 130, instead of dying with a half-written file and temporary
// directories left behind.
//
// Outside an InterruptScope the signals keep the action they had: the default in the tool (a
// Ctrl-C during `kiln opt` ends it at once), Python's in the Python module. Inside one, the
// first signal only sets a flag: the command checks interrupted() between steps and throws
// Interrupted, and the stack unwinds (temporary directories are RAII objects); a child process
// (the host compiler) gets the signal too and fails, which the command's error path reports as
// the interruption. A second signal ends the process at once, as usual. Scopes do not nest.
#pragma once

#include <stdexcept>

namespace kiln::compiler {

// Thrown at a safe point after SIGINT or SIGTERM; the tool exits 130 (128 + SIGINT, the shell's
// convention for an interrupted command).
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

inline constexpr int kExitInterrupted = 130;

// Handles SIGINT and SIGTERM as above while it lives.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// Whether SIGINT or SIGTERM arrived inside an InterruptScope.
bool interrupted();
// The name of that signal ("SIGINT", "SIGTERM").
const char* interrupt_signal_name();

}  // namespace kiln::compiler
