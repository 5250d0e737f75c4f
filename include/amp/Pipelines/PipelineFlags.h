//===- PipelineFlags.h - the pipelines' options as tool flags ---*- C++ -*-===//
//
// The options of LossOptions / TrainingOptions / PrecisionOptions as a
// tool's command-line flags, from the same rows (PipelineOptions.h.inc) as
// the pipelines' textual options: amp-compile, amp-run and amp-translate
// declare none of them themselves.
//
//   static cl::OptionCategory cat("my-tool options");
//   static amp::TrainingFlags training(cat);   // --optimizer, --lr, ...
//   ... cl::ParseCommandLineOptions(argc, argv);
//   amp::TrainingOptions t = training.get();
//
// Lists take comma-separated values and repeat (--frozen a,b --frozen c).
//
//===----------------------------------------------------------------------===//

#ifndef AMP_PIPELINES_PIPELINEFLAGS_H
#define AMP_PIPELINES_PIPELINEFLAGS_H

#include "amp/Pipelines/Pipelines.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/JSON.h"

#include <vector>

namespace mlir::amp {

#define AMP_FLAG_OWN(FIELD, FLAG, TYPE, DEFAULT, HELP)                                             \
  llvm::cl::opt<TYPE> FIELD{FLAG, llvm::cl::desc(HELP), llvm::cl::init(TYPE(DEFAULT)),             \
                            llvm::cl::cat(category)};
#define AMP_FLAG_OPTION(STRUCT, MEMBER, PASSFIELD, FIELD, FLAG, TYPE, HELP)                        \
  llvm::cl::opt<TYPE> FIELD{FLAG, llvm::cl::desc(HELP), llvm::cl::init(STRUCT().MEMBER.PASSFIELD), \
                            llvm::cl::cat(category)};
#define AMP_FLAG_LIST(MEMBER, PASSFIELD, FIELD, FLAG, HELP)                                        \
  llvm::cl::list<std::string> FIELD{FLAG, llvm::cl::desc(HELP), llvm::cl::CommaSeparated,          \
                                    llvm::cl::cat(category)};

/// A group of flags: get() gives the options (a flag not given: its
/// default), all() the flags in declaration order, describe() each as
/// {"flag", "type" (str, int, float, bool, list), "default", "help"}: what
/// the Python API checks its keywords against.
struct FlagGroup {
  explicit FlagGroup(llvm::cl::OptionCategory &category) : category(category) {}
  FlagGroup(const FlagGroup &) = delete;
  FlagGroup &operator=(const FlagGroup &) = delete;
  llvm::cl::OptionCategory &category;
};

/// --loss-fn, --loss-of, --label.
struct LossFlags : FlagGroup {
  using FlagGroup::FlagGroup;
#define AMP_LOSS_OWN AMP_FLAG_OWN
#define AMP_LOSS_OPTION(...) AMP_FLAG_OPTION(LossOptions, __VA_ARGS__)
#define AMP_LOSS_LIST AMP_FLAG_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"

  void get(LossOptions &r) const;
  std::vector<const llvm::cl::Option *> all() const;
  void describe(llvm::json::Array &out) const;
};

/// The loss's flags and --optimizer, --lr, --loss-scaling, ...
struct TrainingFlags : LossFlags {
  using LossFlags::LossFlags;
#define AMP_TRAINING_OWN AMP_FLAG_OWN
#define AMP_TRAINING_OPTION(...) AMP_FLAG_OPTION(TrainingOptions, __VA_ARGS__)
#define AMP_TRAINING_LIST AMP_FLAG_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"

  TrainingOptions get() const;
  std::vector<const llvm::cl::Option *> all() const;
  void describe(llvm::json::Array &out) const;
};

/// --precision, --policy, --block-list, --f32-accumulators,
/// --keep-weight-casts.
struct PrecisionFlags : FlagGroup {
  using FlagGroup::FlagGroup;
#define AMP_PRECISION_OWN AMP_FLAG_OWN
#define AMP_PRECISION_OPTION(...) AMP_FLAG_OPTION(PrecisionOptions, __VA_ARGS__)
#define AMP_PRECISION_LIST AMP_FLAG_LIST
#include "amp/Pipelines/PipelineOptions.h.inc"

  PrecisionOptions get() const;
  std::vector<const llvm::cl::Option *> all() const;
  void describe(llvm::json::Array &out) const;
};

#undef AMP_FLAG_OWN
#undef AMP_FLAG_OPTION
#undef AMP_FLAG_LIST

/// `opt` as describe() gives it, its type inferred from how it parses
/// (a list; a flag without a value: bool; otherwise str) and no default:
/// for a tool's flags outside the rows.
llvm::json::Object describeFlag(const llvm::cl::Option &opt);

} // namespace mlir::amp

#endif // AMP_PIPELINES_PIPELINEFLAGS_H
