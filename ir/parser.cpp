// Recursive-descent parser for textual IR. One token of lookahead; every error says where
// (file:line:column), what was expected and what was found.
#include "ir/parser.h"

#include <filesystem>
#include <unordered_map>

#include "ir/diagnostic.h"
#include "ir/initializer.h"
#include "ir/kernel_region.h"
#include "ir/lexer.h"
#include "ir/op_registry.h"

namespace kiln::ir {

namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string file, std::string base_dir)
      : lexer_(text), file_(std::move(file)), base_dir_(std::move(base_dir)) {
    advance();
  }

  Graph parse() {
    expect_keyword("graph");
    graph_.name = expect(Tok::GraphName, "a graph name such as @model").text;
    parse_signature();
    expect(Tok::LBrace, "'{' to open the graph body");
    while (!at_keyword("return")) parse_node();
    parse_return();
    expect(Tok::RBrace, "'}' to close the graph");
    if (token_.kind != Tok::End) fail(token_, "unexpected " + describe(token_) + " after the graph");
    return std::move(graph_);
  }

 private:
  // --- tokens ---------------------------------------------------------------------------------
  void advance() {
    token_ = lexer_.next();
    if (token_.kind == Tok::Error) fail(token_, token_.text);
  }

  [[noreturn]] void fail(const Token& at, const std::string& message) const {
    throw Error(loc_of(at).render(), escape_for_message(message, 1000));  // names may hold \n
  }

  SourceLoc loc_of(const Token& at) const { return SourceLoc{file_, "", at.line, at.column}; }

  static std::string describe(const Token& token) {
    switch (token.kind) {
      case Tok::End: return "end of input";
      case Tok::Identifier: return "'" + token.text + "'";
      case Tok::ValueName: return "'%" + token.text + "'";
      case Tok::GraphName: return "'@" + token.text + "'";
      case Tok::String: return "string \"" + token.text + "\"";
      case Tok::Integer: case Tok::Float: return "number " + token.text;
      default: return std::string(token_kind_name(token.kind));
    }
  }

  Token expect(Tok kind, const std::string& what) {
    if (token_.kind != kind) fail(token_, "expected " + what + ", got " + describe(token_));
    Token taken = token_;
    advance();
    return taken;
  }

  bool accept(Tok kind) {
    if (token_.kind != kind) return false;
    advance();
    return true;
  }

  bool at_keyword(std::string_view word) const {
    return token_.kind == Tok::Identifier && token_.text == word;
  }

  void expect_keyword(std::string_view word) {
    if (!at_keyword(word))
      fail(token_, "expected '" + std::string(word) + "', got " + describe(token_));
    advance();
  }

  // --- pieces ---------------------------------------------------------------------------------
  // `dims`: a graph input's type, whose dims may also be dynamic, `batch<=16`
  // (ir/dynamic_dims.h); the first use of a name declares it with its bound.
  TensorType parse_type(DimMap* dims = nullptr) {
    const Token dtype_token = expect(Tok::Identifier, "a tensor type such as f32[1,3]");
    std::optional<DType> dtype = parse_dtype(dtype_token.text);
    if (!dtype)
      fail(dtype_token, "unknown dtype '" + dtype_token.text + "'; expected one of " +
                            std::string(dtype_names_list()));
    expect(Tok::LBracket, "'[' after the dtype");
    Shape shape;
    if (token_.kind != Tok::RBracket) {
      do {
        if (dims) dims->push_back({});
        if (dims && token_.kind == Tok::Identifier) {
          const Token symbol = token_;
          advance();
          expect(Tok::Less, "'<=' and the bound after the dynamic dim '" + symbol.text + "'");
          expect(Tok::Equal, "'<=' and the bound after the dynamic dim '" + symbol.text + "'");
          dims->back() = {declare_symbol(symbol, token_), 1};
        }
        const Token dim = token_;
        if (dim.kind != Tok::Integer) fail(dim, "expected a dimension, got " + describe(dim));
        advance();
        int64_t value = 0;
        try {
          value = std::stoll(dim.text);
        } catch (const std::out_of_range&) {
          fail(dim, "dimension " + dim.text + " is too large");
        }
        if (value < 1) fail(dim, "dimension must be at least 1, got " + dim.text);
        shape.push_back(value);
      } while (accept(Tok::Comma));
    }
    expect(Tok::RBracket, "']' to close the shape");
    if (!checked_num_elements(shape))
      fail(dtype_token, "shape " + shape_to_string(shape) + " has more than 2^48 elements");
    return TensorType{*dtype, shape};
  }

  // The index of dynamic dim `symbol` whose bound is the integer token `bound`; the same name
  // must give the same bound everywhere.
  int declare_symbol(const Token& symbol, const Token& bound) {
    if (bound.kind != Tok::Integer) fail(bound, "expected the bound of '" + symbol.text + "', got " + describe(bound));
    int64_t value = 0;
    try {
      value = std::stoll(bound.text);
    } catch (const std::out_of_range&) {
      fail(bound, "bound " + bound.text + " is too large");
    }
    for (size_t i = 0; i < graph_.symbols.size(); ++i)
      if (graph_.symbols[i].name == symbol.text) {
        if (graph_.symbols[i].bound != value)
          fail(bound, "dynamic dim '" + symbol.text + "' has bound " +
                          std::to_string(graph_.symbols[i].bound) + " elsewhere, " + bound.text + " here");
        return static_cast<int>(i);
      }
    graph_.symbols.push_back({symbol.text, value});
    return static_cast<int>(graph_.symbols.size()) - 1;
  }

  double parse_number(const std::string& what) {
    const Token number = token_;
    if (number.kind != Tok::Integer && number.kind != Tok::Float)
      fail(number, "expected " + what + ", got " + describe(number));
    advance();
    try {
      return std::stod(number.text);
    } catch (const std::exception&) {
      fail(number, "number " + number.text + " is out of range");
    }
  }

  Attribute parse_attribute_value() {
    const Token start = token_;
    if (start.kind == Tok::Integer) {
      advance();
      try {
        return static_cast<int64_t>(std::stoll(start.text));
      } catch (const std::out_of_range&) {
        fail(start, "integer " + start.text + " is out of range");
      }
    }
    if (start.kind == Tok::Float) return parse_number("a number");
    if (start.kind == Tok::String) {
      advance();
      return start.text;
    }
    if (at_keyword("true") || at_keyword("false")) {
      advance();
      return start.text == "true";
    }
    if (accept(Tok::LBracket)) {
      std::vector<Token> items;
      bool any_float = false;
      if (token_.kind != Tok::RBracket) {
        do {
          if (token_.kind != Tok::Integer && token_.kind != Tok::Float)
            fail(token_, "expected a number in the list, got " + describe(token_));
          any_float |= token_.kind == Tok::Float;
          items.push_back(token_);
          advance();
        } while (accept(Tok::Comma));
      }
      expect(Tok::RBracket, "']' to close the list");
      if (any_float) {
        std::vector<double> values;
        for (const Token& item : items) {
          try {
            values.push_back(std::stod(item.text));
          } catch (const std::out_of_range&) {  // 1e999 (and 1e-999) are no double
            fail(item, "number " + item.text + " is out of range");
          }
        }
        return values;
      }
      std::vector<int64_t> values;
      for (const Token& item : items) {
        try {
          values.push_back(std::stoll(item.text));
        } catch (const std::out_of_range&) {
          fail(item, "integer " + item.text + " is out of range");
        }
      }
      return values;
    }
    fail(start, "expected an attribute value, got " + describe(start));
  }

  // name = value, ... up to (not including) `close`.
  AttrMap parse_attr_entries(Tok close) {
    AttrMap attrs;
    if (token_.kind == close) return attrs;
    do {
      const Token name = expect(Tok::Identifier, "an attribute name");
      expect(Tok::Equal, "'=' after attribute '" + name.text + "'");
      if (attrs.count(name.text)) fail(name, "attribute '" + name.text + "' is given twice");
      attrs[name.text] = parse_attribute_value();
    } while (accept(Tok::Comma));
    return attrs;
  }

  ParamSource parse_param_source(const TensorType& type, const Token& name) {
    const Token kind = expect(Tok::Identifier, "a parameter source (an initializer such as "
                                               "zeros(), dense<[...]> or file(\"path\", \"key\"))");
    if (kind.text == "dense") {
      expect(Tok::Less, "'<' after dense");
      expect(Tok::LBracket, "'[' to open the values");
      InlineData data;
      if (token_.kind != Tok::RBracket) {
        do {
          const Token at = token_;
          const double value = parse_number("a number");
          if (!fits_dtype(value, type.dtype))  // never a silent infinity or wrapped integer
            fail(at, "parameter '" + name.text + "': " + at.text + " does not fit " +
                         std::string(dtype_name(type.dtype)));
          data.values.push_back(value);
        } while (accept(Tok::Comma));
      }
      expect(Tok::RBracket, "']' to close the values");
      expect(Tok::Greater, "'>' to close dense<...>");
      if (static_cast<int64_t>(data.values.size()) != num_elements(type.shape))
        fail(kind, "parameter '" + name.text + "': dense<> has " +
                       std::to_string(data.values.size()) + " values, " + type.to_string() +
                       " needs " + std::to_string(num_elements(type.shape)));
      return data;
    }
    expect(Tok::LParen, "'(' after '" + kind.text + "'");
    if (kind.text == "file") {
      ExternalData external;
      external.path = expect(Tok::String, "the weights file path").text;
      expect(Tok::Comma, "',' between path and tensor key");
      external.key = expect(Tok::String, "the tensor key").text;
      expect(Tok::RParen, "')' to close file(...)");
      std::filesystem::path path(external.path);
      if (path.is_relative() && !base_dir_.empty())
        external.path = (std::filesystem::path(base_dir_) / path).lexically_normal().string();
      return external;
    }
    InitializerSpec spec{kind.text, parse_attr_entries(Tok::RParen)};
    expect(Tok::RParen, "')' to close the initializer arguments");
    try {
      normalize_initializer(spec, type);
    } catch (const OpError& error) {
      fail(kind, "parameter '" + name.text + "': " + error.message);
    }
    return spec;
  }

  void define(Value* value, const Token& at) {
    auto [it, inserted] = scope_.emplace(value->name, value);
    if (!inserted)
      fail(at, "value '%" + value->name + "' is already defined at " + it->second->loc.render());
  }

  Value* use(const Token& at) {
    auto it = scope_.find(at.text);
    if (it == scope_.end()) fail(at, "use of undefined value '%" + at.text + "'");
    return it->second;
  }

  void parse_signature() {
    expect(Tok::LParen, "'(' to open the graph inputs");
    if (token_.kind != Tok::RParen) {
      do {
        const Token name = expect(Tok::ValueName, "an input such as %x: f32[1,3]");
        expect(Tok::Colon, "':' after the input name");
        DimMap dims;
        const TensorType type = parse_type(&dims);
        Value* input = graph_.add_input(name.text, type, loc_of(name));
        if (has_dynamic_dims(dims)) input->dynamic_dims = std::move(dims);
        define(input, name);
      } while (accept(Tok::Comma));
    }
    expect(Tok::RParen, "')' to close the graph inputs");
    if (at_keyword("params")) {
      advance();
      expect(Tok::LParen, "'(' after params");
      if (token_.kind != Tok::RParen) {
        do {
          const Token name = expect(Tok::ValueName, "a parameter such as %w: f32[4] = zeros()");
          expect(Tok::Colon, "':' after the parameter name");
          const TensorType type = parse_type();
          expect(Tok::Equal, "'=' and the parameter's source");
          ParamSource source = parse_param_source(type, name);
          define(graph_.add_parameter(name.text, type, std::move(source), loc_of(name)), name);
        } while (accept(Tok::Comma));
      }
      expect(Tok::RParen, "')' to close params");
    }
    expect(Tok::Arrow, "'->' and the result types");
    expect(Tok::LParen, "'(' to open the result types");
    if (token_.kind != Tok::RParen) {
      do {
        result_types_.push_back({token_, parse_type()});
      } while (accept(Tok::Comma));
    }
    expect(Tok::RParen, "')' to close the result types");
  }

  // "(%a, %b)": the operands of a node or kernel, each a defined value; `tokens` for locations.
  std::vector<Value*> parse_operands(std::vector<Token>& tokens) {
    expect(Tok::LParen, "'(' to open the operands");
    std::vector<Value*> operands;
    if (token_.kind != Tok::RParen) {
      do {
        tokens.push_back(expect(Tok::ValueName, "an operand such as %x"));
        operands.push_back(use(tokens.back()));
      } while (accept(Tok::Comma));
    }
    expect(Tok::RParen, "')' to close the operands");
    return operands;
  }

  // "{name = value, ...}", when present.
  AttrMap parse_optional_attrs() {
    AttrMap attrs;
    if (accept(Tok::LBrace)) {
      attrs = parse_attr_entries(Tok::RBrace);
      expect(Tok::RBrace, "'}' to close the attributes");
    }
    return attrs;
  }

  // ": f32[1,4], i32[2]": the written result types, each with its token for errors.
  std::vector<std::pair<Token, TensorType>> parse_result_types() {
    expect(Tok::Colon, "':' and the result type");
    std::vector<std::pair<Token, TensorType>> written;
    do written.push_back({token_, parse_type()});
    while (accept(Tok::Comma));
    return written;
  }

  void parse_node() {
    std::vector<Token> result_names;
    do result_names.push_back(expect(Tok::ValueName, "a result such as %y, or 'return'"));
    while (accept(Tok::Comma));
    expect(Tok::Equal, "'=' after the result name");
    const Token op_token = expect(Tok::Identifier, "an op name");
    if (op_token.text == op_name(OpId::Kernel)) return parse_kernel(result_names, op_token);
    const OpDef* def = OpRegistry::instance().find(op_token.text);
    if (!def) {
      std::string message = "unknown op '" + op_token.text + "'";
      if (auto hint = OpRegistry::instance().suggest(op_token.text))
        message += "; did you mean '" + *hint + "'?";
      fail(op_token, message);
    }
    std::vector<Token> operand_tokens;
    std::vector<Value*> operands = parse_operands(operand_tokens);
    AttrMap attrs = parse_optional_attrs();
    const std::vector<std::pair<Token, TensorType>> written = parse_result_types();
    std::string node_name;
    if (at_keyword("loc")) {
      advance();
      expect(Tok::LParen, "'(' after loc");
      node_name = expect(Tok::String, "the node name as a string").text;
      expect(Tok::RParen, "')' to close loc");
    }

    const std::string who = node_name.empty() ? def->name : def->name + " '" + node_name + "'";
    std::vector<TensorType> operand_types;
    for (Value* operand : operands) operand_types.push_back(operand->type);
    std::vector<TensorType> inferred;
    try {
      inferred = infer_op(*def, operand_types, attrs);
    } catch (const OpError& error) {
      const Token& at = error.input_index >= 0 && error.input_index < int(operand_tokens.size())
                            ? operand_tokens[error.input_index]
                            : op_token;
      fail(at, who + ": " + error.message);
    }
    if (inferred.size() != result_names.size())
      fail(result_names.front(), who + ": has " + std::to_string(inferred.size()) +
                                     " result(s), " + std::to_string(result_names.size()) +
                                     " named");
    if (written.size() != inferred.size())
      fail(written.front().first, who + ": " + std::to_string(written.size()) +
                                      " result type(s) written, the op has " +
                                      std::to_string(inferred.size()));
    std::vector<std::pair<std::string, TensorType>> results;
    for (size_t i = 0; i < inferred.size(); ++i) {
      if (written[i].second != inferred[i])
        fail(written[i].first, who + ": result type " + written[i].second.to_string() +
                                   " does not match the inferred " + inferred[i].to_string());
      results.push_back({result_names[i].text, inferred[i]});
    }
    Node* node = graph_.add_node(def->id, node_name, std::move(operands), std::move(attrs),
                                 results, loc_of(op_token));
    node->def = def;
    for (size_t i = 0; i < node->results.size(); ++i) {
      node->results[i]->loc = loc_of(result_names[i]);
      define(node->results[i], result_names[i]);
    }
  }

  // kernel @name_3(%a, %b) {kind = "loop"} : f32[4] { <nodes> return %r }  (ir/kernel_region.h)
  void parse_kernel(const std::vector<Token>& result_names, const Token& op_token) {
    if (depth_ > 0) fail(op_token, "kernels do not nest: a kernel's body holds plain ops");
    const Token name = expect(Tok::GraphName, "the kernel's name, such as @conv2d_bias_relu_0");
    std::vector<Token> operand_tokens;
    std::vector<Value*> operands = parse_operands(operand_tokens);
    if (operands.empty()) fail(name, "a kernel needs at least one operand");
    AttrMap attrs = parse_optional_attrs();
    const auto kind = attrs.find("kind");
    if (kind == attrs.end() || !std::holds_alternative<std::string>(kind->second) ||
        !is_kernel_kind(std::get<std::string>(kind->second)) || attrs.size() != 1)
      fail(name, "a kernel takes one attribute, kind = \"epilogue\", \"loop\", \"reduce\", \"single\" or \"multi_update\"");
    const std::vector<std::pair<Token, TensorType>> written = parse_result_types();
    if (written.size() != result_names.size())
      fail(result_names.front(), "kernel: " + std::to_string(result_names.size()) +
                                     " result(s) named, " + std::to_string(written.size()) +
                                     " type(s) written");
    expect(Tok::LBrace, "'{' to open the kernel's body");

    // The body is a graph of its own whose inputs carry the operands' names.
    Graph body;
    body.name = name.text;
    std::unordered_map<std::string, Value*> body_scope;
    for (size_t i = 0; i < operands.size(); ++i) {
      if (body_scope.count(operands[i]->name))
        fail(operand_tokens[i], "kernel operand '%" + operands[i]->name + "' is passed twice");
      body_scope[operands[i]->name] =
          body.add_input(operands[i]->name, operands[i]->type, loc_of(operand_tokens[i]));
    }
    std::swap(graph_, body);
    std::swap(scope_, body_scope);
    std::vector<std::pair<Token, TensorType>> outer_result_types = written;
    std::swap(result_types_, outer_result_types);
    ++depth_;
    while (!at_keyword("return")) {
      if (token_.kind == Tok::End || token_.kind == Tok::RBrace)
        fail(token_, "expected 'return' to end the kernel's body, got " + describe(token_));
      parse_node();
    }
    parse_return();
    --depth_;
    std::swap(graph_, body);
    std::swap(scope_, body_scope);
    std::swap(result_types_, outer_result_types);
    if (body.nodes().empty()) fail(name, "a kernel's body needs at least one node");
    expect(Tok::RBrace, "'}' to close the kernel's body");

    // "@conv2d_bias_relu_3": the printer appends the position; the name is what comes before.
    std::string base = name.text;
    const size_t underscore = base.find_last_of('_');
    if (underscore != std::string::npos && underscore + 1 < base.size() &&
        base.find_first_not_of("0123456789", underscore + 1) == std::string::npos)
      base.resize(underscore);
    std::vector<std::pair<std::string, TensorType>> results;
    for (size_t i = 0; i < written.size(); ++i) results.push_back({result_names[i].text, written[i].second});
    Node* node = graph_.add_node(OpId::Kernel, base, std::move(operands),
                                 std::move(attrs), results, loc_of(op_token));
    node->body = std::make_unique<Graph>(std::move(body));
    for (size_t i = 0; i < node->results.size(); ++i) {
      node->results[i]->loc = loc_of(result_names[i]);
      define(node->results[i], result_names[i]);
    }
  }

  void parse_return() {
    const Token keyword = token_;
    expect_keyword("return");
    std::vector<Token> names;
    if (token_.kind == Tok::ValueName) {
      do names.push_back(expect(Tok::ValueName, "a value to return"));
      while (accept(Tok::Comma));
    }
    if (names.empty()) fail(keyword, "a graph must return at least one value");
    if (names.size() != result_types_.size())
      fail(keyword, "returns " + std::to_string(names.size()) + " value(s), the signature says " +
                        std::to_string(result_types_.size()));
    for (size_t i = 0; i < names.size(); ++i) {
      Value* value = use(names[i]);
      if (value->type != result_types_[i].second)
        fail(names[i], "returned value '%" + names[i].text + "' has type " +
                           value->type.to_string() + ", the signature says " +
                           result_types_[i].second.to_string());
      graph_.outputs.push_back(value);
      graph_.output_names.push_back(value->name);
    }
  }

  Lexer lexer_;
  Token token_;
  std::string file_;
  std::string base_dir_;
  Graph graph_;
  std::unordered_map<std::string, Value*> scope_;
  std::vector<std::pair<Token, TensorType>> result_types_;
  int depth_ = 0;  // 1 inside a kernel's body
};

}  // namespace

Graph parse_graph(std::string_view text, const std::string& file, const std::string& base_dir) {
  return Parser(text, file, base_dir).parse();
}

}  // namespace kiln::ir
