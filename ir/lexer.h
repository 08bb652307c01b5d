// Tokens of kiln's textual IR (see printer.h for the grammar by example).
#pragma once

#include <string>
#include <string_view>

namespace kiln::ir {

enum class Tok {
  End,
  Identifier,  // graph, params, return, loc, relu, f32, true, inf ...
  ValueName,   // %conv1, %0, %"a/b"  (text holds the name without '%' and quotes)
  GraphName,   // @mnist_cnn
  Integer,     // -12
  Float,       // 0.5, 1e-05, -inf, nan
  String,      // "tanh" (text holds the unescaped contents)
  LParen, RParen, LBracket, RBracket, LBrace, RBrace, Less, Greater,
  Comma, Colon, Equal, Arrow,
  Error,       // text holds the message
};

struct Token {
  Tok kind = Tok::End;
  std::string text;
  int line = 1;
  int column = 1;
};

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(source) {}
  Token next();

 private:
  char peek(size_t ahead = 0) const;
  char advance();
  void skip_space_and_comments();
  Token make(Tok kind, std::string text, int line, int column) const;
  Token lex_number(int line, int column);
  Token lex_string(int line, int column);
  std::string lex_name_chars();

  std::string_view source_;
  size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
};

// Characters allowed in an unquoted %value or @graph name.
bool is_plain_name(std::string_view name);
std::string_view token_kind_name(Tok kind);

}  // namespace kiln::ir
