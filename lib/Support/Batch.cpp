//===- Batch.cpp - many runs of a tool in one process ---------------------===//

#include "amp/Support/Batch.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace llvm;

void mlir::amp::runBatch(StringRef tool, StringRef file, unsigned timeoutSeconds, const char *argv0,
                         const char *overview) {
  auto die = [&](const Twine &msg) {
    errs() << tool << ": error: " << msg << "\n";
    exit(1);
  };
  std::ifstream in(file.str());
  if (!in)
    die("'" + file + "': cannot open");
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (line.empty())
      continue;
    SmallVector<StringRef> fields;
    StringRef(line).split(fields, '\t');
    if (fields.size() < 2 || fields[0].empty())
      die("'" + file + "' line " + Twine(no) + ": want LOG<TAB>ARG<TAB>ARG...");
    outs().flush();
    errs().flush();
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0)
      die("--batch: fork failed: " + Twine(std::strerror(errno)));
    if (pid == 0) {
      int fd = open(fields[0].str().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0)
        die("--batch: '" + fields[0] + "': cannot open: " + std::strerror(errno));
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
      if (timeoutSeconds)
        alarm(timeoutSeconds);
      // Kept for the process's life: the options may point into them.
      static std::vector<std::string> store;
      static std::vector<const char *> argv;
      store.assign(fields.begin(), fields.end());
      store[0] = argv0;
      for (const std::string &a : store)
        argv.push_back(a.c_str());
      cl::ResetAllOptionOccurrences();
      cl::ParseCommandLineOptions((int)argv.size(), argv.data(), overview);
      return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    outs() << no << " " << rc << "\n";
    outs().flush();
  }
  exit(0);
}
