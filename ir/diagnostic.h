// Diagnostics: user errors versus internal compiler errors.
//
// A user error (bad model, bad IR text, bad weights, bad flags) is a kiln::Error: it carries
// where the problem is ("model.json: /nodes/3/inputs/1" or "net.ir:12:7") and what is wrong,
// and travels up the stack to the command-line tool, which prints it and exits 1.
// An internal invariant that does not hold is a bug in kiln: KILN_CHECK reports it as an
// "internal compiler error" with the kiln source file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/error.h"  // Diagnostic and Error, public (ir/public/)

namespace kiln {

// `text` (a name, key or value from the user's file) for an error message: control characters
// (NUL, newline, ...) escaped as \0, \n, \xNN, so that it cannot cut or split the error line, and
// at most `max_size` bytes kept ("..." marks the cut).
std::string escape_for_message(std::string_view text, size_t max_size = 120);

// Thrown when kiln itself is wrong. Never caused by user input.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
// Collects the streamed message of a failed KILN_CHECK and throws InternalError when destroyed.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure() noexcept(false);
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond) << "message": an internal invariant. On failure throws kiln::InternalError
// with "internal compiler error: file:line: check 'cond' failed: message".
#define KILN_CHECK(cond) \
  if (cond) {            \
  } else                 \
    ::kiln::detail::CheckFailure(__FILE__, __LINE__, #cond)
