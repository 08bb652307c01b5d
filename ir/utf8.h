// UTF-8 validation for strings that come from users' binary files (ONNX names are protobuf
// strings, which proto2 does not check): JSON writers throw on invalid UTF-8, and a terminal
// shows half a character, so both importers and messages check it.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kiln {

// The length of the valid UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF) starting at text[at], or 0 when the bytes there are not one.
size_t utf8_sequence_length(std::string_view text, size_t at);

// The offset of the first byte of `text` that is not part of a valid UTF-8 sequence.
std::optional<size_t> invalid_utf8_at(std::string_view text);

}  // namespace kiln
