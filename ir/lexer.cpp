#include "ir/lexer.h"

#include "ir/diagnostic.h"

#include <cctype>

namespace kiln::ir {

namespace {
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}
}  // namespace

bool is_plain_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!is_name_char(c)) return false;
  return true;
}

std::string_view token_kind_name(Tok kind) {
  switch (kind) {
    case Tok::End: return "end of input";
    case Tok::Identifier: return "identifier";
    case Tok::ValueName: return "value name";
    case Tok::GraphName: return "graph name";
    case Tok::Integer: return "integer";
    case Tok::Float: return "number";
    case Tok::String: return "string";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::LBrace: return "'{'";
    case Tok::RBrace: return "'}'";
    case Tok::Less: return "'<'";
    case Tok::Greater: return "'>'";
    case Tok::Comma: return "','";
    case Tok::Colon: return "':'";
    case Tok::Equal: return "'='";
    case Tok::Arrow: return "'->'";
    case Tok::Error: return "invalid token";
  }
  return "?";
}

char Lexer::peek(size_t ahead) const {
  return pos_ + ahead < source_.size() ? source_[pos_ + ahead] : '\0';
}

char Lexer::advance() {
  const char c = source_[pos_++];
  if (c == '\n') {
    ++line_;
    column_ = 1;
  } else {
    ++column_;
  }
  return c;
}

void Lexer::skip_space_and_comments() {
  while (pos_ < source_.size()) {
    if (std::isspace(static_cast<unsigned char>(peek()))) {
      advance();
    } else if (peek() == '/' && peek(1) == '/') {
      while (pos_ < source_.size() && peek() != '\n') advance();
    } else {
      break;
    }
  }
}

Token Lexer::make(Tok kind, std::string text, int line, int column) const {
  return Token{kind, std::move(text), line, column};
}

std::string Lexer::lex_name_chars() {
  std::string name;
  while (is_name_char(peek())) name += advance();
  return name;
}

Token Lexer::lex_number(int line, int column) {
  std::string text;
  if (peek() == '-') text += advance();
  if (std::isalpha(static_cast<unsigned char>(peek()))) {  // -inf
    std::string word;
    while (std::isalpha(static_cast<unsigned char>(peek()))) word += advance();
    if (word == "inf") return make(Tok::Float, text + word, line, column);
    return make(Tok::Error, "expected a number after '-', got '" + word + "'", line, column);
  }
  bool is_float = false;
  while (std::isdigit(static_cast<unsigned char>(peek()))) text += advance();
  if (peek() == '.') {
    is_float = true;
    text += advance();
    while (std::isdigit(static_cast<unsigned char>(peek()))) text += advance();
  }
  if (peek() == 'e' || peek() == 'E') {
    is_float = true;
    text += advance();
    if (peek() == '+' || peek() == '-') text += advance();
    if (!std::isdigit(static_cast<unsigned char>(peek())))
      return make(Tok::Error, "malformed number '" + text + "'", line, column);
    while (std::isdigit(static_cast<unsigned char>(peek()))) text += advance();
  }
  if (text == "-" || text == ".")
    return make(Tok::Error, "malformed number '" + text + "'", line, column);
  return make(is_float ? Tok::Float : Tok::Integer, text, line, column);
}

Token Lexer::lex_string(int line, int column) {
  advance();  // opening quote
  std::string text;
  while (true) {
    if (pos_ >= source_.size() || peek() == '\n')
      return make(Tok::Error, "unterminated string", line, column);
    const char c = advance();
    if (c == '"') break;
    if (c == '\\') {
      if (pos_ >= source_.size()) return make(Tok::Error, "unterminated string", line, column);
      const char escaped = advance();
      if (escaped == 'n') text += '\n';
      else if (escaped == '"' || escaped == '\\') text += escaped;
      else return make(Tok::Error, std::string("unknown escape '\\") + escaped + "'", line, column);
      continue;
    }
    text += c;
  }
  return make(Tok::String, text, line, column);
}

Token Lexer::next() {
  skip_space_and_comments();
  const int line = line_;
  const int column = column_;
  if (pos_ >= source_.size()) return make(Tok::End, "", line, column);
  const char c = peek();

  if (c == '%' || c == '@') {
    const Tok kind = c == '%' ? Tok::ValueName : Tok::GraphName;
    advance();
    if (peek() == '"') {
      Token quoted = lex_string(line, column);
      if (quoted.kind == Tok::Error) return quoted;
      if (quoted.text.empty()) return make(Tok::Error, "empty name", line, column);
      return make(kind, quoted.text, line, column);
    }
    std::string name = lex_name_chars();
    if (name.empty())
      return make(Tok::Error, std::string("expected a name after '") + c + "'", line, column);
    return make(kind, name, line, column);
  }
  if (c == '"') return lex_string(line, column);
  if (c == '-' && peek(1) == '>') {
    advance();
    advance();
    return make(Tok::Arrow, "->", line, column);
  }
  if (std::isdigit(static_cast<unsigned char>(c)) || c == '-') return lex_number(line, column);
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    std::string word;
    while (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '_') word += advance();
    if (word == "inf" || word == "nan") return make(Tok::Float, word, line, column);
    return make(Tok::Identifier, word, line, column);
  }
  advance();
  switch (c) {
    case '(': return make(Tok::LParen, "(", line, column);
    case ')': return make(Tok::RParen, ")", line, column);
    case '[': return make(Tok::LBracket, "[", line, column);
    case ']': return make(Tok::RBracket, "]", line, column);
    case '{': return make(Tok::LBrace, "{", line, column);
    case '}': return make(Tok::RBrace, "}", line, column);
    case '<': return make(Tok::Less, "<", line, column);
    case '>': return make(Tok::Greater, ">", line, column);
    case ',': return make(Tok::Comma, ",", line, column);
    case ':': return make(Tok::Colon, ":", line, column);
    case '=': return make(Tok::Equal, "=", line, column);
  }
  // A byte of a binary file or of a UTF-8 sequence prints as \xNN, not as half a character.
  static constexpr char kHex[] = "0123456789abcdef";
  const unsigned char byte = static_cast<unsigned char>(c);
  const std::string shown = byte >= 0x80 ? std::string{'\\', 'x', kHex[byte >> 4], kHex[byte & 15]}
                                         : escape_for_message(std::string_view(&c, 1));
  return make(Tok::Error, "unexpected character '" + shown + "'", line, column);
}

}  // namespace kiln::ir
