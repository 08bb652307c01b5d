#include "compiler/json_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/diagnostic.h"

namespace kiln::compiler {
namespace {

struct ScanProblem {
  size_t offset;
  std::string message;
  std::optional<size_t> earlier_offset = {};  // where a duplicate key first appeared
};

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// The keys seen so far in each object being scanned, for duplicate keys: nlohmann keeps the
// last of them silently, so a model file with two "inputs" would mean whichever came second.
// Keys compare as written (an escaped spelling of the same key is not caught).
struct OpenContainer {
  bool is_object;
  std::unordered_map<std::string_view, size_t> key_offsets;
};

size_t skip_space(std::string_view text, size_t i) {
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  return i;
}

// One pass over the text, tracking only whether we are inside a string and the keys of the open
// objects; syntax errors are left to the parser, which reports them with the same locations.
std::optional<ScanProblem> scan(std::string_view text) {
  std::vector<OpenContainer> open;
  bool in_string = false;
  size_t string_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
        const size_t next = skip_space(text, i + 1);
        if (!open.empty() && open.back().is_object && next < text.size() && text[next] == ':') {
          const std::string_view key = text.substr(string_start + 1, i - string_start - 1);
          const auto [seen, inserted] = open.back().key_offsets.emplace(key, string_start);
          if (!inserted)
            return ScanProblem{string_start,
                               "duplicate key \"" + escape_for_message(key, 40) + "\" in one object",
                               seen->second};
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      string_start = i;
    } else if (c == '[' || c == '{') {
      if (open.size() >= static_cast<size_t>(kMaxJsonDepth))
        return ScanProblem{i, "nested more than " + std::to_string(kMaxJsonDepth) +
                                  " levels deep"};
      open.push_back({c == '{', {}});
    } else if (c == ']' || c == '}') {
      if (!open.empty()) open.pop_back();
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

// 1-based line and column of a byte offset.
std::pair<size_t, size_t> line_column(std::string_view text, size_t offset) {
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
  return {line, column};
}

std::string locate(std::string_view text, size_t offset, const std::string& file,
                   JsonLocation location) {
  if (location == JsonLocation::ByteOffset) return file;
  const auto [line, column] = line_column(text, offset);
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
  if (auto problem = scan(text)) {
    if (const auto earlier = problem->earlier_offset) {
      const auto [line, column] = line_column(text, *earlier);
      problem->message += location == JsonLocation::ByteOffset
                              ? " (first at byte " + std::to_string(*earlier) + ")"
                              : " (first at line " + std::to_string(line) + ", column " +
                                    std::to_string(column) + ")";
    }
    fail(text, problem->offset, file, location, what, problem->message);
  }
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
