#include "ir/diagnostic.h"

namespace kiln {

std::string Diagnostic::render() const {
  std::string out;
  if (!location.empty()) out += location + ": ";
  out += "error: " + message;
  for (const std::string& note : notes) out += "\nnote: " + note;
  return out;
}

Error::Error(Diagnostic diagnostic)
    : std::runtime_error(diagnostic.render()), diagnostic_(std::move(diagnostic)) {}

Error::Error(std::string location, std::string message)
    : Error(Diagnostic{std::move(location), std::move(message), {}}) {}

namespace detail {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << "internal compiler error: " << file << ":" << line << ": check '" << condition
          << "' failed: ";
}

CheckFailure::~CheckFailure() noexcept(false) { throw InternalError(stream_.str()); }

}  // namespace detail
}  // namespace kiln
