#include "ir/diagnostic.h"

#include "ir/utf8.h"

namespace kiln {

std::string Diagnostic::render() const {
  std::string out;
  if (!location.empty()) out += location + ": ";
  out += "error: " + message;
  for (const std::string& note : notes) out += "\nnote: " + note;
  return out;
}

std::string escape_for_message(std::string_view text, size_t max_size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t at = 0; at < text.size();) {
    if (out.size() >= max_size) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(text[at]);
    // A multi-byte character is kept whole; a byte that is not valid UTF-8 is escaped, so the
    // message stays valid UTF-8 (for terminals and JSON diagnostics alike).
    if (const size_t length = utf8_sequence_length(text, at); length > 1) {
      out.append(text.substr(at, length));
      at += length;
      continue;
    }
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\0': out += "\\0"; break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++at;
  }
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
