// The parsed form of a JinjaTemplate (jinja.h), shared by its parser (jinja.cpp) and its
// evaluator (jinja_render.cpp). Not part of the interface.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "eval/py_value.h"

namespace lmt::eval {

struct JinjaExpr;
using ExprPtr = std::shared_ptr<JinjaExpr>;

struct JinjaExpr {
  enum Kind {
    kLiteral,
    kName,
    kGetattr,
    kGetitem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kBinary,
    kCompare,
    kAnd,
    kOr,
    kCond,
    kList,
    kDict
  } kind;
  std::string text;           // the expression's source, for messages ("choices.label[0]")
  std::string name;           // name, attribute, filter, test, or binary operator
  PyValue value;              // kLiteral
  std::vector<ExprPtr> args;  // operands; call / filter / test arguments after the subject
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: the operators between args
  bool negated = false;          // kTest: `is not`
};

struct JinjaNode {
  enum Kind { kBody, kText, kOutput, kIf, kFor, kSet } kind;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value)
  std::vector<std::string> targets;  // kFor, kSet
  std::vector<std::pair<ExprPtr, std::shared_ptr<JinjaNode>>> branches;  // kIf
  std::shared_ptr<JinjaNode> body, else_body;                            // kFor, kIf (else)
  std::vector<std::shared_ptr<JinjaNode>> children;                      // kBody
};

// Renders `root` with `vars` as the top-level names. Throws UserError opening with `record`
// and `where`.
std::string jinja_render(const JinjaNode& root, const PyDict& vars, const std::string& where,
                         const std::string& record);

}  // namespace lmt::eval
