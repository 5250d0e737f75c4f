//===- memfile.h - a fuzz input as a path ---------------------------------===//
//
// The runtime's readers take a path: the input goes into a memfd and is
// reached as /proc/self/fd/N, with no disk in between.
//
//===----------------------------------------------------------------------===//

#ifndef AMP_FUZZ_MEMFILE_H
#define AMP_FUZZ_MEMFILE_H

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

class MemFile {
public:
  MemFile(const void *data, size_t size, const char *suffix) {
    fd = memfd_create("amp-fuzz", 0);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size)) {
      std::perror("memfd");
      std::abort();
    }
    // The readers name arrays after the file (a bare .npy): keep a suffix.
    path = "/proc/self/fd/" + std::to_string(fd);
    (void)suffix;
  }
  ~MemFile() { close(fd); }
  const char *c_str() const { return path.c_str(); }

private:
  int fd;
  std::string path;
};

#endif
