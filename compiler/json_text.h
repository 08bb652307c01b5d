// Parsing JSON text that kiln did not write (model files, safetensors headers) safely.
//
// nlohmann's parser is iterative, but copying, comparing and dumping a value recurse on its
// nesting, and a number too large for a double parses as infinity without complaint. A linear
// scan before the parse rules both out: nesting deeper than kMaxJsonDepth and a number that is
// not finite as a double are errors located at the byte that starts them, like syntax errors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "ir/diagnostic.h"  // escape_for_message

namespace kiln::compiler {

// Far deeper than any kiln model (4 levels) or safetensors header (3) needs.
inline constexpr int kMaxJsonDepth = 64;

// How errors are located: "file:line:column" for files people edit, or "file" with "byte N"
// in the message for an embedded header such as safetensors'.
enum class JsonLocation { LineColumn, ByteOffset };

// Parses `text`; every problem is a kiln::Error located in `file` and prefixed with `what`
// ("not valid JSON", "header is not valid JSON").
nlohmann::json parse_json_text(std::string_view text, const std::string& file,
                               JsonLocation location, std::string_view what);

// A JSON value for an error message: compact, escaped, shortened (never the whole of a big list).
std::string describe_json(const nlohmann::json& value);

}  // namespace kiln::compiler
