//===- Batch.h - many runs of a tool in one process ------------*- C++ -*-===//
//
// `--batch FILE`: amp-run and amp-translate run one job per line of FILE,
// "LOG<TAB>ARG<TAB>ARG..." (the tool's arguments for one run; its stdout and
// stderr go to LOG), each in a child forked from the one process, so the
// start-up (loading and initialising libLLVM / libMLIR, most of a small
// model's run) is paid once. A job's exit status and messages are those of a
// run of its own; a failing job does not stop the others.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_SUPPORT_BATCH_H
#define AMP_SUPPORT_BATCH_H

#include "llvm/ADT/StringRef.h"

namespace mlir::amp {

/// Runs the jobs of `file`. Call it after the tool's command line is
/// parsed, before any thread is started. In the parent it prints
/// "<line> <exit status>" per job (-N: ended by signal N; a job still
/// running after timeoutSeconds, unless 0, gets SIGALRM: -14) and exits 0;
/// a malformed file is an error naming the line (exit 1). It returns only
/// in a child, with the command-line options reset and parsed from the
/// job's line: the tool then goes on as for a run of its own.
void runBatch(llvm::StringRef tool, llvm::StringRef file, unsigned timeoutSeconds,
              const char *argv0, const char *overview);

} // namespace mlir::amp

#endif // AMP_SUPPORT_BATCH_H
