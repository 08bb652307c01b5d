// kiln::Error: every user error kiln reports (bad model, IR text, weights, data, package or
// flag), for the command-line tool and the C++ API alike. Installed as <kiln/error.h>.
//
// It carries where the problem is ("model.json: /nodes/3/inputs/1", "net.ir:12:7",
// "model.kiln") and what is wrong; what() is the one line the `kiln` tool prints:
// "model.json: /nodes/3/inputs/1: error: conv2d 'conv1': ...".
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

struct Diagnostic {
  std::string location;            // "model.json: /nodes/3/inputs/1", "net.ir:12:7", or empty
  std::string message;             // "conv2d 'conv1': weight has 3 input channels, input has 64"
  std::vector<std::string> notes;  // extra "note:" lines

  // "<location>: error: <message>" followed by one "note: ..." line per note.
  std::string render() const;
};

class Error : public std::runtime_error {
 public:
  explicit Error(Diagnostic diagnostic);
  Error(std::string location, std::string message);
  const Diagnostic& diagnostic() const { return diagnostic_; }

 private:
  Diagnostic diagnostic_;
};

}  // namespace kiln
