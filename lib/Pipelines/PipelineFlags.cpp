//===- PipelineFlags.cpp - the pipelines' options as tool flags -----------===//

#include "amp/Pipelines/PipelineFlags.h"

#include <memory>

using namespace mlir;
using namespace mlir::amp;
namespace json = llvm::json;

namespace {

const char *typeName(const std::string *) { return "str"; }
const char *typeName(const bool *) { return "bool"; }
const char *typeName(const int64_t *) { return "int"; }
const char *typeName(const double *) { return "float"; }

template <class T> json::Object row(const llvm::cl::opt<T> &o, const T &defaultValue) {
  return json::Object{{"flag", o.ArgStr.str()},
                      {"type", typeName(&defaultValue)},
                      {"default", defaultValue},
                      {"help", o.HelpStr.str()}};
}

json::Object row(const llvm::cl::list<std::string> &o) {
  return json::Object{{"flag", o.ArgStr.str()},
                      {"type", "list"},
                      {"default", json::Array()},
                      {"help", o.HelpStr.str()}};
}

} // namespace

// The X-macros of one row: its copy into the options `r`, its address in
// `r`, its description (defaults from `d`).
#define AMP_GET_OWN(FIELD, ...) r.FIELD = FIELD;
#define AMP_GET_OPTION(MEMBER, PASSFIELD, FIELD, ...) r.MEMBER.PASSFIELD = FIELD;
#define AMP_GET_LIST(MEMBER, PASSFIELD, FIELD, ...)                                                \
  r.MEMBER.PASSFIELD.assign(FIELD.begin(), FIELD.end());
#define AMP_ALL_OWN(FIELD, ...) r.push_back(std::addressof(FIELD));
#define AMP_ALL_OPTION(MEMBER, PASSFIELD, FIELD, ...) r.push_back(std::addressof(FIELD));
#define AMP_ALL_LIST(MEMBER, PASSFIELD, FIELD, ...) r.push_back(std::addressof(FIELD));
#define AMP_DESCRIBE_OWN(FIELD, ...) out.push_back(row(FIELD, d.FIELD));
#define AMP_DESCRIBE_OPTION(MEMBER, PASSFIELD, FIELD, ...)                                         \
  out.push_back(row(FIELD, d.MEMBER.PASSFIELD));
#define AMP_DESCRIBE_LIST(MEMBER, PASSFIELD, FIELD, ...) out.push_back(row(FIELD));

void LossFlags::get(LossOptions &r) const {
#define AMP_LOSS_OWN AMP_GET_OWN
#define AMP_LOSS_OPTION AMP_GET_OPTION
#define AMP_LOSS_LIST AMP_GET_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
}

std::vector<const llvm::cl::Option *> LossFlags::all() const {
  std::vector<const llvm::cl::Option *> r;
#define AMP_LOSS_OWN AMP_ALL_OWN
#define AMP_LOSS_OPTION AMP_ALL_OPTION
#define AMP_LOSS_LIST AMP_ALL_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
  return r;
}

void LossFlags::describe(json::Array &out) const {
  LossOptions d;
#define AMP_LOSS_OWN AMP_DESCRIBE_OWN
#define AMP_LOSS_OPTION AMP_DESCRIBE_OPTION
#define AMP_LOSS_LIST AMP_DESCRIBE_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
}

TrainingOptions TrainingFlags::get() const {
  TrainingOptions r;
  LossFlags::get(r);
#define AMP_TRAINING_OWN AMP_GET_OWN
#define AMP_TRAINING_OPTION AMP_GET_OPTION
#define AMP_TRAINING_LIST AMP_GET_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
  return r;
}

std::vector<const llvm::cl::Option *> TrainingFlags::all() const {
  std::vector<const llvm::cl::Option *> r = LossFlags::all();
#define AMP_TRAINING_OWN AMP_ALL_OWN
#define AMP_TRAINING_OPTION AMP_ALL_OPTION
#define AMP_TRAINING_LIST AMP_ALL_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
  return r;
}

void TrainingFlags::describe(json::Array &out) const {
  LossFlags::describe(out);
  TrainingOptions d;
#define AMP_TRAINING_OWN AMP_DESCRIBE_OWN
#define AMP_TRAINING_OPTION AMP_DESCRIBE_OPTION
#define AMP_TRAINING_LIST AMP_DESCRIBE_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
}

PrecisionOptions PrecisionFlags::get() const {
  PrecisionOptions r;
#define AMP_PRECISION_OWN AMP_GET_OWN
#define AMP_PRECISION_OPTION AMP_GET_OPTION
#define AMP_PRECISION_LIST AMP_GET_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
  return r;
}

std::vector<const llvm::cl::Option *> PrecisionFlags::all() const {
  std::vector<const llvm::cl::Option *> r;
#define AMP_PRECISION_OWN AMP_ALL_OWN
#define AMP_PRECISION_OPTION AMP_ALL_OPTION
#define AMP_PRECISION_LIST AMP_ALL_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
  return r;
}

void PrecisionFlags::describe(json::Array &out) const {
  PrecisionOptions d;
#define AMP_PRECISION_OWN AMP_DESCRIBE_OWN
#define AMP_PRECISION_OPTION AMP_DESCRIBE_OPTION
#define AMP_PRECISION_LIST AMP_DESCRIBE_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"
}

json::Object mlir::amp::describeFlag(const llvm::cl::Option &o) {
  const char *type = o.getNumOccurrencesFlag() == llvm::cl::ZeroOrMore ||
                             o.getNumOccurrencesFlag() == llvm::cl::OneOrMore
                         ? "list"
                     : o.getValueExpectedFlag() == llvm::cl::ValueOptional ? "bool"
                                                                           : "str";
  return json::Object{
      {"flag", o.ArgStr.str()}, {"type", type}, {"default", nullptr}, {"help", o.HelpStr.str()}};
}
