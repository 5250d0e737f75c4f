//===- AutocastGraph.cpp - the precision picture --------------------------===//
//
// writePrecisionGraph (amp/Transforms/Autocast.h): the function as a
// Graphviz graph coloured by precision, written as .dot and, where the dot
// program is installed, rendered.
//
//===----------------------------------------------------------------------===//

#include "amp/Dialect/AMP/IR/AMPOps.h"
#include "amp/Transforms/Autocast.h"
#include "amp/Transforms/AutocastOpInterface.h"

#include "AutocastRules.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::amp;
using mlir::amp::autocast_detail::typeName;

static const char *colourOf(Type t) {
  Type e = getElementTypeOrSelf(t);
  if (e.isF16())
    return "#f4a261"; // orange
  if (e.isBF16())
    return "#e76f51"; // red-orange
  if (e.isF32())
    return "#8ecae6"; // blue
  return "#e9ecef";   // integers, booleans
}

static std::string dotEscape(llvm::StringRef s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out.push_back('\\');
    if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

FailureOr<std::vector<std::string>> mlir::amp::writePrecisionGraph(FunctionOpInterface func,
                                                                   llvm::StringRef path) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "digraph \"" << dotEscape(func.getName()) << "\" {\n"
     << "  rankdir=TB; node [style=filled, fontname=\"Helvetica\", "
        "fontsize=10];\n"
     << "  subgraph cluster_legend { label=\"element type\"; fontsize=10;\n"
     << "    l16 [label=\"f16\", fillcolor=\"#f4a261\"]; "
        "lb16 [label=\"bf16\", fillcolor=\"#e76f51\"]; "
        "l32 [label=\"f32\", fillcolor=\"#8ecae6\"]; "
        "lint [label=\"int / bool\", fillcolor=\"#e9ecef\"]; }\n";
  DenseMap<Value, std::string> ids;
  unsigned nextId = 0;
  for (BlockArgument arg : func.getArguments()) {
    std::string id = "a" + std::to_string(arg.getArgNumber());
    ids[arg] = id;
    std::string label;
    if (auto p = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrname::kParam))
      label = "param " + p.getValue().str();
    else if (auto i = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), attrname::kInput))
      label = "input " + i.getValue().str();
    else
      label = "arg " + std::to_string(arg.getArgNumber());
    os << "  " << id << " [shape=box, label=\"" << dotEscape(label) << "\\n"
       << dotEscape(typeName(arg.getType())) << "\", fillcolor=\"" << colourOf(arg.getType())
       << "\"];\n";
  }
  func->walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (op == func.getOperation())
      return WalkResult::advance();
    // The body of a linalg op is the op's own business: not drawn.
    WalkResult next = isa<AutocastOpInterface>(op) ? WalkResult::skip() : WalkResult::advance();
    bool isCast = autocast_detail::isCastOp(op);
    if (op->getName().getStringRef() == "tensor.empty")
      return next; // an init, not a computation
    std::string id = "n" + std::to_string(nextId++);
    for (Value r : op->getResults())
      ids[r] = id;
    Type shown = op->getNumResults() ? op->getResult(0).getType() : Type();
    std::string label = op->getName().getStringRef().str();
    if (!op->hasTrait<OpTrait::IsTerminator>() && !op->hasTrait<OpTrait::ConstantLike>() && !isCast)
      label = nodeNameOf(op) + "\n" + label;
    os << "  " << id << " [label=\"" << dotEscape(label);
    if (shown)
      os << "\\n" << dotEscape(typeName(shown));
    os << "\", shape=" << (isCast ? "cds" : "ellipse") << ", fillcolor=\""
       << (shown ? colourOf(shown) : "#ffffff") << "\"];\n";
    for (Value v : op->getOperands()) {
      auto it = ids.find(v);
      if (it != ids.end())
        os << "  " << it->second << " -> " << id << ";\n";
    }
    return next;
  });
  os << "}\n";
  if (llvm::Error e = llvm::writeToOutput(path, [&](llvm::raw_ostream &out) {
        out << text;
        return llvm::Error::success();
      }))
    return LogicalResult(func.emitError("cannot write '")
                         << path << "': " << llvm::toString(std::move(e)));
  std::vector<std::string> written{path.str()};
  if (auto dot = llvm::sys::findProgramByName("dot")) {
    for (llvm::StringRef fmt : {"svg", "png"}) {
      llvm::SmallString<256> out(path);
      llvm::sys::path::replace_extension(out, fmt);
      std::string flag = ("-T" + fmt).str(), o = ("-o" + out).str();
      llvm::StringRef args[] = {*dot, flag, o, path};
      if (llvm::sys::ExecuteAndWait(*dot, args) == 0)
        written.push_back(out.str().str());
      else
        return LogicalResult(func.emitError("graphviz 'dot' failed to render ") << out);
    }
  }
  return written;
}
