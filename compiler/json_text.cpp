#include "compiler/json_text.h"

#include <cmath>
#include <cstdlib>

#include "ir/diagnostic.h"

namespace kiln::compiler {
namespace {

struct ScanProblem {
  size_t offset;
  std::string message;
};

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// One pass over the text, tracking only whether we are inside a string; syntax errors are left
// to the parser, which reports them with the same locations.
std::optional<ScanProblem> scan(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return ScanProblem{i, "nested more than " + std::to_string(kMaxJsonDepth) +
                                  " levels deep"};
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i;
      while (end < text.size() && is_number_char(text[end])) ++end;
      const std::string token(text.substr(i, end - i));
      char* parsed_end = nullptr;
      const double value = std::strtod(token.c_str(), &parsed_end);
      // Any prefix that overflows ("1e999" of "1e999.x" too): nlohmann throws out_of_range there.
      if (parsed_end != token.c_str() && std::isinf(value))
        return ScanProblem{i, "number " + escape_for_message(token, 40) +
                                  " is out of range (beyond the largest double, ~1.8e308)"};
      i = end - 1;
    }
  }
  return std::nullopt;
}

std::string locate(std::string_view text, size_t offset, const std::string& file,
                   JsonLocation location) {
  if (location == JsonLocation::ByteOffset) return file;
  offset = std::min(offset, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

[[noreturn]] void fail(std::string_view text, size_t offset, const std::string& file,
                       JsonLocation location, std::string_view what, const std::string& message) {
  std::string full(what);
  if (location == JsonLocation::ByteOffset) full += " at byte " + std::to_string(offset);
  throw Error(locate(text, offset, file, location), full + ": " + message);
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& file,
                               JsonLocation location, std::string_view what) {
  if (auto problem = scan(text)) fail(text, problem->offset, file, location, what, problem->message);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& error) {
    // error.byte counts from 1; what() is "[json.exception.parse_error.101] parse error at line
    // 1, column 2: <description>". A file people edit is located by line:column and keeps the
    // description; an embedded header keeps nlohmann's own "parse error at line 1, column 2".
    const size_t offset = error.byte == 0 ? 0 : error.byte - 1;
    std::string description = error.what();
    if (location == JsonLocation::LineColumn) {
      if (const size_t colon = description.rfind(": "); colon != std::string::npos)
        description.erase(0, colon + 2);
      fail(text, offset, file, location, what, escape_for_message(description, 200));
    }
    if (const size_t bracket = description.find("] "); bracket != std::string::npos)
      description.erase(0, bracket + 2);
    throw Error(file, std::string(what) + ": " + escape_for_message(description, 200));
  } catch (const nlohmann::json::exception& error) {  // out_of_range and the like: never escape
    std::string description = error.what();
    if (const size_t bracket = description.find("] "); bracket != std::string::npos)
      description.erase(0, bracket + 2);
    throw Error(file, std::string(what) + ": " + escape_for_message(description, 200));
  }
}

std::string describe_json(const nlohmann::json& value) {
  // dump() escapes control characters itself; invalid UTF-8 is replaced rather than thrown on.
  return escape_for_message(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace kiln::compiler
